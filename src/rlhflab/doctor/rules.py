"""The detectors: small pure functions over a `MetricTable`, one pathology each.

Each rule returns a `Detection` (what was seen, where it began, the evidence with its
threshold and the threshold's source) or None. Which component is the likely cause is
decided separately (`causes.py`), so detection and attribution are tested apart.

Thresholds come from the literature where it gives one, and otherwise from the healthy
demo runs measured in docs/benchmarks.md, with a margin; each cites which.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from rlhflab.doctor.findings import Evidence, Severity, Symptom
from rlhflab.doctor.signals import baseline, first_where, rolling_median, slope, smooth, sustained, window
from rlhflab.doctor.table import MetricTable, Series


@dataclass(frozen=True)
class Detection:
    title: str
    severity: Severity
    onset_step: int
    evidence: tuple[Evidence, ...]


@dataclass(frozen=True)
class Rule:
    name: str
    symptom: Symptom
    requires: tuple[str, ...]
    detect: Callable[[MetricTable], Detection | None]
    description: str


# --- thresholds -------------------------------------------------------------------------
KL_ABS_LIMIT = 20.0  # nats per sequence
KL_ABS_SOURCE = ("3x the 6-nat adaptive-KL target of lm-human-preferences (Ziegler et al. 2019, "
                 "as reproduced by Huang et al. 2023); healthy demo runs end below 6 nats")
KL_TARGET_FACTOR = 2.0
KL_TARGET_SOURCE = "Ziegler et al. 2019 sec. 2.2: the controller bounds the error at +-20%; 2x target = control lost"
KL_GROWTH_FACTOR = 3.0  # last-third slope vs first-third slope
KL_GROWTH_FLOOR = 10.0  # nats: below this, fast growth is not yet an explosion
KL_NEGATIVE_LIMIT = -1.0  # nats per sequence
CONTROLLER_DEADBAND = 0.2  # relative KL error the controller must react to
ENTROPY_FRACTION = 0.3
DISTINCT2_FRACTION = 0.5
SELF_BLEU_LIMIT = 0.7
IDENTICAL_LIMIT = 0.3
GOLD_DROP = 0.15  # gold units (VADER compound scale) below the smoothed peak
PROXY_RISE = 0.1  # standardised reward units above the proxy at the gold peak
HACK_PROXY_RISE = 0.5  # standardised units over the run (no-gold rule)
HACK_KL = 15.0
LENGTH_DRIFT = 0.5  # relative change of mean length
EOS_DROP = 0.2  # absolute drop of the EOS rate
RATIO_BAND = (0.8, 1.25)
RATIO_MAX_LIMIT = 50.0
CLIPFRAC_LIMIT = 0.3
APPROXKL_LIMIT = 0.3
EXPLAINED_VARIANCE_LIMIT = -0.5
GRAD_SPIKE_FACTOR = 10.0
EOS_RATE_LIMIT = 0.5
PROMPT_UNIQUE_LIMIT = 0.5
RM_VAL_ACC_LIMIT = 0.6
RM_OVERFIT_GAP = 0.15
RM_LENGTH_CORR_LIMIT = 0.5
RM_GOLD_AGREEMENT_LIMIT = 0.65


def _ev(metric: str, series: Series, index: int, threshold: str, source: str, **extra: float) -> Evidence:
    observed = {"start": series.values[0], "at_onset": series.values[index], "end": series.values[-1]}
    return Evidence(metric, series.steps[index], observed | extra, threshold, source)


def _persist(n: int) -> int:
    return max(2, window(n) // 2 + 1)


def _crossing(table: MetricTable, metric: str, predicate: Callable[[float], bool], title: Callable[[Series], str],
              threshold: str, source: str, severity: Severity = "medium") -> Detection | None:
    """The common rule shape: the smoothed series satisfies `predicate` persistently."""
    series = table.get(metric)
    onset = first_where(smooth(series.values, window(len(series))), predicate, _persist(len(series)))
    if onset is None:
        return None
    return Detection(title(series), severity, series.steps[onset], (_ev(metric, series, onset, threshold, source),))


# --- exploding KL -----------------------------------------------------------------------
def kl_explosion(table: MetricTable) -> Detection | None:
    """KL to the reference above target (or an absolute limit), or growing super-linearly."""
    kl = table.get("kl/mean")
    n = len(kl)
    w = window(n)
    s = smooth(kl.values, w)
    config = table.meta.get("config")
    target = config.ppo.kl_target if config is not None else None
    limit, threshold, source = KL_ABS_LIMIT, f"smoothed kl/mean > {KL_ABS_LIMIT} nats", KL_ABS_SOURCE
    if target is not None:
        limit = KL_TARGET_FACTOR * target
        threshold, source = f"smoothed kl/mean > {KL_TARGET_FACTOR} x kl_target = {limit:g} nats", KL_TARGET_SOURCE
    onset = first_where(s, lambda v: v > limit, _persist(n))
    third = max(2, n // 3)
    early = slope(kl.steps[:third], s[:third])
    late = slope(kl.steps[-third:], s[-third:])
    superlinear = n >= 9 and late > KL_GROWTH_FACTOR * max(early, 1e-3) and s[-1] > KL_GROWTH_FLOOR
    if onset is None and not superlinear:
        return None
    if onset is None:
        onset = n - third
        threshold = (f"slope of kl/mean over the last third > {KL_GROWTH_FACTOR}x the first third's, "
                     f"and kl/mean > {KL_GROWTH_FLOOR} nats")
        source = "super-linear KL growth marks a policy leaving the reference (Ziegler et al. 2019 sec. 2.2)"
    severity: Severity = "high" if s[-1] > 2.5 * limit or superlinear else "medium"
    evidence = [_ev("kl/mean", kl, onset, threshold, source, peak=max(kl.values),
                    early_slope=early, late_slope=late)]
    coef = table.get("kl/coef")
    if coef is not None:
        evidence.append(Evidence("kl/coef", coef.steps[0], {"start": coef.values[0], "end": coef.values[-1]},
                                 "the coefficient the penalty used", "logged by the trainer"))
    return Detection(f"exploding KL: kl/mean reached {s[-1]:.1f} nats", severity, kl.steps[onset], tuple(evidence))


def kl_negative(table: MetricTable) -> Detection | None:
    """A sampled estimate of KL(pi || ref) that stays negative: the logprobs are not of the sampler."""
    return _crossing(
        table, "kl/mean", lambda v: v < KL_NEGATIVE_LIMIT,
        lambda kl: f"negative KL: kl/mean fell to {min(kl.values):.2f} nats",
        f"smoothed kl/mean < {KL_NEGATIVE_LIMIT} nats",
        "E_pi[log pi - log ref] = KL >= 0 when tokens are sampled from pi (Schulman 2020, k1); "
        "TRL logging docs: objective/kl should stay positive", "high",
    )


def kl_controller_wrong_way(table: MetricTable) -> Detection | None:
    """Adaptive beta moving against the KL error (down while KL is above target, up below
    it), or stuck while KL is far from target."""
    config = table.meta.get("config")
    if config is None or config.ppo.kl_target is None:
        return None
    kl, coef = table.get("kl/mean"), table.get("kl/coef")
    target = config.ppo.kl_target
    n = min(len(kl), len(coef))
    length = max(3, window(n))
    wrong, stuck = [], []
    for i in range(1, n):
        change = coef.values[i] - coef.values[i - 1]
        error = kl.values[i - 1] - target
        wrong.append(change != 0 and error != 0 and math.copysign(1, change) != math.copysign(1, error))
        stuck.append(change == 0 and abs(error) > CONTROLLER_DEADBAND * target)
    source = "Ziegler et al. 2019 sec. 2.2: beta *= 1 + clip(KL/target - 1, +-0.2) * n/horizon"
    for flags, title, condition in (
        (wrong, "KL controller moves beta the wrong way", "beta changes against sign(kl - target)"),
        (stuck, "KL controller stuck while KL is off target",
         f"beta unchanged while |kl - target| > {CONTROLLER_DEADBAND} x target"),
    ):
        onset = sustained(flags, length)
        if onset is not None:
            return Detection(title, "high", coef.steps[onset + 1], (
                _ev("kl/coef", coef, onset + 1, f"{condition} (target {target:g}) for {length} iterations in a row",
                    source),
                _ev("kl/mean", kl, onset, f"target {target:g} nats", "config ppo.kl_target"),
            ))
    return None


# --- mode collapse ----------------------------------------------------------------------
def entropy_collapse(table: MetricTable) -> Detection | None:
    """Per-token policy entropy falling below a fraction of its starting level."""
    ent = table.get("policy/entropy")
    start = baseline(ent.values, window(len(ent)))
    return _crossing(
        table, "policy/entropy", lambda v: v < ENTROPY_FRACTION * start,
        lambda s: f"entropy collapse: policy/entropy fell from {start:.2f} to {s.values[-1]:.2f}",
        f"smoothed entropy < {ENTROPY_FRACTION} x its starting level {start:.3f}",
        "healthy demo runs keep more than 60% of their starting entropy (docs/benchmarks.md); "
        "TRL logging docs: a healthy run maximises reward while keeping entropy", "high",
    )


def diversity_collapse(table: MetricTable) -> Detection | None:
    """Distinct-2 collapsing, or self-BLEU rising towards 1: the responses look alike."""
    evidence, onsets = [], []
    d2 = table.get("response/distinct_2")
    if d2 is not None:
        w = window(len(d2))
        start = baseline(d2.values, w)
        onset = first_where(smooth(d2.values, w), lambda v: v < DISTINCT2_FRACTION * start, _persist(len(d2)))
        if onset is not None:
            onsets.append(d2.steps[onset])
            evidence.append(_ev("response/distinct_2", d2, onset,
                                f"smoothed distinct-2 < {DISTINCT2_FRACTION} x its start {start:.3f}",
                                "Li et al. 2016 distinct-n; the pipeline target keeps >= 70% of the stage-1 value"))
    bleu = table.get("response/self_bleu")
    if bleu is not None:
        w = window(len(bleu))
        start = baseline(bleu.values, w)
        onset = first_where(smooth(bleu.values, w), lambda v: v > max(SELF_BLEU_LIMIT, start + 0.3), _persist(len(bleu)))
        if onset is not None:
            onsets.append(bleu.steps[onset])
            evidence.append(_ev("response/self_bleu", bleu, onset, f"smoothed self-BLEU > {SELF_BLEU_LIMIT}",
                                "Zhu et al. 2018 (Texygen) self-BLEU; healthy demo runs stay below 0.4"))
    if not evidence:
        return None
    return Detection("diversity collapse: responses are becoming alike", "high", min(onsets), tuple(evidence))


def identical_responses(table: MetricTable) -> Detection | None:
    """Many responses in a batch identical to another response."""
    return _crossing(
        table, "response/identical_frac", lambda v: v > IDENTICAL_LIMIT,
        lambda s: f"identical responses: {s.values[-1]:.0%} of a batch duplicate another",
        f"smoothed fraction > {IDENTICAL_LIMIT}",
        "sampling at T=1 from a healthy policy almost never repeats a whole response (demo: < 5%)", "high",
    )


# --- reward hacking ---------------------------------------------------------------------
def reward_hacking_gold(table: MetricTable) -> Detection | None:
    """Proxy reward still rising while gold reward falls from its peak (Gao et al. 2022)."""
    proxy, gold = table.get("reward/proxy_mean"), table.get("reward/gold_mean")
    n = min(len(proxy), len(gold))
    if n < 6:
        return None
    w = window(n)
    g, p = smooth(gold.values[:n], w), smooth(proxy.values[:n], w)
    peak = max(range(n), key=g.__getitem__)
    dropped = g[-1] < g[peak] - GOLD_DROP
    proxy_up = p[-1] > p[peak] + PROXY_RISE
    if not (dropped and proxy_up):
        return None
    # Onset: the first step after the peak where gold is GOLD_DROP below it.
    below = next(i for i in range(peak, n) if g[i] < g[peak] - GOLD_DROP)
    return Detection(
        f"reward hacking: proxy rose {p[-1] - p[peak]:+.2f} while gold fell {g[-1] - g[peak]:+.2f} from its peak",
        "high", gold.steps[below],
        (_ev("reward/gold_mean", gold, below, f"smoothed gold {GOLD_DROP} below its peak {g[peak]:.3f} "
             f"(step {gold.steps[peak]})", "Gao et al. 2022: gold reward peaks, then falls as the policy "
             "over-optimises the proxy", peak=g[peak], peak_step=float(gold.steps[peak])),
         _ev("reward/proxy_mean", proxy, below, f"smoothed proxy > {PROXY_RISE} above its value at the gold peak",
             "Gao et al. 2022", at_gold_peak=p[peak])),
    )


def reward_hacking_proxy(table: MetricTable) -> Detection | None:
    """Without gold: proxy rising together with fast KL growth, length/EOS drift or lost diversity."""
    if table.get("reward/gold_mean") is not None:
        return None  # the gold rule decides
    proxy = table.get("reward/proxy_mean")
    n = len(proxy)
    w = window(n)
    p = smooth(proxy.values, w)
    if n < 6 or p[-1] - baseline(proxy.values, w) < HACK_PROXY_RISE:
        return None
    signals: list[tuple[int, Evidence]] = []

    def drift(metric: str, condition: Callable[[float, float], bool], threshold: str, source: str) -> None:
        series = table.get(metric)
        if series is None:
            return
        start = baseline(series.values, window(len(series)))
        onset = first_where(smooth(series.values, window(len(series))), lambda v: condition(v, start),
                            _persist(len(series)))
        if onset is not None:
            signals.append((series.steps[onset], _ev(metric, series, onset, threshold, source)))

    drift("kl/mean", lambda v, s: v > HACK_KL, f"kl/mean > {HACK_KL} nats while proxy rises", KL_ABS_SOURCE)
    drift("response/length_mean", lambda v, s: abs(v - s) > LENGTH_DRIFT * s,
          f"mean length moved more than {LENGTH_DRIFT:.0%} from its start",
          "Singhal et al. 2023: length is the most common proxy exploit")
    drift("response/eos_rate", lambda v, s: v < s - EOS_DROP, f"EOS rate fell more than {EOS_DROP}",
          "Huang et al. 2023: responses that stop ending are a reward/EOS bug")
    drift("response/distinct_2", lambda v, s: v < 0.7 * s, "distinct-2 below 70% of its start",
          "the pipeline's diversity target")
    if not signals:
        return None
    onset = min(step for step, _ in signals)
    evidence = (_ev("reward/proxy_mean", proxy, 0, f"proxy rose > {HACK_PROXY_RISE} over the run",
                    "no gold signal: proxy gains are suspect when they come with drift"),) + tuple(e for _, e in signals)
    return Detection("likely reward hacking (no gold signal): proxy rises with drift in "
                     + ", ".join(e.metric for _, e in signals), "medium", onset, evidence)


def proxy_out_of_range(table: MetricTable) -> Detection | None:
    """The policy is scored beyond anything the reward model saw in training: extrapolation."""
    limit = table.meta.get("proxy_train_max")
    if limit is None:
        return None
    return _crossing(
        table, "reward/proxy_mean", lambda v: v > limit,
        lambda s: f"proxy reward beyond the reward model's training range (max {limit:.2f})",
        f"batch-mean proxy > the highest score on RM training data ({limit:.2f})",
        "Gao et al. 2022; an RM is only trustworthy on the distribution it was trained on",
    )


# --- responses and prompts -------------------------------------------------------------
def responses_never_end(table: MetricTable) -> Detection | None:
    """Most responses cut off at the length limit instead of ending with EOS."""
    return _crossing(
        table, "response/eos_rate", lambda v: v < EOS_RATE_LIMIT,
        lambda s: f"responses do not end: EOS rate {s.values[-1]:.0%}",
        f"smoothed response/eos_rate < {EOS_RATE_LIMIT}",
        "Huang et al. 2023 (N implementation details of RLHF): truncated responses get a penalty "
        "because a reward model scores an unfinished text unreliably; healthy demo runs end at least 98% of their responses",
        "high",
    )


def prompts_narrow(table: MetricTable) -> Detection | None:
    """Few distinct prompts per batch: the policy is trained to answer a handful of prompts."""
    return _crossing(
        table, "prompts/unique_frac", lambda v: v < PROMPT_UNIQUE_LIMIT,
        lambda s: f"narrow prompt data: {s.values[-1]:.0%} of a batch's prompts are distinct",
        f"smoothed prompts/unique_frac < {PROMPT_UNIQUE_LIMIT}",
        "Ouyang et al. 2022 sec. 3.2 deduplicate prompts and cap them per user to keep the prompt "
        "distribution broad; healthy demo batches are at least 90% distinct",
    )


# --- PPO update health ------------------------------------------------------------------
def ratio_off(table: MetricTable) -> Detection | None:
    """The policy/old ratio far from 1 on average, or exploding on some token."""
    mean = table.get("policy/ratio_mean")
    low, high = RATIO_BAND
    onset = first_where(smooth(mean.values, window(len(mean))), lambda v: not low <= v <= high, _persist(len(mean)))
    evidence = []
    if onset is not None:
        evidence.append(_ev("policy/ratio_mean", mean, onset, f"smoothed ratio outside [{low}, {high}]",
                            "TRL logging docs: val/ratio should float around 1.0"))
    top = table.get("policy/ratio_max")
    top_onset = None
    if top is not None:
        # The max over an iteration's thousands of tokens is heavy-tailed: healthy demo runs
        # reach 120 on one iteration, but their median over a window stays below 15. So
        # the median, not single values, must stay above the limit.
        width = window(len(top))
        medians = rolling_median(top.values, width)
        above = first_where(medians, lambda v: v > RATIO_MAX_LIMIT, _persist(len(top)))
        if above is not None:
            top_onset = above + width - 1
            evidence.append(_ev("policy/ratio_max", top, top_onset,
                                f"median of ratio_max over {width} iterations > {RATIO_MAX_LIMIT}, persistently",
                                "a clipped objective cannot stop one token's probability exploding; healthy demo "
                                "runs stay below 15 (docs/doctor.md)"))
    if not evidence:
        return None
    steps = [s for s, i in ((mean.steps[onset] if onset is not None else None, 0),
                            (top.steps[top_onset] if top_onset is not None else None, 1)) if s is not None]
    return Detection("policy/old ratio far from 1", "high", min(steps), tuple(evidence))


def clipfrac_high(table: MetricTable) -> Detection | None:
    """Fraction of clipped tokens persistently high: steps too large."""
    return _crossing(table, "policy/clipfrac", lambda v: v > CLIPFRAC_LIMIT,
                     lambda s: f"updates too large: policy/clipfrac {max(s.values):.3g}",
                     f"smoothed policy/clipfrac > {CLIPFRAC_LIMIT}",
                     "37 implementation details of PPO (Huang et al. 2022): clipfrac is usually 0.1-0.2")


def approxkl_high(table: MetricTable) -> Detection | None:
    """Approximate KL between consecutive policies persistently high: steps too large."""
    return _crossing(table, "policy/approxkl", lambda v: v > APPROXKL_LIMIT,
                     lambda s: f"updates too large: policy/approxkl {max(s.values):.3g}",
                     f"smoothed policy/approxkl > {APPROXKL_LIMIT}",
                     "healthy demo runs stay below 0.15 (docs/benchmarks.md); PPO targets ~0.01-0.02 per update")


def value_explained_variance_low(table: MetricTable) -> Detection | None:
    """The critic predicts returns worse than a constant would, persistently after warm-up."""
    ev = table.get("value/explained_variance")
    skip = len(ev) // 5
    values = smooth(ev.values, window(len(ev)))[skip:]
    onset = first_where(values, lambda v: v < EXPLAINED_VARIANCE_LIMIT, max(3, window(len(ev))))
    if onset is None:
        return None
    return Detection(
        "value function worse than a constant", "medium", ev.steps[skip + onset],
        (_ev("value/explained_variance", ev, skip + onset, f"smoothed EV < {EXPLAINED_VARIANCE_LIMIT} after the first 20%",
             "37 implementation details of PPO: explained variance should rise towards 1"),),
    )


def non_finite(table: MetricTable) -> Detection | None:
    """Any NaN or Inf in a logged metric."""
    if not table.non_finite:
        return None
    first = min(min(steps) for steps in table.non_finite.values())
    evidence = tuple(
        Evidence(metric, min(steps), {"count": float(len(steps))}, "any NaN or Inf", "a finite run logs finite numbers")
        for metric, steps in sorted(table.non_finite.items())
    )
    return Detection(f"non-finite values in {len(evidence)} metric(s)", "high", first, evidence)


def updates_skipped(table: MetricTable) -> Detection | None:
    """Updates the trainer's non-finite guard skipped (a NaN/Inf loss or gradient)."""
    skipped = table.get("guard/skipped_updates")
    hits = [i for i, v in enumerate(skipped.values) if v > 0]
    if not hits:
        return None
    return Detection(
        f"non-finite updates skipped at {len(hits)} iteration(s)", "high", skipped.steps[hits[0]],
        (_ev("guard/skipped_updates", skipped, hits[0], "any skipped update",
             "a finite loss and gradient are the precondition of an optimiser step", iterations=float(len(hits))),),
    )


