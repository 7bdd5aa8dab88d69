"""SkyRL (NovaSky-AI/SkyRL): the trainer's `tracker.log(payload, step=global_step)`
(skyrl/train/trainer.py) with the policy worker's status under `policy/` and the critic's
under `critic/` (skyrl/backends/skyrl_train/workers/worker.py).

`policy/policy_kl` is the KL-to-reference loss (`use_kl_loss`, k3 by default);
`policy/rollout_train_logprobs_abs_diff_mean` the mean |logp_rollout - logp_trainer| per
token, and `policy/loss_metrics/is_ratio_mean` the importance ratio trainer/rollout
(off-policy correction); SkyRL publishes ranges for its knobs, no limit for these.
"""

from __future__ import annotations

from rlhflab.doctor.formats.spec import Column, Dialect

COLUMNS = {
    "policy/policy_loss": Column("policy/loss"),
    "policy/policy_entropy": Column("policy/entropy"),
    "policy/response_length": Column("response/length_mean"),
    "policy/policy_lr": Column("lr"),
    "policy/policy_kl": Column("kl/token_mean", estimator="k3"),
    "policy/grad_norm": Column("policy/grad_norm"),
    "policy/loss_metrics/clip_ratio": Column("policy/clipfrac"),
    "policy/rollout_train_logprobs_abs_diff_mean": Column("mismatch/logp_abs_diff"),
    "policy/loss_metrics/is_ratio_mean": Column("mismatch/is_ratio_mean"),
    "reward/avg_raw_reward": Column("reward/proxy_mean"),
    "loss/avg_kl": Column("kl/token_mean", fallback=True),
    "generate/avg_num_tokens": Column("response/length_mean", fallback=True),
    "critic/critic_loss": Column("value/loss"),
    "critic/values_clipfrac": Column("value/clipfrac"),
}
VOCABULARY = {
    "kl_coef": "trainer.algorithm.kl_loss_coef", "kl_estimator": "trainer.algorithm.kl_estimator_type",
    "clip_eps": "trainer.algorithm.eps_clip_low/eps_clip_high", "value_clip_eps": "trainer.algorithm.value_clip",
    "entropy_coef": "trainer.algorithm.entropy_loss_coef", "lr": "trainer.policy.optimizer_config.lr",
    "group_size": "generator.n_samples_per_prompt", "response_length": "generator.sampling_params.max_generate_length",
    "importance_sampling_correction": "trainer.algorithm.off_policy_correction",
}

DIALECT = Dialect(
    name="skyrl",
    description="SkyRL (policy/policy_loss, policy/policy_entropy, policy/policy_kl, reward/avg_raw_reward, ...)",
    handles=("`policy_kl` the KL loss (k3)"),
    columns=COLUMNS,
    markers=frozenset({"policy/policy_loss", "policy/policy_entropy", "policy/policy_kl", "policy/policy_lr",
                       "reward/avg_raw_reward", "policy/final_loss", "policy/rollout_train_logprobs_abs_diff_mean"}),
    ignored=frozenset({"timing/*", "trainer/epoch", "policy/final_loss", "critic/critic_lr", "critic/grad_norm",
                       "generate/*_num_tokens", "generate/batch_num_seq", "policy/*_std", "policy/*_max",
                       "policy/*_min", "policy/minibatch_*", "loss/avg_kl_max"}),
    vocabulary=VOCABULARY,
)
