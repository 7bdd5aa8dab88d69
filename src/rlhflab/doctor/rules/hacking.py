"""Reward hacking: the proxy reward climbing while true quality falls (Gao et al. 2022),
measured against a gold signal when the log has one and inferred from drift otherwise."""

from __future__ import annotations

from typing import Callable

from rlhflab.doctor import causes
from rlhflab.doctor.findings import Evidence
from rlhflab.doctor.rules.kl import KL_ABS_LIMIT, KL_TOKEN_LIMIT
from rlhflab.doctor.rules.registry import Detection, Threshold, crossing, evidence, persistence, rule
from rlhflab.doctor.rules.reward_model import RM_SCORES_LENGTH, RM_WEAK
from rlhflab.doctor.rules.update import LARGE_FIRST_UPDATE, UNSCALED_REWARDS
from rlhflab.doctor.signals import baseline, first_where, smooth, window
from rlhflab.doctor.table import MetricTable, aligned

GOLD_DROP = Threshold(
    "GOLD_DROP", 0.15,
    "gold units (VADER compound scale) below the smoothed peak; Gao et al. 2022: gold reward peaks, then falls as "
    "the policy over-optimises the proxy")
PROXY_RISE = Threshold(
    "PROXY_RISE", 0.1, "standardised reward units above the proxy at the gold peak (Gao et al. 2022)")
HACK_PROXY_RISE = Threshold(
    "HACK_PROXY_RISE", 0.5,
    "standardised units over the run; no gold signal: proxy gains are suspect when they come with drift")
HACK_KL = Threshold(
    "HACK_KL", 0.75 * KL_ABS_LIMIT.value,
    "nats per sequence, 3/4 of KL_ABS_LIMIT: a proxy gain bought with that much KL is suspect (lm-human-preferences' "
    "6-nat target, Ziegler et al. 2019); healthy demo runs end below 6 nats")
LENGTH_DRIFT = Threshold(
    "LENGTH_DRIFT", 0.5, "relative change of mean length; Singhal et al. 2023: length is the most common proxy exploit")
EOS_DROP = Threshold(
    "EOS_DROP", 0.2, "absolute drop of the EOS rate; Huang et al. 2023: responses that stop ending are a reward/EOS "
                     "bug")
DISTINCT2_DRIFT = Threshold("DISTINCT2_DRIFT", 0.7, "the pipeline's diversity target keeps 70% of the start")

HACKING_CAUSES = (causes.kl_control, causes.exploitable_reward_model)
HACKING_CLUES = (causes.ZERO_KL, RM_SCORES_LENGTH, RM_WEAK, UNSCALED_REWARDS, LARGE_FIRST_UPDATE)


@rule("reward_hacking_gold", "reward_hacking", requires=("reward/proxy_mean", "reward/gold_mean"),
      thresholds=(GOLD_DROP, PROXY_RISE), causes=HACKING_CAUSES + (causes.step_size,), clues=HACKING_CLUES)
def reward_hacking_gold(table: MetricTable) -> Detection | None:
    """Proxy reward still rising while gold reward falls from its peak (Gao et al. 2022)."""
    proxy, gold = aligned(table.get("reward/proxy_mean"), table.get("reward/gold_mean"))
    n = len(gold)
    if n < 6:
        return None
    w = window(n)
    g, p = smooth(gold.values, w), smooth(proxy.values, w)
    peak = max(range(n), key=g.__getitem__)
    drop, rise = GOLD_DROP.value, PROXY_RISE.value
    if not (g[-1] < g[peak] - drop and p[-1] > p[peak] + rise):
        return None
    # Onset: the first step after the peak where gold is GOLD_DROP below it.
    below = next(i for i in range(peak, n) if g[i] < g[peak] - drop)
    return Detection(
        f"reward hacking: proxy rose {p[-1] - p[peak]:+.2f} while gold fell {g[-1] - g[peak]:+.2f} from its peak",
        "high", gold.steps[below],
        (evidence("reward/gold_mean", gold, below, f"smoothed gold {drop} below its peak {g[peak]:.3f} "
                  f"(step {gold.steps[peak]})", GOLD_DROP.source, peak=g[peak], peak_step=float(gold.steps[peak])),
         evidence("reward/proxy_mean", proxy, below, f"smoothed proxy > {rise} above its value at the gold peak",
                  PROXY_RISE.source, at_gold_peak=p[peak])),
    )


