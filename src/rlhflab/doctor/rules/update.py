"""PPO update health: the policy/old ratio, clipping, approx-KL, the critic, non-finite
numbers and gradient spikes."""

from __future__ import annotations

import statistics

from rlhflab.doctor import causes
from rlhflab.doctor.causes import Clue
from rlhflab.doctor.findings import Cause, Evidence
from rlhflab.doctor.rules.registry import Detection, Threshold, crossing, evidence, mean, persistence, rule
from rlhflab.doctor.signals import baseline, first_where, rolling_median, running_medians, smooth, window
from rlhflab.doctor.table import MetricTable

RATIO_LOW = Threshold("RATIO_LOW", 0.8, "TRL logging docs: val/ratio should float around 1.0")
RATIO_HIGH = Threshold("RATIO_HIGH", 1.25, "TRL logging docs: val/ratio should float around 1.0")
RATIO_MAX_LIMIT = Threshold(
    "RATIO_MAX_LIMIT", 50.0,
    "a clipped objective cannot stop one token's probability exploding; single iterations of healthy demo runs "
    "reach 20-39 (one token among thousands; 180 under the earlier 4-layer defaults), their windowed median stays "
    "below 6 (pipeline targets, 3 seeds, docs/benchmarks.md)")
CLIPFRAC_LIMIT = Threshold(
    "CLIPFRAC_LIMIT", 0.3, "37 implementation details of PPO (Huang et al. 2022): clipfrac is usually 0.1-0.2")
APPROXKL_LIMIT = Threshold(
    "APPROXKL_LIMIT", 0.3, "healthy demo runs stay below 0.07 (median 0.01-0.015, docs/benchmarks.md); PPO targets "
    "~0.01-0.05 per update (Spinning Up's target_kl)")
EXPLAINED_VARIANCE_LIMIT = Threshold(
    "EXPLAINED_VARIANCE_LIMIT", -0.5,
    "37 implementation details of PPO: explained variance should rise towards 1; below 0 the critic is worse than "
    "a constant")
GRAD_SPIKE_FACTOR = Threshold(
    "GRAD_SPIKE_FACTOR", 10.0, "spikes precede divergence (Huang et al. 2022, global gradient clipping)")
ADV_STD_LIMIT = Threshold(
    "ADV_STD_LIMIT", 10.0,
    "standardised rewards give advantages of std about 1 (docs/metrics.md); 10x that means unnormalised rewards")


def _large_updates(table: MetricTable) -> Cause | None:
    approxkl, clipfrac = mean(table, "policy/approxkl"), mean(table, "policy/clipfrac")
    if (approxkl is not None and approxkl > APPROXKL_LIMIT.value) or (
            clipfrac is not None and clipfrac > CLIPFRAC_LIMIT.value):
        return Cause("ppo_hyperparameters",
                     f"PPO steps are too large (mean approxkl {approxkl or 0:.2f}, clipfrac {clipfrac or 0:.2f})",
                     None)
    return None


def _unscaled_rewards(table: MetricTable) -> Cause | None:
    adv_std = mean(table, "adv/std")
    if adv_std is not None and adv_std > ADV_STD_LIMIT.value:
        return Cause("reward_scaling", f"advantages have std {adv_std:.0f} before whitening: rewards are not "
                                       "standardised", None)
    return None


FIRST_UPDATE_LIMIT = Threshold(
    "FIRST_UPDATE_LIMIT", 3.0,
    "approx-KL of the first logged update, 10x APPROXKL_LIMIT; fitted on the zoo read from metrics alone "
    "(bench/rule_calibration.py): lr_100x 88, every other fault and healthy seed 0.86 or less. Checked on TRL 1.12 "
    "PPO runs it was not fitted on: 0.0004-0.25, the 30x learning rate's 0.25 included (its steps grow later)")


def _large_first_update(table: MetricTable) -> Cause | None:
    approxkl = table.get("policy/approxkl")
    if approxkl is not None and approxkl.values[0] > FIRST_UPDATE_LIMIT.value:
        return Cause("ppo_hyperparameters", f"the first update moved the policy by an approx-KL of "
                                            f"{approxkl.values[0]:.1f}: the step size (learning rate) is far too large",
                     None)
    return None


LARGE_FIRST_UPDATE = Clue("large_first_update", 8, _large_first_update,
                          "the first `policy/approxkl` > FIRST_UPDATE_LIMIT")
LARGE_UPDATES = Clue("large_updates", 3, _large_updates,
                     "mean `policy/approxkl` > APPROXKL_LIMIT or mean `policy/clipfrac` > CLIPFRAC_LIMIT")