def grad_norm_spikes(table: MetricTable) -> Detection | None:
    """Gradient norm jumping far above its running median, repeatedly."""
    g = table.get("policy/grad_norm")
    spikes = []
    for i in range(window(len(g)), len(g)):
        history = sorted(g.values[:i])
        median = history[len(history) // 2]
        if median > 0 and g.values[i] > GRAD_SPIKE_FACTOR * median:
            spikes.append(i)
    if len(spikes) < 3:
        return None
    return Detection(
        f"gradient-norm spikes at {len(spikes)} iterations", "medium", g.steps[spikes[0]],
        (_ev("policy/grad_norm", g, spikes[0], f"grad_norm > {GRAD_SPIKE_FACTOR}x its running median, 3+ times",
             "spikes precede divergence (Huang et al. 2022, global gradient clipping)", spikes=float(len(spikes))),),
    )


# --- reward model health ----------------------------------------------------------------
def _last(table: MetricTable, metric: str) -> tuple[int, float]:
    s = table.get(metric)
    return s.steps[-1], s.values[-1]


def rm_weak(table: MetricTable) -> Detection | None:
    """Held-out label accuracy or gold agreement too low: the RM learned little."""
    evidence = []
    step, acc = _last(table, "rm/val_acc")
    if acc < RM_VAL_ACC_LIMIT:
        evidence.append(Evidence("rm/val_acc", step, {"end": acc}, f"final val accuracy < {RM_VAL_ACC_LIMIT}",
                                 "the demo RM reaches ~0.75; human-labeller agreement in Ouyang et al. 2022 is ~0.73"))
    if table.get("rm/gold_agreement") is not None:
        step, agree = _last(table, "rm/gold_agreement")
        if agree < RM_GOLD_AGREEMENT_LIMIT:
            evidence.append(Evidence("rm/gold_agreement", step, {"end": agree},
                                     f"final gold agreement < {RM_GOLD_AGREEMENT_LIMIT}",
                                     "the pipeline's RM target is 0.75"))
    if not evidence:
        return None
    return Detection("weak reward model", "medium", 0, tuple(evidence))


def rm_overfit(table: MetricTable) -> Detection | None:
    """Train accuracy far above held-out accuracy at the end of training."""
    train, val = table.get("rm/train_acc"), table.get("rm/val_acc")
    tail = train.values[-max(1, len(train) // 4):]
    gap = sum(tail) / len(tail) - val.values[-1]
    if gap <= RM_OVERFIT_GAP:
        return None
    return Detection(
        f"reward model overfit: train accuracy {gap:+.2f} over held-out", "medium", 0,
        (Evidence("rm/train_acc", train.steps[-1], {"last_quarter_mean": sum(tail) / len(tail), "val_acc": val.values[-1]},
                  f"train - val accuracy > {RM_OVERFIT_GAP}", "standard generalisation gap check"),),
    )


def rm_length_bias(table: MetricTable) -> Detection | None:
    step, corr = _last(table, "rm/length_corr")
    if abs(corr) <= RM_LENGTH_CORR_LIMIT:
        return None
    return Detection(
        f"reward model scores length (corr {corr:+.2f})", "medium", 0,
        (Evidence("rm/length_corr", step, {"end": corr}, f"|corr(score, length)| > {RM_LENGTH_CORR_LIMIT}",
                  "Singhal et al. 2023, 'A Long Way to Go: Investigating Length Correlations in RLHF'"),),
    )


RULES: tuple[Rule, ...] = (
    Rule("kl_explosion", "exploding_kl", ("kl/mean",), kl_explosion, kl_explosion.__doc__),
    Rule("kl_negative", "exploding_kl", ("kl/mean",), kl_negative, kl_negative.__doc__),
    Rule("kl_controller_wrong_way", "exploding_kl", ("kl/mean", "kl/coef"), kl_controller_wrong_way,
         kl_controller_wrong_way.__doc__),
    Rule("entropy_collapse", "mode_collapse", ("policy/entropy",), entropy_collapse, entropy_collapse.__doc__),
    Rule("diversity_collapse", "mode_collapse", ("response/distinct_2",), diversity_collapse, diversity_collapse.__doc__),
    Rule("identical_responses", "mode_collapse", ("response/identical_frac",), identical_responses,
         identical_responses.__doc__),
    Rule("reward_hacking_gold", "reward_hacking", ("reward/proxy_mean", "reward/gold_mean"), reward_hacking_gold,
         reward_hacking_gold.__doc__),
    Rule("reward_hacking_proxy", "reward_hacking", ("reward/proxy_mean",), reward_hacking_proxy,
         reward_hacking_proxy.__doc__),
    Rule("proxy_out_of_range", "reward_hacking", ("reward/proxy_mean",), proxy_out_of_range, proxy_out_of_range.__doc__),
    Rule("responses_never_end", "responses", ("response/eos_rate",), responses_never_end,
         responses_never_end.__doc__),
    Rule("prompts_narrow", "prompt_data", ("prompts/unique_frac",), prompts_narrow, prompts_narrow.__doc__),
    Rule("ratio_off", "ppo_instability", ("policy/ratio_mean",), ratio_off, ratio_off.__doc__),
    Rule("clipfrac_high", "ppo_instability", ("policy/clipfrac",), clipfrac_high, clipfrac_high.__doc__),
    Rule("approxkl_high", "ppo_instability", ("policy/approxkl",), approxkl_high, approxkl_high.__doc__),
    Rule("value_explained_variance_low", "ppo_instability", ("value/explained_variance",),
         value_explained_variance_low, value_explained_variance_low.__doc__),
    Rule("non_finite", "ppo_instability", (), non_finite, non_finite.__doc__),
    Rule("updates_skipped", "ppo_instability", ("guard/skipped_updates",), updates_skipped, updates_skipped.__doc__),
    Rule("grad_norm_spikes", "ppo_instability", ("policy/grad_norm",), grad_norm_spikes, grad_norm_spikes.__doc__),
    Rule("rm_weak", "reward_model", ("rm/val_acc",), rm_weak, rm_weak.__doc__),
    Rule("rm_overfit", "reward_model", ("rm/train_acc", "rm/val_acc"), rm_overfit, rm_overfit.__doc__),
    Rule("rm_length_bias", "reward_model", ("rm/length_corr",), rm_length_bias, rm_length_bias.__doc__),
)
RULE_NAMES = tuple(rule.name for rule in RULES)