@rule("reward_hacking_proxy", "reward_hacking", requires=("reward/proxy_mean",),
      thresholds=(HACK_PROXY_RISE, HACK_KL, LENGTH_DRIFT, EOS_DROP, DISTINCT2_DRIFT),
      causes=HACKING_CAUSES + (causes.unended_responses, causes.step_size), clues=HACKING_CLUES)
def reward_hacking_proxy(table: MetricTable) -> Detection | None:
    """Without gold: proxy rising together with fast KL growth, length/EOS drift or lost diversity."""
    if table.get("reward/gold_mean") is not None:
        return None  # the gold rule decides
    proxy = table.get("reward/proxy_mean")
    n = len(proxy)
    w = window(n)
    p = smooth(proxy.values, w)
    if n < 6 or p[-1] - baseline(proxy.values, w) < HACK_PROXY_RISE.value:
        return None
    signals: list[tuple[int, Evidence]] = []

    def drift(metric: str, condition: Callable[[float, float], bool], threshold: str, source: str) -> None:
        series = table.get(metric)
        if series is None:
            return
        start = baseline(series.values, window(len(series)))
        onset = first_where(smooth(series.values, window(len(series))), lambda v: condition(v, start),
                            persistence(len(series)))
        if onset is not None:
            signals.append((series.steps[onset], evidence(metric, series, onset, threshold, source)))

    if table.get("kl/token_mean") is not None:  # per token where the log allows it, as kl_explosion
        per_token = HACK_KL.value / KL_ABS_LIMIT.value * KL_TOKEN_LIMIT.value
        drift("kl/token_mean", lambda v, s: v > per_token, f"kl/token_mean > {per_token:g} nats per token while "
              "proxy rises", f"{HACK_KL.value / KL_ABS_LIMIT.value:g} of KL_TOKEN_LIMIT, as HACK_KL of KL_ABS_LIMIT")
    else:
        drift("kl/mean", lambda v, s: v > HACK_KL.value, f"kl/mean > {HACK_KL.value} nats while proxy rises",
              HACK_KL.source)
    drift("response/length_mean", lambda v, s: abs(v - s) > LENGTH_DRIFT.value * s,
          f"mean length moved more than {LENGTH_DRIFT.value:.0%} from its start", LENGTH_DRIFT.source)
    drift("response/eos_rate", lambda v, s: v < s - EOS_DROP.value, f"EOS rate fell more than {EOS_DROP.value}",
          EOS_DROP.source)
    drift("response/distinct_2", lambda v, s: v < DISTINCT2_DRIFT.value * s,
          f"distinct-2 below {DISTINCT2_DRIFT.value:.0%} of its start", DISTINCT2_DRIFT.source)
    if not signals:
        return None
    onset = min(step for step, _ in signals)
    found = (evidence("reward/proxy_mean", proxy, 0, f"proxy rose > {HACK_PROXY_RISE.value} over the run",
                      HACK_PROXY_RISE.source),) + tuple(e for _, e in signals)
    return Detection("likely reward hacking (no gold signal): proxy rises with drift in "
                     + ", ".join(e.metric for _, e in signals), "medium", onset, found)


@rule("proxy_out_of_range", "reward_hacking", requires=("reward/proxy_mean",),
      causes=HACKING_CAUSES, clues=(causes.ZERO_KL,))
def proxy_out_of_range(table: MetricTable) -> Detection | None:
    """The policy is scored beyond anything the reward model saw in training: extrapolation."""
    limit = table.settings.reward_train_max
    if limit is None:
        return None
    return crossing(table, "reward/proxy_mean", lambda v: v > limit,
                    lambda s: f"proxy reward beyond the reward model's training range (max {limit:.2f})",
                    f"batch-mean proxy > the highest score on RM training data ({limit:.2f})",
                    "Gao et al. 2022; an RM is only trustworthy on the distribution it was trained on")
