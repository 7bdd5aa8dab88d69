"""Reward hacking: the proxy reward climbing while true quality falls (Gao et al. 2022),
measured against a gold signal when the log has one and inferred from drift otherwise."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Callable

from rlhflab.doctor import causes
from rlhflab.doctor.findings import Evidence
from rlhflab.doctor.metrics import EVAL_PREFIX, KNOWN, REWARD_FUNCTION_PREFIX
from rlhflab.doctor.rules.kl import kl_limit, level
from rlhflab.doctor.rules.registry import Detection, Threshold, crossing, evidence, persistence, rule
from rlhflab.doctor.rules.reward_model import RM_SCORES_LENGTH, RM_WEAK
from rlhflab.doctor.rules.update import LARGE_FIRST_UPDATE, UNSCALED_REWARDS
from rlhflab.doctor.signals import baseline, first_where, noise_sigma, smooth, window
from rlhflab.doctor.table import MetricTable, Series, aligned
from rlhflab.doctor.truth import RatedPoint, significantly_below

GOLD_DROP = Threshold(
    "GOLD_DROP", 3.0,
    "standard deviations of the gold's own step-to-step noise (signals.noise_sigma) that its smoothed level ends below "
    "its smoothed peak, so that any gold or held-out column, in any unit, is read the same way (Gao et al. 2022: gold "
    "peaks, then falls as the policy over-optimises the proxy). Fitted on rlhflab runs (bench/rule_calibration.py): "
    "healthy 0.1-1.9 (3 seeds, adaptive KL), gold falling 11.3-18.6 (kl_coef=0 x4, reward_scale_100x); checked on "
    "TRL runs labelled by their gold: healthy 0-2.1 (the margin, 1.4x), over-optimised 4.8-8.7 (length reward, cold "
    "sampling, PPO beta = 0); the 30x learning rates fall 2.0-2.5 sigma of a very noisy gold and are left to the KL "
    "rules")
PROXY_RISE = Threshold(
    "PROXY_RISE", 1.0,
    "standard deviations of the proxy's own noise that the smoothed proxy ends above its level at the gold peak: the "
    "proxy still gaining while gold falls (Gao et al. 2022); a proxy that falls with gold is another failure")
GOLD_STALL_SHARE = Threshold(
    "GOLD_STALL_SHARE", 0.25,
    "of the run since the gold's smoothed peak: that long without a new best while the proxy keeps rising is a run "
    "buying proxy reward only (Gao et al. 2022: past the gold peak more optimisation does not help); a note")
PROXY_STALL_RISE = Threshold(
    "PROXY_STALL_RISE", 3.0, "standard deviations of the proxy's noise gained since the gold's peak")
HACK_PROXY_RISE = Threshold(
    "HACK_PROXY_RISE", 2.0,
    "standard deviations of the proxy's own noise gained over the run (signals.noise_sigma), in whatever unit the "
    "trainer logs its reward: without a gold signal a proxy gain beyond its noise is suspect when it comes with drift. "
    "A gate, not a verdict: healthy labelled runs gain 0.8-25 sigma (bench/rule_calibration.py), the drift signals "
    "decide")
HACK_KL_SHARE = Threshold(
    "HACK_KL_SHARE", 0.75,
    "of the KL limit kl_explosion holds the run to (per token, the adaptive target's, or the early-level growth): a "
    "proxy gain bought with that much KL is suspect (Ziegler et al. 2019's 6-nat target; Gao et al. 2022)")
LENGTH_DRIFT = Threshold(
    "LENGTH_DRIFT", 0.5, "relative change of mean length; Singhal et al. 2023: length is the most common proxy exploit")
EOS_DROP = Threshold(
    "EOS_DROP", 0.2, "absolute drop of the EOS rate; Huang et al. 2023: responses that stop ending are a reward/EOS "
                     "bug")
DISTINCT2_DRIFT = Threshold("DISTINCT2_DRIFT", 0.7, "the pipeline's diversity target keeps 70% of the start")

HACKING_CAUSES = (causes.kl_control, causes.exploitable_reward_model)
HACKING_CLUES = (causes.ZERO_KL, RM_SCORES_LENGTH, RM_WEAK, UNSCALED_REWARDS, LARGE_FIRST_UPDATE)


@dataclass(frozen=True)
class GoldCurves:
    """The gold (or held-out) score and the proxy at the steps both have: raw, smoothed,
    each one's noise sigma (signals.noise_sigma), and the index of the smoothed gold's peak."""

    gold: Series
    proxy: Series
    g: list[float]
    p: list[float]
    peak: int
    gold_noise: float
    proxy_noise: float

    @staticmethod
    def of(table: MetricTable) -> "GoldCurves | RatedCurves | None":
        """None when the two share fewer than 6 steps; a rated truth (doctor/truth.py) is read
        point by point with its intervals (`RatedCurves`)."""
        if table.truth is not None:
            return RatedCurves.of(table)
        proxy, gold = aligned(table.get("reward/proxy_mean", any_unit=True),
                              table.get("reward/gold_mean", any_unit=True))
        n = len(gold)
        if n < 6:
            return None
        w = window(n)
        g = smooth(gold.values, w)
        return GoldCurves(gold, proxy, g, smooth(proxy.values, w), max(range(n), key=g.__getitem__),
                          noise_sigma(gold.values), noise_sigma(proxy.values))

    def fall_onset(self) -> int | None:
        """Where the smoothed gold first lies GOLD_DROP sigma below its peak, when it ends
        there too; else None."""
        drop = GOLD_DROP.value * self.gold_noise
        if self.gold_noise <= 0 or self.g[-1] >= self.g[self.peak] - drop:
            return None
        return next(i for i in range(self.peak, len(self.g)) if self.g[i] < self.g[self.peak] - drop)

    def proxy_gain(self) -> float:
        """The smoothed proxy's change since the gold's peak."""
        return self.p[-1] - self.p[self.peak]

    def stalled(self) -> bool:
        """No new best for GOLD_STALL_SHARE of the run (the points since the peak)."""
        return len(self.g) - 1 - self.peak >= GOLD_STALL_SHARE.value * len(self.g)

    def gold_evidence(self, index: int) -> Evidence:
        return evidence("reward/gold_mean", self.gold, index, f"smoothed gold {GOLD_DROP.value:g} sigma "
                        f"({GOLD_DROP.value * self.gold_noise:.3g}) below its peak {self.g[self.peak]:.3g} (step "
                        f"{self.gold.steps[self.peak]})", GOLD_DROP.source, peak=self.g[self.peak],
                        peak_step=float(self.gold.steps[self.peak]), noise_sigma=self.gold_noise)


@dataclass(frozen=True)
class RatedCurves:
    """A rated truth (a rating study's step bins, each a mean with its interval) and the proxy
    averaged over each bin's steps. The points are read as they are, without smoothing: each
    is already an average over its bin. A fall counts where each of the last
    RATED_FALL_POINTS points lies significantly below the peak (`significantly_below`), dated
    at the first point below the peak's own interval; a stall where every point after the
    peak has its upper bound below the peak's mean (confidently no new best)."""

    gold: Series  # the rated means at their points' steps
    proxy: Series  # the proxy's mean over each point's bin
    g: list[float]
    p: list[float]
    peak: int
    gold_noise: float  # 0: a rated point carries its own interval instead
    proxy_noise: float
    points: tuple[RatedPoint, ...]

    @staticmethod
    def of(table: MetricTable) -> "RatedCurves | None":
        proxy = table.get("reward/proxy_mean", any_unit=True)
        if proxy is None:
            return None
        points, means = [], []
        for point in table.truth.points:
            inside = [v for step, v in zip(proxy.steps, proxy.values) if point.first_step <= step <= point.last_step]
            if inside:
                points.append(point)
                means.append(sum(inside) / len(inside))
        if len(points) < 3:
            return None
        g = [p.mean for p in points]
        steps = tuple(p.step for p in points)
        return RatedCurves(Series(steps, tuple(g)), Series(steps, tuple(means)), g, means,
                           max(range(len(g)), key=g.__getitem__), 0.0, noise_sigma(proxy.values), tuple(points))

    def fall_onset(self) -> int | None:
        """When each of the last RATED_FALL_POINTS points lies significantly below the peak (the fall, tested),
        the first point after the peak whose mean lies below the peak's interval (the fall's
        start, dated as the smoothed rule dates a dense gold: the first point clearly off
        the peak's level); else None."""
        peak = self.points[self.peak]
        last = self.points[-int(RATED_FALL_POINTS.value):]
        if len(self.points) - 1 - self.peak < len(last) or not all(significantly_below(peak, q) for q in last):
            return None
        return next(i for i in range(self.peak + 1, len(self.points)) if self.points[i].mean < peak.low)

    def proxy_gain(self) -> float:
        return self.p[-1] - self.p[self.peak]

    def stalled(self) -> bool:
        later = self.points[self.peak + 1:]
        return (len(later) >= GOLD_STALL_SHARE.value * len(self.points)
                and all(q.high < self.points[self.peak].mean for q in later))

    def gold_evidence(self, index: int) -> Evidence:
        peak, point = self.points[self.peak], self.points[index]
        return evidence("reward/gold_mean", self.gold, index, f"rated {point.mean:.3g} [{point.low:.3g}, "
                        f"{point.high:.3g}] below the peak {peak.mean:.3g} [{peak.low:.3g}, {peak.high:.3g}] (step "
                        f"{peak.step}) by more than the root sum of squares of the facing half-widths",
                        RATED_FALL_SOURCE, peak=peak.mean,
                        peak_step=float(peak.step), peak_low=peak.low, low=point.low, high=point.high)


RATED_FALL_POINTS = Threshold(
    "RATED_FALL_POINTS", 2,
    "rated points at the end of the run that must each lie significantly below the peak: the peak is the highest of "
    "~10 noisy means, so a single low point after it is often chance. Chosen on bench/rated_truth.py's runs (demo "
    "kl_coef=0 at 3x the iterations, 3 healthy seeds; 2 simulated raters, 2 noise levels, 4-32 ratings a bin, 10 "
    "draws each): with 1 point (--fall-points 1) 10 of 240 healthy draws raised a gold finding and 57 of 80 hacked "
    "draws were caught; with 2, 3 of 240 and 46 of 80. Checked on runs it was not chosen on (seed 1's kl_coef=0 run, "
    "healthy seed 3; --held-out): 2 of 80 healthy draws, 36 of 80 hacked")
RATED_FALL_SOURCE = ("a rating study's 95% intervals (items and raters resampled): two bins differ when the gap between "
                     "their means exceeds the root sum of squares of the half-widths facing each other (the 95% test "
                     "of a difference of two independent estimates)")


@rule("reward_hacking_gold", "reward_hacking", requires=("reward/proxy_mean", "reward/gold_mean"),
      thresholds=(GOLD_DROP, PROXY_RISE, RATED_FALL_POINTS), causes=HACKING_CAUSES + (causes.step_size,), clues=HACKING_CLUES,
      relative=("reward/proxy_mean", "reward/gold_mean"))
def reward_hacking_gold(table: MetricTable) -> Detection | None:
    """Proxy reward still rising while the gold or held-out score falls from its peak (Gao
    et al. 2022), each measured in its own noise."""
    curves = GoldCurves.of(table)
    onset = curves.fall_onset() if curves is not None else None
    rise = PROXY_RISE.value * curves.proxy_noise if curves is not None else 0.0
    if onset is None or curves.proxy_gain() <= rise:
        return None
    return Detection(
        f"reward hacking: proxy rose {curves.proxy_gain():+.3g} while gold fell "
        f"{curves.g[-1] - curves.g[curves.peak]:+.3g} from its peak", "high", curves.gold.steps[onset],
        (curves.gold_evidence(onset),
         evidence("reward/proxy_mean", curves.proxy, onset, f"smoothed proxy > {PROXY_RISE.value:g} sigma "
                  f"({rise:.3g}) above its value at the gold peak", PROXY_RISE.source,
                  at_gold_peak=curves.p[curves.peak], noise_sigma=curves.proxy_noise)),
    )


@rule("gold_falling", "ppo_instability", requires=("reward/proxy_mean", "reward/gold_mean"),
      thresholds=(GOLD_DROP, PROXY_RISE, RATED_FALL_POINTS), causes=(causes.advantages_values, causes.logprob_bookkeeping,
                                                  causes.step_size, causes.kl_control),
      relative=("reward/proxy_mean", "reward/gold_mean"))
def gold_falling(table: MetricTable) -> Detection | None:
    """The gold or held-out score falls from its peak while the proxy does not rise with it:
    not over-optimisation but updates that make the policy worse at both, which points at the
    update itself (credit, logprobs, step size) before the reward."""
    curves = GoldCurves.of(table)
    onset = curves.fall_onset() if curves is not None else None
    if onset is None or curves.proxy_gain() > PROXY_RISE.value * curves.proxy_noise:
        return None  # reward_hacking_gold's case
    return Detection(
        f"the policy is getting worse: gold fell {curves.g[-1] - curves.g[curves.peak]:+.3g} from its peak, the "
        f"proxy {curves.proxy_gain():+.3g} with it", "medium", curves.gold.steps[onset],
        (curves.gold_evidence(onset),
         evidence("reward/proxy_mean", curves.proxy, onset, f"smoothed proxy not {PROXY_RISE.value:g} sigma above "
                  "its value at the gold peak", PROXY_RISE.source, at_gold_peak=curves.p[curves.peak])),
    )


@rule("gold_stalled", "reward_hacking", requires=("reward/proxy_mean", "reward/gold_mean"),
      thresholds=(GOLD_STALL_SHARE, PROXY_STALL_RISE, GOLD_DROP), causes=(causes.exploitable_reward_model,
                                                                         causes.kl_control),
      relative=("reward/proxy_mean", "reward/gold_mean"))
def gold_stalled(table: MetricTable) -> Detection | None:
    """The proxy keeps rising while the gold or held-out score has not improved for a quarter
    of the run (a note, low severity): training past the gold's peak buys proxy reward only;
    the best checkpoint is the one at the peak."""
    curves = GoldCurves.of(table)
    if curves is None or curves.fall_onset() is not None:  # a fall is the other gold rules' case
        return None
    n, peak = len(curves.g), curves.peak
    if not curves.stalled() or curves.proxy_gain() <= PROXY_STALL_RISE.value * curves.proxy_noise:
        return None
    return Detection(
        f"gold stalled: no new best since step {curves.gold.steps[peak]} while the proxy rose "
        f"{curves.proxy_gain():+.3g}", "low", curves.gold.steps[peak],
        (evidence("reward/gold_mean", curves.gold, peak, f"no higher smoothed value for {n - 1 - peak} of {n} points "
                  f"(>= {GOLD_STALL_SHARE.value:.0%} of the run)", GOLD_STALL_SHARE.source, peak=curves.g[peak]),
         evidence("reward/proxy_mean", curves.proxy, peak, f"smoothed proxy rose > {PROXY_STALL_RISE.value:g} sigma "
                  f"({PROXY_STALL_RISE.value * curves.proxy_noise:.3g}) since", PROXY_STALL_RISE.source)),
    )


@rule("reward_hacking_proxy", "reward_hacking", requires=("reward/proxy_mean",),
      thresholds=(HACK_PROXY_RISE, HACK_KL_SHARE, LENGTH_DRIFT, EOS_DROP, DISTINCT2_DRIFT),
      causes=HACKING_CAUSES + (causes.unended_responses, causes.step_size), clues=HACKING_CLUES)
def reward_hacking_proxy(table: MetricTable) -> Detection | None:
    """Without gold: proxy rising together with fast KL growth, length/EOS drift or lost diversity."""
    if table.get("reward/gold_mean") is not None:
        return None  # the gold rule decides
    proxy = table.get("reward/proxy_mean")
    n = len(proxy)
    w = window(n)
    p = smooth(proxy.values, w)
    gate = HACK_PROXY_RISE.value * noise_sigma(proxy.values)
    if n < 6 or gate <= 0 or p[-1] - baseline(proxy.values, w) < gate:
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

    limit = kl_limit(table)  # the KL in the unit and against the limit kl_explosion holds it to
    if limit is not None:
        kl = table.get(limit.metric)
        onset = first_where(level(kl, limit.robust), lambda v: v > HACK_KL_SHARE.value * limit.value,
                            persistence(len(kl)))
        if onset is not None:
            signals.append((kl.steps[onset], evidence(
                limit.metric, kl, onset, f"{limit.metric} > {HACK_KL_SHARE.value:g} x {limit.value:.3g} {limit.unit} "
                "while proxy rises", HACK_KL_SHARE.source)))
    drift("response/length_mean", lambda v, s: abs(v - s) > LENGTH_DRIFT.value * s,
          f"mean length moved more than {LENGTH_DRIFT.value:.0%} from its start", LENGTH_DRIFT.source)
    drift("response/eos_rate", lambda v, s: v < s - EOS_DROP.value, f"EOS rate fell more than {EOS_DROP.value}",
          EOS_DROP.source)
    drift("response/distinct_2", lambda v, s: v < DISTINCT2_DRIFT.value * s,
          f"distinct-2 below {DISTINCT2_DRIFT.value:.0%} of its start", DISTINCT2_DRIFT.source)
    if not signals:
        return None
    onset = min(step for step, _ in signals)
    found = (evidence("reward/proxy_mean", proxy, 0, f"proxy rose > {HACK_PROXY_RISE.value:g} sigma ({gate:.3g}) over "
                      "the run", HACK_PROXY_RISE.source),) + tuple(e for _, e in signals)
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


# --- several rewards ------------------------------------------------------------------------
REWARDS_CLIMB = Threshold(
    "REWARDS_CLIMB", 3.0,
    "standard deviations of a reward's own step-to-step noise (signals.noise_sigma) that it gains from its first "
    "window to its last: a climb beyond noise, as the other rules' 3-sigma gates")
REWARDS_FOLLOW = Threshold(
    "REWARDS_FOLLOW", 0.16,
    "of the climbing reward's gain, each reward in its own noise: another reward that gained less (or fell) did not "
    "follow it. Fitted on the faults bench's demo runs read with their gold as an unnamed second reward "
    "(bench/rewards_disagree.py): healthy seeds 0.49-0.90 of the proxy's gain, the runs whose gold stayed flat or "
    "fell while the proxy climbed (kl_coef_zero, ref_is_policy, rm_overfit) -0.35-0.05; 0.16 is the geometric "
    "middle of 0.05 and 0.49 (3.1x from each). Checked on two public logs of one researcher's loop not fitted on "
    "(../shared/real_logs, MANIFEST.md): the run labelled reward hacking 0.10 (its hidden-test reward against the "
    "trained one), its healthy control 0.23")
# Parts of a name that make a reward-like series a statistic of a reward, or a penalty (the KL
# term TRL logs as `objective/non_score_reward`), not a reward.
_NOT_A_REWARD = ("std", "min", "max", "var", "frac", "ratio", "zero", "corr", "count", "clip", "time", "kl",
                 "penalty", "non_score")
# Canonical rewards defined from the proxy (its EOS-penalised score, its KL-penalised total) or
# that are the truth (the gold, held by the rules above): not a second opinion on it.
_DEFINED_FROM_PROXY = ("reward/score_mean", "reward/total_mean", "reward/gold_mean")


def reward_series(table: MetricTable) -> dict[str, Series]:
    """The rewards a log holds side by side: the proxy, each reward function's, and any
    series of its own whose name says reward or score (not a statistic of one, not an
    evaluation), with at least 10 points."""
    found = {}
    for name in sorted(table.series):
        lowered = name.lower()
        canonical = name == "reward/proxy_mean" or name.startswith(REWARD_FUNCTION_PREFIX)
        own = (name not in KNOWN and not lowered.startswith(EVAL_PREFIX) and ("reward" in lowered or "score" in lowered)
               and not any(part in lowered for part in _NOT_A_REWARD))
        series = table.get(name, any_unit=True) if (canonical or own) and name not in _DEFINED_FROM_PROXY else None
        if series is not None and len(series) >= 10:
            found[name] = series
    return found


def _solve(matrix: list[list[float]], vector: list[float]) -> list[float] | None:
    """The solution of a small linear system by Gaussian elimination with pivoting; None
    when it is singular. (The doctor depends on typer and rich only: no numpy for a system
    of a few unknowns.)"""
    n = len(vector)
    rows = [row[:] + [v] for row, v in zip(matrix, vector)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(rows[r][col]))
        if abs(rows[pivot][col]) < 1e-12:
            return None
        rows[col], rows[pivot] = rows[pivot], rows[col]
        for r in range(n):
            if r != col:
                factor = rows[r][col] / rows[col][col]
                rows[r] = [a - factor * b for a, b in zip(rows[r], rows[col])]
    return [rows[i][n] / rows[i][i] for i in range(n)]


def is_combination(target: Series, others: list[Series]) -> bool:
    """Whether `target` is a fixed weighted sum of `others` plus a constant on the steps all
    share, to within 0.1% of its variance (one reward equal to another, a reward logged with
    its parts, 100 f + g): related by definition, so no second opinion on them."""
    common = set(target.steps).intersection(*(s.steps for s in others))
    if len(common) < len(others) + 3:
        return False
    columns = [[v for step, v in zip(s.steps, s.values) if step in common] for s in others]
    y = [v for step, v in zip(target.steps, target.values) if step in common]
    design = [[1.0, *(c[i] for c in columns)] for i in range(len(y))]
    normal = [[sum(r[a] * r[b] for r in design) for b in range(len(design[0]))] for a in range(len(design[0]))]
    weights = _solve(normal, [sum(r[a] * v for r, v in zip(design, y)) for a in range(len(design[0]))])
    variance = statistics.pvariance(y)
    if weights is None or variance == 0:
        return variance == 0
    residual = statistics.fmean((v - sum(w * x for w, x in zip(weights, r))) ** 2 for r, v in zip(design, y))
    return residual <= 1e-3 * variance


def independent_rewards(rewards: dict[str, Series], bases: tuple[Series, ...] = ()) -> dict[str, Series]:
    """`rewards` without those that are combinations of the rest and of `bases` (rewards
    defined from the proxy, never compared themselves): the longest name dropped first, so
    a sum keeps its parts and `reward/mean` equal to `reward/g` keeps the latter; a KL
    penalty logged apart (the total minus the score) goes."""
    kept = dict(rewards)
    for name in sorted(rewards, key=lambda n: (-len(n), n)):
        # the bases are made from the proxy: it is no combination of them, but the source
        others = [s for other, s in kept.items() if other != name] + ([] if name == "reward/proxy_mean" else list(bases))
        if others and is_combination(kept[name], others):
            del kept[name]
    return kept


def gain(series: Series) -> float:
    """A series' gain from its first window to its last, in its own noise."""
    values = list(series.values)
    width = window(len(values))
    noise = noise_sigma(values) or statistics.pstdev(values)
    return (statistics.fmean(values[-width:]) - baseline(values, width)) / noise if noise else 0.0


@rule("rewards_disagree", "reward_hacking", causes=(causes.exploitable_reward_model, causes.kl_control))
def rewards_disagree(table: MetricTable) -> Detection | None:
    """A log with several rewards not related by definition (a score and its KL-penalised
    total are; GRPO's reward functions and their sum are; any fixed weighted sum of others
    is) where one climbs beyond its noise and another does not follow (flat or falling):
    the optimised reward and the one that matters may be different, and nothing in the
    names says which is the truth (medium)."""
    bases = tuple(s for name in _DEFINED_FROM_PROXY[:2] if (s := table.get(name, any_unit=True)) is not None)
    rewards = independent_rewards(reward_series(table), bases)
    gains = {name: gain(series) for name, series in rewards.items()}
    pairs = [(gains[a], gains[b] / gains[a], a, b) for a in rewards for b in rewards
             if a != b and gains[a] >= REWARDS_CLIMB.value and gains[b] / gains[a] <= REWARDS_FOLLOW.value]
    if not pairs:
        return None
    climb, follow, a, b = max(pairs, key=lambda p: (p[0], -p[1]))
    rising, other = rewards[a], rewards[b]
    width = window(len(rising))
    values = list(rising.values)
    level = baseline(values, width) + REWARDS_CLIMB.value * (noise_sigma(values) or statistics.pstdev(values))
    onset = first_where(smooth(values, width), lambda v: v >= level, persistence(len(values)))
    onset = onset if onset is not None else len(values) - 1
    verb = "fell" if follow < -REWARDS_FOLLOW.value else "stayed flat"
    return Detection(
        f"the rewards disagree: {a} climbed {climb:.3g}x its noise while {b} {verb} ({follow:+.2f} of that gain in its "
        f"own noise); if {b} is the one that matters, name it the truth (--map {b}=reward/gold_mean) and the gold "
        "rules judge the run by it, or give people's ratings (--truth)", "medium", rising.steps[onset],
        (evidence(a, rising, onset, f"gain >= {REWARDS_CLIMB.value:g} sigma of its noise", REWARDS_CLIMB.source,
                  gain_sigmas=climb),
         evidence(b, other, 0, f"gain <= {REWARDS_FOLLOW.value:g} of {a}'s, each in its own noise",
                  REWARDS_FOLLOW.source, follow=follow)))
