"""OpenRLHF (OpenRLHF/OpenRLHF): the names its PPO/REINFORCE/GRPO trainers log to W&B and
TensorBoard under `train/` (`openrlhf/trainer/ppo_trainer.py`, `save_logs_and_checkpoints`),
with the step in `train/global_step` (W&B) or as the event step (TensorBoard).

`kl` is a per-token mean within each response of `--kl_estimator` (default k1), weighted
by response length across the batch; with `--use_kl_loss` it is the KL loss term.
`reward` is the reward model's score per response; `return` the KL-shaped return.
`ppo_kl` (old vs new policy) is approx-KL, not KL to the reference.
"""

from __future__ import annotations

from rlhflab.doctor.formats.spec import Column, Dialect

COLUMNS = {
    "kl": Column("kl/token_mean", estimator="k1"),
    "reward": Column("reward/proxy_mean"),
    "return": Column("reward/total_mean"),
    "response_length": Column("response/length_mean"),
    "policy_loss": Column("policy/loss"),
    "actor_lr": Column("lr"),
    "entropy_loss": Column("policy/entropy"),  # logged as masked_mean(entropy): the entropy itself
    "ppo_clip_ratio": Column("policy/clipfrac"),
    "ppo_kl": Column("policy/approxkl", estimator="k1"),
    "critic_loss": Column("value/loss"),
}
VOCABULARY = {
    "kl_coef": "--init_kl_coef", "kl_target": "--kl_target", "kl_horizon": "--kl_horizon",
    "kl_estimator": "--kl_estimator", "clip_eps": "--eps_clip", "value_clip_eps": "--value_clip",
    "lr": "--actor_learning_rate", "entropy_coef": "--entropy_loss_coef", "response_length": "--generate_max_len",
    "group_size": "--n_samples_per_prompt", "batch_size": "--rollout_batch_size",
}

DIALECT = Dialect(
    name="openrlhf",
    description="OpenRLHF PPO/REINFORCE++/GRPO (train/kl, train/reward, train/policy_loss, train/actor_lr, ...)",
    columns=COLUMNS,
    markers=frozenset({"policy_loss", "actor_lr", "return", "response_length", "total_length", "critic_loss",
                       "critic_lr", "ppo_clip_ratio", "global_step", "ptx_loss"}),
    ignored=frozenset({"global_step", "total_length", "values", "critic_lr", "ptx_loss", "vllm_kl", "perf/*",
                       "eval/global_step", "eval/epoch"}),
    prefixes=("train/",),
    eval_prefixes=("eval/",),
    vocabulary=VOCABULARY,
)
