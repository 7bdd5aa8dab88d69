"""ROLL (alibaba/ROLL): the RLVR pipeline's `tracker.log(values=metrics, step=global_step)`
(roll/pipeline/rlvr/rlvr_pipeline.py), names from its trackers-and-metrics guide and the
actor worker (`@sum`/`@max` reduce tags are stripped before logging since v0.2.0).

`critic/score/mean` is the raw reward, `critic/kl` the token KL in the reward with
`critic/kl_coef` its coefficient, `actor/kl_loss` the KL-to-reference loss (k3),
`actor/approxkl` the update's approx-KL (an mse estimator), `actor/policykl` its k1;
`actor/train_infer_ratio_token_mean` the mean ratio exp(logp_old - logp_infer) of the
trainer to the inference engine (roll/utils/train_infer_corrections.py; no published
limit, its filter defaults to [0.8, 1.2]).
"""

from __future__ import annotations

from rlhflab.doctor.formats.spec import Column, Dialect

COLUMNS = {
    "critic/score/mean": Column("reward/proxy_mean"),
    "critic/kl": Column("kl/token_mean"),
    "critic/kl_coef": Column("kl/coef"),
    "actor/kl_loss": Column("kl/token_mean", estimator="k3", fallback=True),
    "critic/entropy/mean": Column("policy/entropy"),
    "tokens/response_length/mean": Column("response/length_mean"),
    "actor/pg_loss": Column("policy/loss"),
    "actor/policykl": Column("policy/approxkl", estimator="k1"),
    "actor/clipfrac": Column("policy/clipfrac"),
    "actor/ratio_mean": Column("policy/ratio_mean"),
    "actor/ratio_max": Column("policy/ratio_max"),
    "actor/lr": Column("lr"),
    "actor/grad_norm": Column("policy/grad_norm"),
    "actor/train_infer_ratio_token_mean": Column("mismatch/is_ratio_mean"),
    "critic/loss": Column("value/loss"),
    "critic/clipfrac": Column("value/clipfrac"),
    "critic/advantages/mean": Column("adv/mean"),
}
VOCABULARY = {
    "kl_coef": "init_kl_coef", "kl_target": "target_kl", "kl_horizon": "kl_horizon", "clip_eps": "pg_clip",
    "value_clip_eps": "value_clip", "entropy_coef": "entropy_loss_coef", "lr": "actor_train.training_args.learning_rate",
    "group_size": "num_return_sequences_in_group", "response_length": "response_length",
    "batch_size": "rollout_batch_size", "importance_sampling_correction": "train_infer_correction.is_weight.enabled",
}

DIALECT = Dialect(
    name="roll",
    description="ROLL (critic/score/mean, critic/kl, actor/pg_loss, actor/approxkl, tokens/response_length/mean, ...)",
    handles=("`actor/approxkl` (an mse estimator) not read, `actor/policykl` (k1) is the approx-KL"),
    columns=COLUMNS,
    markers=frozenset({"actor/approxkl", "actor/policykl", "actor/ppo_ratio_clipfrac", "tokens/response_length/mean",
                       "critic/kl_coef", "actor/train_infer_ratio_token_mean", "actor/valid_sample_ratio",
                       "system/tps", "critic/entropy/mean"}),
    ignored=frozenset({"*/max", "*/min", "system/*", "time/*", "actor/approxkl", "actor/total_loss",
                       "actor/weighted_pg_loss", "actor/valid_samples", "actor/total_samples", "tokens/prompt_length/*",
                       "tokens/non_prompt_length/*", "actor/train_infer_*", "actor/*_mask_ratio"}),
    eval_prefixes=("val/",),
    vocabulary=VOCABULARY,
)
