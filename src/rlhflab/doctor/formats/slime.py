"""slime (THUDM/slime): names logged under `train/`, `rollout/` and `eval/`, each with its
own step (`train/step`, `rollout/step`, `eval/step`; slime/observability/logging_utils.py).
Training names from `slime/backends/megatron_utils/model.py` and `loss.py`; rollout names
from `slime/observability/rollout_metrics.py`.

`train/entropy_loss` is the mean entropy (not multiplied by its coefficient); `train/ppo_kl`
the update's approx-KL (old vs new); `train/kl_loss` the KL to the reference when
`--use-kl-loss`; `train/train_rollout_logprob_abs_diff` the mean |logp_train - logp_rollout|,
which slime asserts under 0.1 by default (`--ci-train-rollout-logprob-abs-diff-threshold`).
"""

from __future__ import annotations

from rlhflab.doctor.formats.spec import Column, Dialect

COLUMNS = {
    "train/pg_loss": Column("policy/loss"),
    "train/entropy_loss": Column("policy/entropy"),
    "train/pg_clipfrac": Column("policy/clipfrac"),
    "train/ppo_kl": Column("policy/approxkl", estimator="k1"),
    "train/kl_loss": Column("kl/token_mean"),
    "train/grad_norm": Column("policy/grad_norm"),
    "train/train_rollout_logprob_abs_diff": Column("mismatch/logp_abs_diff"),
    "train/tis": Column("mismatch/is_ratio_mean"),
    "train/critic-value_loss": Column("value/loss"),
    "rollout/raw_reward": Column("reward/proxy_mean"),
    "rollout/rewards": Column("reward/proxy_mean", fallback=True),
    "rollout/response_len/mean": Column("response/length_mean"),
    "rollout/response_lengths": Column("response/length_mean", fallback=True),
    "rollout/truncated_ratio": Column("response/truncated_frac"),
}
VOCABULARY = {
    "kl_coef": "--kl-loss-coef", "clip_eps": "--eps-clip", "value_clip_eps": "--value-clip",
    "entropy_coef": "--entropy-coef", "lr": "--lr", "group_size": "--n-samples-per-prompt",
    "response_length": "--rollout-max-response-len", "batch_size": "--rollout-batch-size",
    "importance_sampling_correction": "--use-tis",
}

DIALECT = Dialect(
    name="slime",
    description="slime (train/pg_loss, train/entropy_loss, train/ppo_kl, train/train_rollout_logprob_abs_diff, "
                "rollout/raw_reward, ...)",
    handles=("`entropy_loss` is the entropy; `ppo_kl` old vs new"),
    columns=COLUMNS,
    markers=frozenset({"train/train_rollout_logprob_abs_diff", "train/pg_clipfrac", "train/ppo_kl",
                       "train/entropy_loss", "train/pg_loss", "rollout/truncated_ratio", "rollout/response_len/mean",
                       "rollout/raw_reward", "train/step", "rollout/step"}),
    ignored=frozenset({"rollout/step", "eval/step", "perf/*", "train/lr-pg_*", "train/global_batch_size",
                       "rollout/log_probs", "rollout/ref_log_probs", "rollout/rollout_log_probs", "rollout/total_lengths",
                       "rollout/response_len/*", "rollout/repetition_frac", "rollout/zero_std/*"}),
    eval_prefixes=("eval/",),
    vocabulary=VOCABULARY,
)
