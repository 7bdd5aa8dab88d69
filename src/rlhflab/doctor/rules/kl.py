"""Exploding KL: the policy leaving the reference, a KL that cannot be a KL, a controller
that does not control."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from rlhflab.doctor import causes
from rlhflab.doctor.findings import Evidence, Severity
from rlhflab.doctor.rules.registry import Detection, Threshold, evidence, persistence, rule, unless_gold_rises
from rlhflab.doctor.rules.update import LARGE_FIRST_UPDATE, LARGE_UPDATES, UNSCALED_REWARDS
from rlhflab.doctor.signals import (
    early_level,
    first_where,
    noise_sigma,
    resolution,
    rolling_median,
    slope,
    smooth,
    sustained,
    window,
)
from rlhflab.doctor.table import MetricTable, Series, aligned

KL_TOKEN_LIMIT = Threshold(
    "KL_TOKEN_LIMIT", 1.0,
    "nats per token (rolling median), fitted on labelled runs read from their metrics alone "
    "(bench/rule_calibration.py): healthy runs peak at 0.33-0.42 (rlhflab demo, 3 seeds; veRL PPO on GSM8K, 435 "
    "steps, 256-token responses), runs whose KL ran away at 7.2-12.5 (rlhflab kl_coef=0 x4, kl_sign_flipped, "
    "lr_100x, reward_scale_100x); 1.0 sits 2.4x above the highest healthy peak and 7x below the lowest runaway. "
    "Checked on TRL GRPO/RLOO runs it was not fitted on: healthy 0.04-0.08, 30x learning rate 9.6 and 528")
KL_EARLY_GROWTH = Threshold(
    "KL_EARLY_GROWTH", 10.0,
    "times the run's early KL (the median of its second smoothing window, or its noise sigma when higher: a KL "
    "within its noise of 0 has no level to grow from), for a per-sequence KL the log gives no "
    "response length to go per token; fitted on rlhflab runs read from their metrics alone (bench/rule_calibration.py): "
    "healthy 2.7-3.5 (3 seeds) and 5.4-7.3 (adaptive KL), runaways 15.8-108 (kl_coef=0 x4, kl_sign_flipped, "
    "reward_scale_100x); 10 sits 1.4x above the highest healthy and 1.6x below the lowest runaway. Checked on runs it "
    "was not fitted on: TRL PPO healthy 3.8-4.4, beta = 0 at 3x lr 57; TRL GRPO/RLOO healthy 3.3-8.4 (the thinnest "
    "margin, 1.2x), veRL PPO healthy 3.3. Runs whose KL is already far out in the early window (a 30x learning rate) "
    "are not growth cases: approx-KL and clipfrac rules catch them")
KL_TARGET_FACTOR = Threshold(
    "KL_TARGET_FACTOR", 2.0,
    "Ziegler et al. 2019 sec. 2.2: the controller bounds the error at +-20%; 2x target = control lost")
KL_GROWTH_FACTOR = Threshold(
    "KL_GROWTH_FACTOR", 3.0,
    "super-linear KL growth (last-third slope over first-third slope) marks a policy leaving the reference "
    "(Ziegler et al. 2019 sec. 2.2)")
KL_GROWTH_FLOOR = Threshold(
    "KL_GROWTH_FLOOR", 0.5, "of the limit in force: below half of it, fast growth is not yet an explosion")
KL_HIGH_FACTOR = Threshold(
    "KL_HIGH_FACTOR", 2.5, "severity: high when the smoothed KL ends above 2.5x the limit (or grows super-linearly), "
                           "medium below")
KL_NEGATIVE_LIMIT = Threshold(
    "KL_NEGATIVE_LIMIT", -1.0,
    "nats: severity high below it. E_pi[log pi - log ref] = KL >= 0 when tokens are sampled from pi (Schulman 2020, "
    "k1); TRL logging docs: objective/kl should stay positive")
CONTROLLER_DEADBAND = Threshold(
    "CONTROLLER_DEADBAND", 0.2,
    "Ziegler et al. 2019 sec. 2.2: beta *= 1 + clip(KL/target - 1, +-0.2) * n/horizon; a relative error above "
    "0.2 must move beta")



@rule("kl_explosion", "exploding_kl", requires=("kl/mean",),
      thresholds=(KL_TOKEN_LIMIT, KL_EARLY_GROWTH, KL_TARGET_FACTOR, KL_GROWTH_FACTOR, KL_GROWTH_FLOOR,
                  KL_HIGH_FACTOR),
      causes=(causes.kl_control, causes.step_size, causes.reward_scaling, causes.exploitable_reward_model,
              causes.logprob_bookkeeping),
      clues=(causes.ZERO_KL, causes.CLIP_NEVER_CLIPS, LARGE_UPDATES, UNSCALED_REWARDS, LARGE_FIRST_UPDATE))
def kl_explosion(table: MetricTable) -> Detection | None:
    """KL to the reference above 2x the run's adaptive target, else above a limit per token,
    else (a per-sequence KL without response lengths) grown 10x from the run's early level;
    or growing super-linearly."""
    limit = kl_limit(table)
    if limit is None:
        return None
    metric, unit, limit_value, threshold, source = limit.metric, limit.unit, limit.value, limit.threshold, limit.source
    kl = table.get(metric)
    n = len(kl)
    s = level(kl, robust=limit.robust)
    onset = first_where(s, lambda v: v > limit_value, persistence(n))
    third = max(2, n // 3)
    early = slope(kl.steps[:third], s[:third])
    late = slope(kl.steps[-third:], s[-third:])
    floor = KL_GROWTH_FLOOR.value * limit_value  # in the series' own unit
    # A floor under the early slope: from a flat start any growth would be super-linear.
    superlinear = n >= 9 and late > KL_GROWTH_FACTOR.value * max(early, 5e-5 * limit_value) and s[-1] > floor
    if onset is None and not superlinear:
        return None
    if onset is None:
        onset = n - third
        threshold = (f"slope of {metric} over the last third > {KL_GROWTH_FACTOR.value}x the first third's, "
                     f"and {metric} > {floor:g} {unit}")
        source = KL_GROWTH_FACTOR.source
    severity: Severity = "high" if s[-1] > KL_HIGH_FACTOR.value * limit_value or superlinear else "medium"
    found = [evidence(metric, kl, onset, threshold, source, peak=max(kl.values), early_slope=early,
                      late_slope=late)]
    coef = table.get("kl/coef")
    if coef is not None:
        found.append(Evidence("kl/coef", coef.steps[0], {"start": coef.values[0], "end": coef.values[-1]},
                              "the coefficient the penalty used", "logged by the trainer"))
    return Detection(f"exploding KL: {metric} reached {s[-1]:.3g} {unit}", severity, kl.steps[onset], tuple(found))


def level(kl: Series, robust: bool) -> list[float]:
    """The KL's level at every step: with `robust`, a rolling median (the first window
    holds its first value), else a trailing moving average. A per-token batch mean of k3
    spikes on single batches (exp of a log ratio: a healthy TRL GRPO run reaches 5.2 on one
    step of 200, at a level of 0.05) and a growth is measured from a level near 0, where a
    moving average would carry one spike for a whole window."""
    w = window(len(kl))
    if robust:
        medians = rolling_median(kl.values, w)
        if medians:
            return [medians[0]] * (w - 1) + medians
    return smooth(kl.values, w)


@dataclass(frozen=True)
class KLLimit:
    """The KL series a run is held to, in its unit, the limit and where the limit comes from."""

    metric: str
    unit: str
    value: float
    threshold: str
    source: str
    robust: bool  # compared through a rolling median (level)


def kl_limit(table: MetricTable) -> KLLimit | None:
    """The limit the KL is held to: the run's own adaptive target when it has one (in the
    log's unit); else per token where the log allows it (a per-token KL, or a per-sequence
    one and the response length); else a per-sequence KL relative to its early level, since
    a per-sequence limit would call every long-response run explosive. None without a KL,
    or when the run is too short to tell its early level, or that level is not positive."""
    target, kl, per_token = table.settings.kl_target, table.get("kl/mean"), table.get("kl/token_mean")
    if target is not None and kl is not None:
        limit = KL_TARGET_FACTOR.value * target
        return KLLimit("kl/mean", "nats", limit, f"smoothed kl/mean > {KL_TARGET_FACTOR.value} x kl_target = "
                       f"{limit:g} nats", KL_TARGET_FACTOR.source, robust=False)
    if per_token is not None:
        return KLLimit("kl/token_mean", "nats/token", KL_TOKEN_LIMIT.value,
                       f"kl/token_mean's rolling median over {window(len(per_token))} steps > {KL_TOKEN_LIMIT.value} "
                       "nats per token", KL_TOKEN_LIMIT.source, robust=True)
    if kl is None:
        return None
    start = early_level(kl.values, window(len(kl)))
    if start is None or start <= 0:
        return None
    limit = KL_EARLY_GROWTH.value * start
    return KLLimit("kl/mean", "nats", limit, f"kl/mean's rolling median > {KL_EARLY_GROWTH.value:g} x its early "
                   f"level {start:.3g} nats (the log has no response length to go per token)",
                   KL_EARLY_GROWTH.source, robust=True)


KL_UNPENALISED_GROWTH = Threshold(
    "KL_UNPENALISED_GROWTH", KL_EARLY_GROWTH.value,
    "times the run's early KL, as KL_EARLY_GROWTH, in any unit: without a penalty nothing holds the policy near the "
    "reference, so a KL that keeps growing is the drift the penalty exists to stop (Ziegler et al. 2019 sec. 2.2; "
    "Stiennon et al. 2020 fig. 5: without it the policy over-optimises)")


@rule("kl_drift_unpenalised", "exploding_kl", requires=("kl/mean",), thresholds=(KL_UNPENALISED_GROWTH,),
      causes=(causes.kl_control, causes.step_size), clues=(causes.ZERO_KL,), relative=("kl/mean",))
def kl_drift_unpenalised(table: MetricTable) -> Detection | None:
    """A run without a KL penalty (beta = 0) whose KL to the reference keeps growing: 10x its
    early level (medium; a note while the held-out score rises, as in DAPO-style runs that
    drop the penalty on purpose)."""
    if not causes.kl_penalty_off(table):
        return None
    metric = "kl/token_mean" if table.get("kl/token_mean") is not None else "kl/mean"
    kl = table.get(metric, any_unit=True)
    n = len(kl)
    s = level(kl, robust=True)
    start = early_level(kl.values, window(n))
    if start is None or start <= 0:
        return None
    limit = KL_UNPENALISED_GROWTH.value * start
    onset = first_where(s, lambda v: v > limit, persistence(n))
    if onset is None:
        return None
    found = Detection(
        f"KL drifting without a penalty: {metric} grew {s[-1] / start:.0f}x from its early level", "medium",
        kl.steps[onset], (evidence(metric, kl, onset, f"{metric}'s level > {KL_UNPENALISED_GROWTH.value:g} x its "
                                   f"early level {start:.3g}, with a KL coefficient of 0",
                                   KL_UNPENALISED_GROWTH.source, early_level=start),))
    return unless_gold_rises(table, found, "an unpenalised run may drift while it learns the task")


KL_NEGATIVE_SIGMAS = Threshold(
    "KL_NEGATIVE_SIGMAS", 3.0,
    "a batch mean of k1 = log pi - log ref over samples drawn from pi estimates KL(pi || ref) >= 0 (Schulman 2020); "
    "it dips below 0 by chance only by its sampling noise, which the series' own step-to-step noise bounds "
    "(noise_sigma: second differences, free of the trend); smoothed over w steps that noise is sigma / sqrt(w), and "
    "3 of them below 0 (p = 0.0013 for one window) for half a window of smoothed points in a row is not chance")


@rule("kl_negative", "exploding_kl", requires=("kl/mean",), thresholds=(KL_NEGATIVE_SIGMAS, KL_NEGATIVE_LIMIT),
      causes=(causes.logprob_bookkeeping, causes.kl_control, causes.advantages_values))
def kl_negative(table: MetricTable) -> Detection | None:
    """A sampled estimate of KL(pi || ref) that stays below 0 beyond its own noise (3 sigma of
    its smoothed level, plus the log's rounding): the logprobs are not of the sampler. High
    below -1 nat, medium above."""
    kl = table.get("kl/mean")
    n = len(kl)
    w = window(n)
    tolerance = KL_NEGATIVE_SIGMAS.value * noise_sigma(kl.values) / math.sqrt(w) + resolution(kl.values)
    s = smooth(kl.values, w)
    onset = first_where(s, lambda v: v < -tolerance, persistence(n))
    if onset is None:
        return None
    lowest = min(s[onset:])
    severity: Severity = "high" if lowest < KL_NEGATIVE_LIMIT.value else "medium"
    return Detection(f"negative KL: kl/mean fell to {min(kl.values):.3g} nats, below its noise", severity,
                     kl.steps[onset], (evidence("kl/mean", kl, onset,
                                                f"smoothed kl/mean < -{tolerance:.3g} nats (3 sigma of its smoothed "
                                                f"noise) for {persistence(n)} steps in a row", KL_NEGATIVE_SIGMAS.source,
                                                tolerance=tolerance),))


CONTROLLER_CORRELATION = Threshold(
    "CONTROLLER_CORRELATION", -0.2,
    "correlation of beta's changes with the KL before them, for a log that does not tell the target: an adaptive "
    "controller raises beta when KL is high (Ziegler et al. 2019 sec. 2.2), so it is positive. Fitted on seed 0 "
    "(bench/rule_calibration.py): +0.44 and +0.98 (rlhflab demo runs from beta 0.05 and 0.8), the zoo's inverted "
    "controller -0.38. Checked on seeds 1 and 2, not fitted on (bench/controller_check.py): healthy +0.18 to +0.97, "
    "inverted -0.45 and -0.49; the thinnest margin is the healthy +0.18, 0.38 above. No other trainer's adaptive "
    "controller has been checked")
CONTROLLER_MOVES = Threshold(
    "CONTROLLER_MOVES", 2.0, "beta's largest over smallest value: below it, beta is fixed or barely adapts")


def _controller_against_kl(table: MetricTable) -> Detection | None:
    """Without the target: an adaptive beta whose changes go against the KL level."""
    kl, coef = aligned(table.get("kl/mean"), table.get("kl/coef"))
    if len(kl) < 10 or min(coef.values) <= 0 or max(coef.values) < CONTROLLER_MOVES.value * min(coef.values):
        return None
    changes = [b - a for a, b in zip(coef.values, coef.values[1:])]
    levels = list(kl.values[:-1])
    if len(set(changes)) < 2 or len(set(levels)) < 2:
        return None
    correlation = statistics.correlation(changes, levels)
    if correlation >= CONTROLLER_CORRELATION.value:
        return None
    return Detection("KL controller moves beta against the KL (no target in the log)", "high", coef.steps[1], (
        evidence("kl/coef", coef, 1, f"correlation of beta's changes with the KL before them "
                 f"{correlation:.2f} < {CONTROLLER_CORRELATION.value}, beta ranging over "
                 f"{max(coef.values) / min(coef.values):.1f}x", CONTROLLER_CORRELATION.source,
                 correlation=correlation),
    ))


@rule("kl_controller_wrong_way", "exploding_kl", requires=("kl/mean", "kl/coef"),
      thresholds=(CONTROLLER_DEADBAND, CONTROLLER_CORRELATION, CONTROLLER_MOVES),
      causes=(causes.inverted_controller, causes.logprob_bookkeeping))
def kl_controller_wrong_way(table: MetricTable) -> Detection | None:
    """Adaptive beta moving against the KL error (down while KL is above target, up below
    it), or stuck while KL is far from target."""
    target = table.settings.kl_target
    if target is None:
        return _controller_against_kl(table)
    kl, coef = aligned(table.get("kl/mean"), table.get("kl/coef"))
    n = len(kl)
    length = max(3, window(n))
    deadband = CONTROLLER_DEADBAND.value
    wrong, stuck = [], []
    for i in range(1, n):
        change = coef.values[i] - coef.values[i - 1]
        error = kl.values[i - 1] - target
        wrong.append(change != 0 and error != 0 and math.copysign(1, change) != math.copysign(1, error))
        stuck.append(change == 0 and abs(error) > deadband * target)
    for flags, title, condition in (
        (wrong, "KL controller moves beta the wrong way", "beta changes against sign(kl - target)"),
        (stuck, "KL controller stuck while KL is off target",
         f"beta unchanged while |kl - target| > {deadband} x target"),
    ):
        onset = sustained(flags, length)
        if onset is not None:
            return Detection(title, "high", coef.steps[onset + 1], (
                evidence("kl/coef", coef, onset + 1, f"{condition} (target {target:g}) for {length} iterations "
                         "in a row", CONTROLLER_DEADBAND.source),
                evidence("kl/mean", kl, onset, f"target {target:g} nats", "the run's KL target (settings)"),
            ))
    return None
