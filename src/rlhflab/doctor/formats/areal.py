"""AReaL (inclusionAI/AReaL): names built by its stats tracker's scopes, each statistic as
`/avg`, `/min`, `/max` (areal/utils/stats_tracker.py), committed per global step
(areal/utils/stats_logger.py). Batch statistics under `ppo_actor/` and update statistics
under `ppo_actor/update/` (areal/trainer/ppo/actor.py).

With the decoupled loss the rollout's logprobs are the behaviour policy's (the inference
engine, possibly stale) and `proximal_logprobs` the trainer's recompute:
`behave_imp_weight` = pi_prox / pi_behave and `behave_approx_kl` = logp_prox - logp_behave
compare the two (docs/en/best_practices/algo_perf.md: their averages "should remain very
close to 1.0", no number). `importance_weight` and `approx_kl` are the update's (new vs
proximal).
"""

from __future__ import annotations

from rlhflab.doctor.formats.spec import Column, Dialect

COLUMNS = {
    "ppo_actor/task_reward/avg": Column("reward/proxy_mean"),
    "ppo_actor/no_eos_ratios/avg": Column("response/truncated_frac"),
    "ppo_actor/update/entropy/avg": Column("policy/entropy"),
    "ppo_actor/update/approx_kl/avg": Column("policy/approxkl", estimator="k1"),
    "ppo_actor/update/clip_ratio/avg": Column("policy/clipfrac"),
    "ppo_actor/update/importance_weight/avg": Column("policy/ratio_mean"),
    "ppo_actor/update/actor_loss/avg": Column("policy/loss"),
    "ppo_actor/update/grad_norm": Column("policy/grad_norm"),
    "ppo_actor/update/lr": Column("lr"),
    "ppo_actor/update/behave_imp_weight/avg": Column("mismatch/is_ratio_mean"),
    "ppo_actor/update/behave_approx_kl/avg": Column("mismatch/kl", estimator="k1"),
    "ppo_actor/advantages/avg": Column("adv/mean"),
}
VOCABULARY = {
    "kl_coef": "actor.kl_ctl", "kl_estimator": "actor.kl_estimator", "clip_eps": "actor.eps_clip",
    "lr": "actor.optimizer.lr", "group_size": "gconfig.n_samples", "response_length": "gconfig.max_new_tokens",
    "importance_sampling_correction": "actor.rejection_sampling",
}

DIALECT = Dialect(
    name="areal",
    description="AReaL (ppo_actor/task_reward/avg, ppo_actor/update/entropy/avg, ppo_actor/update/behave_imp_weight/avg, "
                "...)",
    handles=("`/min`, `/max` not read; `behave_*` compare the trainer's proximal policy with the inference engine's"),
    columns=COLUMNS,
    markers=frozenset({"ppo_actor/task_reward/avg", "ppo_actor/update/entropy/avg", "ppo_actor/update/approx_kl/avg",
                       "ppo_actor/update/behave_imp_weight/avg", "ppo_actor/no_eos_ratios/avg",
                       "ppo_actor/update/clip_ratio/avg", "ppo_actor/seq_len/avg"}),
    ignored=frozenset({"*/min", "*/max", "ppo_actor/n_seqs", "ppo_actor/n_tokens", "ppo_actor/n_valid_tokens",
                       "ppo_actor/eps_clip", "ppo_actor/c_clip", "ppo_actor/use_dual_clip", "ppo_actor/version_stats/*",
                       "ppo_actor/update/update_successful"}),
    eval_prefixes=("eval-rollout/",),
    vocabulary=VOCABULARY,
)