UNSCALED_REWARDS = Clue("unscaled_rewards", 4, _unscaled_rewards, "mean `adv/std` > ADV_STD_LIMIT")
UPDATE_CAUSES = (causes.step_size, causes.reward_scaling, causes.logprob_bookkeeping)
NON_FINITE_CAUSES = (causes.reward_scaling, causes.step_size, causes.logprob_bookkeeping, causes.optimizer_step)


@rule("ratio_off", "ppo_instability", requires=("policy/ratio_mean",),
      thresholds=(RATIO_LOW, RATIO_HIGH, RATIO_MAX_LIMIT),
      causes=(causes.logprob_bookkeeping, causes.step_size, causes.advantages_values),
      clues=(causes.CLIP_NEVER_CLIPS, UNSCALED_REWARDS, LARGE_FIRST_UPDATE))
def ratio_off(table: MetricTable) -> Detection | None:
    """The policy/old ratio far from 1 on average, or exploding on some token."""
    mean_ratio = table.get("policy/ratio_mean")
    low, high = RATIO_LOW.value, RATIO_HIGH.value
    # A median over complete windows, as for ratio_max below: one iteration's mean can be
    # pulled far off by a single token's ratio (538 on a healthy run's first iteration),
    # and a trailing mean would carry that one value over the whole window.
    width = window(len(mean_ratio))
    off = first_where(rolling_median(mean_ratio.values, width), lambda v: not low <= v <= high,
                      persistence(len(mean_ratio)))
    onset = off + width - 1 if off is not None else None
    found = []
    if onset is not None:
        found.append(evidence("policy/ratio_mean", mean_ratio, onset, f"median ratio over {width} iterations outside "
                              f"[{low}, {high}], persistently", RATIO_LOW.source))
    top = table.get("policy/ratio_max")
    top_onset = None
    if top is not None:
        # The max over an iteration's thousands of tokens is heavy-tailed: healthy demo runs
        # reach 39 (180 with earlier defaults) on one iteration, but their median over a
        # window stays below 6. So the median, not single values, must stay above the limit.
        width = window(len(top))
        medians = rolling_median(top.values, width)
        above = first_where(medians, lambda v: v > RATIO_MAX_LIMIT.value, persistence(len(top)))
        if above is not None:
            top_onset = above + width - 1
            found.append(evidence("policy/ratio_max", top, top_onset,
                                  f"median of ratio_max over {width} iterations > {RATIO_MAX_LIMIT.value}, "
                                  "persistently", RATIO_MAX_LIMIT.source))
    if not found:
        return None
    steps = [s for s in (mean_ratio.steps[onset] if onset is not None else None,
                         top.steps[top_onset] if top_onset is not None else None) if s is not None]
    return Detection("policy/old ratio far from 1", "high", min(steps), tuple(found))


def _steps_too_large(table: MetricTable, metric: str, limit: Threshold) -> Detection | None:
    return crossing(table, metric, lambda v: v > limit.value, lambda s: f"updates too large: {metric} {max(s.values):.3g}",
                    f"smoothed {metric} > {limit.value}", limit.source)


@rule("clipfrac_high", "ppo_instability", requires=("policy/clipfrac",), thresholds=(CLIPFRAC_LIMIT,),
      causes=UPDATE_CAUSES, clues=(causes.CLIP_NEVER_CLIPS, UNSCALED_REWARDS))
def clipfrac_high(table: MetricTable) -> Detection | None:
    """Fraction of clipped tokens persistently high: steps too large."""
    return _steps_too_large(table, "policy/clipfrac", CLIPFRAC_LIMIT)


@rule("approxkl_high", "ppo_instability", requires=("policy/approxkl",), thresholds=(APPROXKL_LIMIT,),
      causes=UPDATE_CAUSES, clues=(causes.CLIP_NEVER_CLIPS, UNSCALED_REWARDS))
def approxkl_high(table: MetricTable) -> Detection | None:
    """Approximate KL between consecutive policies persistently high: steps too large."""
    return _steps_too_large(table, "policy/approxkl", APPROXKL_LIMIT)


@rule("value_explained_variance_low", "ppo_instability", requires=("value/explained_variance",),
      thresholds=(EXPLAINED_VARIANCE_LIMIT,),
      causes=(causes.advantages_values, causes.reward_scaling, causes.step_size), clues=(UNSCALED_REWARDS,))
