"""trlX (CarperAI/trlx): the names its PPO trainer logs through accelerate's trackers
(`trlx/models/modeling_ppo.py` loss stats, `trlx/trainer/accelerate_ppo_trainer.py`
rollout stats, `accelerate_base_trainer.py` evaluation).

`policy/sqrt_kl` is the square root of the batch mean of the per-sequence sum of
exp(d) - 1 - d with d = logp - ref (a k3-like estimator of KL to the reference): KL per
sequence is its square. `policy/approx_kl` is old vs new policy (approx-KL), not KL to
the reference. Rollout scores are `rollout_scores/mean` (later) or `exp_scores/mean`.
"""

from __future__ import annotations

from rlhflab.doctor.formats.spec import Column, Dialect
from rlhflab.doctor.table import MetricTable

COLUMNS = {
    "rollout_scores/mean": Column("reward/proxy_mean"),
    "exp_scores/mean": Column("reward/proxy_mean", fallback=True),
    "rollout_scores/std": Column("reward/proxy_std"),
    "exp_scores/std": Column("reward/proxy_std", fallback=True),
    "kl_ctl_value": Column("kl/coef"),
    "policy/approx_kl": Column("policy/approxkl"),
    "policy/clipfrac": Column("policy/clipfrac"),
    "losses/policy_loss": Column("policy/loss"),
    "losses/value_loss": Column("value/loss"),
    "values/clipfrac": Column("value/clipfrac"),
    "ratio": Column("policy/ratio_mean"),
    "learning_rate_group_0": Column("lr"),
}
VOCABULARY = {
    "kl_coef": "method.init_kl_coef", "kl_target": "method.target", "kl_horizon": "method.horizon",
    "clip_eps": "method.cliprange", "value_clip_eps": "method.cliprange_value", "lr": "optimizer.kwargs.lr",
    "response_length": "method.gen_kwargs.max_new_tokens", "batch_size": "train.batch_size",
}


def _interpret(table: MetricTable, names: frozenset[str]) -> None:
    """KL per sequence from `policy/sqrt_kl` (its square)."""
    root = table.series.pop("policy/sqrt_kl", None)
    if root is not None and table.get("kl/mean") is None:
        table.series["kl/mean"] = root.squared()
        table.estimators["kl/mean"] = "k3"
        table.unknown = [n for n in table.unknown if n != "policy/sqrt_kl"]
        table.notes.append("kl/mean is policy/sqrt_kl squared (trlX logs the square root of the per-sequence KL)")


DIALECT = Dialect(
    name="trlx",
    description="trlX PPO (policy/sqrt_kl, kl_ctl_value, rollout_scores/*, losses/*), via accelerate's trackers",
    handles=("KL per sequence is `policy/sqrt_kl` squared"),
    columns=COLUMNS,
    markers=frozenset({"policy/sqrt_kl", "kl_ctl_value", "rollout_scores/mean", "exp_scores/mean",
                       "losses/total_loss", "losses/policy_loss", "policy/approx_kl", "padding_percentage"}),
    ignored=frozenset({"losses/total_loss", "values/*", "old_values/*", "returns/*", "time/*", "padding_percentage",
                       "policy/kl_per_token", "rollout_scores/running_*", "exp_scores/running_*", "metrics/*",
                       "learning_rate_group_*"}),
    vocabulary=VOCABULARY,
    interpret=_interpret,
)
