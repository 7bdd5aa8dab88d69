"""Reward-model health, from stage 2's metrics: weak, overfit, scoring length."""

from __future__ import annotations

from rlhflab.doctor import causes
from rlhflab.doctor.causes import Clue
from rlhflab.doctor.findings import Cause, Evidence
from rlhflab.doctor.rules.registry import Detection, Threshold, rule
from rlhflab.doctor.table import MetricTable

RM_VAL_ACC_LIMIT = Threshold(
    "RM_VAL_ACC_LIMIT", 0.6,
    "the demo RM reaches ~0.75; human-labeller agreement in Ouyang et al. 2022 is ~0.73")
RM_GOLD_AGREEMENT_LIMIT = Threshold("RM_GOLD_AGREEMENT_LIMIT", 0.65, "the pipeline's RM target is 0.75")
RM_OVERFIT_GAP = Threshold("RM_OVERFIT_GAP", 0.15, "standard generalisation gap check")
RM_LENGTH_CORR_LIMIT = Threshold(
    "RM_LENGTH_CORR_LIMIT", 0.5,
    "Singhal et al. 2023, 'A Long Way to Go: Investigating Length Correlations in RLHF'")


def _last(table: MetricTable, metric: str) -> tuple[int, float]:
    s = table.get(metric)
    return s.steps[-1], s.values[-1]


def _rm_scores_length(table: MetricTable) -> Cause | None:
    if table.get("rm/length_corr") is None:
        return None
    _, corr = _last(table, "rm/length_corr")
    if abs(corr) > RM_LENGTH_CORR_LIMIT.value:
        return Cause("reward_model", f"the reward model's score follows length (corr {corr:+.2f})", None)
    return None


def _rm_weak(table: MetricTable) -> Cause | None:
    if table.get("rm/val_acc") is None:
        return None
    _, acc = _last(table, "rm/val_acc")
    if acc < RM_VAL_ACC_LIMIT.value:
        return Cause("reward_model", f"the reward model is weak (val acc {acc:.2f})", None)
    return None


RM_SCORES_LENGTH = Clue("rm_scores_length", 6, _rm_scores_length, "abs(final `rm/length_corr`) > RM_LENGTH_CORR_LIMIT")
RM_WEAK = Clue("rm_weak", 7, _rm_weak, "final `rm/val_acc` < RM_VAL_ACC_LIMIT")


@rule("rm_weak", "reward_model", requires=("rm/val_acc",), thresholds=(RM_VAL_ACC_LIMIT, RM_GOLD_AGREEMENT_LIMIT),
      causes=(causes.reward_model_data,))
def rm_weak(table: MetricTable) -> Detection | None:
    """Held-out label accuracy or gold agreement too low: the RM learned little."""
    found = []
    step, acc = _last(table, "rm/val_acc")
    if acc < RM_VAL_ACC_LIMIT.value:
        found.append(Evidence("rm/val_acc", step, {"end": acc}, f"final val accuracy < {RM_VAL_ACC_LIMIT.value}",
                              RM_VAL_ACC_LIMIT.source))
    if table.get("rm/gold_agreement") is not None:
        step, agree = _last(table, "rm/gold_agreement")
        if agree < RM_GOLD_AGREEMENT_LIMIT.value:
            found.append(Evidence("rm/gold_agreement", step, {"end": agree},
                                  f"final gold agreement < {RM_GOLD_AGREEMENT_LIMIT.value}",
                                  RM_GOLD_AGREEMENT_LIMIT.source))
    if not found:
        return None
    return Detection("weak reward model", "medium", 0, tuple(found))


@rule("rm_overfit", "reward_model", requires=("rm/train_acc", "rm/val_acc"), thresholds=(RM_OVERFIT_GAP,),
      causes=(causes.reward_model_data,))
def rm_overfit(table: MetricTable) -> Detection | None:
    """Train accuracy far above held-out accuracy at the end of training."""
    train, val = table.get("rm/train_acc"), table.get("rm/val_acc")
    tail = train.values[-max(1, len(train) // 4):]
    gap = sum(tail) / len(tail) - val.values[-1]
    if gap <= RM_OVERFIT_GAP.value:
        return None
    return Detection(
        f"reward model overfit: train accuracy {gap:+.2f} over held-out", "medium", 0,
        (Evidence("rm/train_acc", train.steps[-1], {"last_quarter_mean": sum(tail) / len(tail),
                                                     "val_acc": val.values[-1]},
                  f"train - val accuracy > {RM_OVERFIT_GAP.value}", RM_OVERFIT_GAP.source),),
    )


@rule("rm_length_bias", "reward_model", requires=("rm/length_corr",), thresholds=(RM_LENGTH_CORR_LIMIT,),
      causes=(causes.reward_model_length,))
def rm_length_bias(table: MetricTable) -> Detection | None:
    """The reward model's score correlates with response length."""
    step, corr = _last(table, "rm/length_corr")
    if abs(corr) <= RM_LENGTH_CORR_LIMIT.value:
        return None
    return Detection(
        f"reward model scores length (corr {corr:+.2f})", "medium", 0,
        (Evidence("rm/length_corr", step, {"end": corr}, f"|corr(score, length)| > {RM_LENGTH_CORR_LIMIT.value}",
                  RM_LENGTH_CORR_LIMIT.source),),
    )