def value_explained_variance_low(table: MetricTable) -> Detection | None:
    """The critic predicts returns worse than a constant would, persistently after warm-up."""
    ev = table.get("value/explained_variance")
    skip = len(ev) // 5
    values = smooth(ev.values, window(len(ev)))[skip:]
    onset = first_where(values, lambda v: v < EXPLAINED_VARIANCE_LIMIT.value, max(3, window(len(ev))))
    if onset is None:
        return None
    return Detection(
        "value function worse than a constant", "medium", ev.steps[skip + onset],
        (evidence("value/explained_variance", ev, skip + onset,
                  f"smoothed EV < {EXPLAINED_VARIANCE_LIMIT.value} after the first 20%",
                  EXPLAINED_VARIANCE_LIMIT.source),),
    )


@rule("non_finite", "ppo_instability", causes=NON_FINITE_CAUSES, clues=(UNSCALED_REWARDS, causes.NEVER_MOVED))
def non_finite(table: MetricTable) -> Detection | None:
    """Any NaN or Inf in a logged metric."""
    if not table.non_finite:
        return None
    first = min(min(steps) for steps in table.non_finite.values())
    found = tuple(
        Evidence(metric, min(steps), {"count": float(len(steps))}, "any NaN or Inf", "a finite run logs finite numbers")
        for metric, steps in sorted(table.non_finite.items())
    )
    return Detection(f"non-finite values in {len(found)} metric(s)", "high", first, found)


@rule("updates_skipped", "ppo_instability", requires=("guard/skipped_updates",), causes=NON_FINITE_CAUSES,
      clues=(UNSCALED_REWARDS,))
def updates_skipped(table: MetricTable) -> Detection | None:
    """Updates the trainer's non-finite guard skipped (a NaN/Inf loss or gradient)."""
    skipped = table.get("guard/skipped_updates")
    hits = [i for i, v in enumerate(skipped.values) if v > 0]
    if not hits:
        return None
    return Detection(
        f"non-finite updates skipped at {len(hits)} iteration(s)", "high", skipped.steps[hits[0]],
        (evidence("guard/skipped_updates", skipped, hits[0], "any skipped update",
                  "a finite loss and gradient are the precondition of an optimiser step", iterations=float(len(hits))),),
    )


@rule("grad_norm_spikes", "ppo_instability", requires=("policy/grad_norm",), thresholds=(GRAD_SPIKE_FACTOR,),
      causes=(causes.reward_scaling, causes.step_size), clues=(UNSCALED_REWARDS,))
def grad_norm_spikes(table: MetricTable) -> Detection | None:
    """Gradient norm jumping far above its running median, repeatedly."""
    g = table.get("policy/grad_norm")
    medians = running_medians(g.values)  # medians[i - 1]: the median of every value before i
    spikes = []
    for i in range(window(len(g)), len(g)):
        median = medians[i - 1]
        if median > 0 and g.values[i] > GRAD_SPIKE_FACTOR.value * median:
            spikes.append(i)
    if len(spikes) < 3:
        return None
    return Detection(
        f"gradient-norm spikes at {len(spikes)} iterations", "medium", g.steps[spikes[0]],
        (evidence("policy/grad_norm", g, spikes[0], f"grad_norm > {GRAD_SPIKE_FACTOR.value}x its running median, "
                  "3+ times", GRAD_SPIKE_FACTOR.source, spikes=float(len(spikes))),),
    )


NO_LEARNING_NOISE = Threshold(
    "NO_LEARNING_NOISE", 0.5,
    "of the proxy's own step-to-step noise (the standard deviation of its first window): a run whose proxy ends no "
    "higher than that above its start has not learned what it is rewarded for")


@rule("no_learning", "ppo_instability", requires=("reward/proxy_mean", "policy/approxkl"),
      thresholds=(NO_LEARNING_NOISE,), causes=(causes.advantages_values, causes.step_size, causes.reward_scaling))
def no_learning(table: MetricTable) -> Detection | None:
    """The proxy flat or falling over a run whose updates do move the policy (a note, low severity):
    the updates move it, but not toward reward, which points first at the credit (advantages)."""
    proxy, approxkl = table.get("reward/proxy_mean"), table.get("policy/approxkl")
    n = len(proxy)
    w = window(n)
    if n < 10 or statistics.median(approxkl.values) <= 0:
        return None
    start, end = baseline(proxy.values, w), statistics.fmean(proxy.values[-w:])
    noise = statistics.pstdev(proxy.values[:w]) or statistics.pstdev(proxy.values)
    if end - start > NO_LEARNING_NOISE.value * noise:
        return None
    return Detection(
        f"no learning: the proxy went from {start:.3g} to {end:.3g} while the policy kept moving", "low",
        proxy.steps[n - w],
        (evidence("reward/proxy_mean", proxy, n - w, f"mean of the last {w} steps <= start + "
                  f"{NO_LEARNING_NOISE.value} x the first window's std ({noise:.3g})", NO_LEARNING_NOISE.source),),
    )
