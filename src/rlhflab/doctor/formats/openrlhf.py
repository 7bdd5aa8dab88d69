"""OpenRLHF (OpenRLHF/OpenRLHF): the names its PPO/REINFORCE/GRPO trainers log to W&B and
TensorBoard under `train/` (`openrlhf/trainer/ppo_trainer.py`, `save_logs_and_checkpoints`),
with the step in `train/global_step` (W&B) or as the event step (TensorBoard).

`kl` is a per-token mean within each response of `--kl_estimator` (default k1), weighted
by response length across the batch; with `--use_kl_loss` it is the KL loss term.
`reward` is the reward model's score per response; `return` the KL-shaped return.
`ppo_kl` (old vs new policy) is approx-KL, not KL to the reference.
"""

from __future__ import annotations

from rlhflab.doctor.formats.launch import KeyList, Launcher, dotted
from rlhflab.doctor.formats.spec import Column, Dialect
from rlhflab.doctor.table import MetricTable

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
    # vLLM against the trainer (openrlhf/models/loss.py, with the IS correction on, v0.8.9 on): k1 per token
    "vllm_kl": Column("mismatch/kl", estimator="k1"),
}
# The command line since v0.10.2 (OpenRLHF/OpenRLHF commit ed62d0e2, "dotted config hierarchy",
# openrlhf/cli/train_ppo_ray.py), and the flat flags of earlier releases; metric names did not
# change, so a log does not tell which: fixes are written in the dotted flags and a note gives the
# flat ones.
VOCABULARY = {
    "kl_coef": "--algo.kl.init_coef", "kl_target": "--algo.kl.target", "kl_horizon": "--algo.kl.horizon",
    "kl_estimator": "--algo.kl.estimator", "clip_eps": "--actor.eps_clip", "value_clip_eps": "--critic.value_clip",
    "lr": "--actor.adam.lr", "entropy_coef": "--actor.entropy_coef", "response_length": "--rollout.max_new_tokens",
    "group_size": "--rollout.n_samples_per_prompt", "batch_size": "--rollout.batch_size",
    "importance_sampling_correction": "--algo.advantage.is_correction_enable",
}
FLAT_VOCABULARY = {
    "kl_coef": "--init_kl_coef", "kl_target": "--kl_target", "kl_horizon": "--kl_horizon",
    "kl_estimator": "--kl_estimator", "clip_eps": "--eps_clip", "value_clip_eps": "--value_clip",
    "lr": "--actor_learning_rate", "entropy_coef": "--entropy_loss_coef", "response_length": "--generate_max_len",
    "group_size": "--n_samples_per_prompt", "batch_size": "--rollout_batch_size",
    "importance_sampling_correction": "--enable_vllm_is_correction",
}


def _interpret(table: MetricTable, names: frozenset[str]) -> None:
    table.notes.append("OpenRLHF fixes are written in its flags since v0.10.2 (dotted: --algo.kl.init_coef, "
                       "--actor.eps_clip, ...); before v0.10.2 the same settings are "
                       + ", ".join(f"{VOCABULARY[k]} = {v}" for k, v in FLAT_VOCABULARY.items() if k in VOCABULARY))

DIALECT = Dialect(
    name="openrlhf",
    description="OpenRLHF PPO/REINFORCE++/GRPO (train/kl, train/reward, train/policy_loss, train/actor_lr, ...)",
    handles=("`kl` per token (`--kl_estimator`, k1 by default); `vllm_kl` the k1 KL of vLLM's policy to the trainer's; "
             "fixes as the dotted flags of v0.10.2 and later (commit ed62d0e2), a note gives the flat flags of older "
             "releases (`--init_kl_coef`, `--actor_learning_rate`): the metric names did not change, so a log does not "
             "tell which"),
    columns=COLUMNS,
    markers=frozenset({"policy_loss", "actor_lr", "return", "response_length", "total_length", "critic_loss",
                       "critic_lr", "ppo_clip_ratio", "global_step", "ptx_loss"}),
    ignored=frozenset({"global_step", "total_length", "values", "critic_lr", "ptx_loss", "perf/*",
                       "eval/global_step", "eval/epoch"}),
    prefixes=("train/",),
    eval_prefixes=("eval/",),
    vocabulary=VOCABULARY,
    interpret=_interpret,
)


# --- launching it (an ablation plan for its log: doctor/plan.py) ---------------------------------
OPENRLHF_KEYS = KeyList(
    "OpenRLHF 0.10.2-0.11.2 (dotted flags since 0.10.2, commit ed62d0e2, with no aliases for the flat ones)",
    "openrlhf/cli/train_ppo_ray.py",
    frozenset({"algo.kl.init_coef", "algo.kl.target", "algo.kl.horizon", "algo.kl.estimator", "actor.eps_clip",
               "critic.value_clip", "actor.adam.lr", "actor.entropy_coef", "rollout.max_new_tokens",
               "rollout.n_samples_per_prompt", "rollout.batch_size", "train.seed", "ckpt.output_dir", "ckpt.path"}))
LAUNCHER = Launcher("openrlhf", ("openrlhf",), "flags", "python3 -m openrlhf.cli.train_ppo_ray --actor.pretrain ... "
                   "--reward.pretrain ... --data.prompt_data ...",
                   dotted, ("train.seed",), (("ckpt.output_dir", "{out}"), ("ckpt.path", "{out}/ckpt")), OPENRLHF_KEYS,
                   bools="bare",
                   notes=("dotted flags are OpenRLHF >= 0.10.2's; before it the same settings are flat "
                          "(--init_kl_coef, --actor_learning_rate, --seed, --save_path)",))
