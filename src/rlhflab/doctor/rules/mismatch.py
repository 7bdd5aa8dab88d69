"""Training-inference mismatch: the inference engine's logprobs for the tokens it sampled
are not the trainer's for the same tokens (its precision and kernels, weights synced late
or not at all, a stale asynchronous sampler), so the update treats off-policy samples as
on-policy; behind many silent failures of RL with vLLM or SGLang (Yao et al. 2025, "Your
efficient RL framework secretly brings you off-policy RL training").

Each trainer logs its own quantity (`metrics.MISMATCH_METRICS`). A run is held to the
limits its trainer's maintainers publish for that quantity, each cited, and a logprob gap,
whoever logs it, to the limits published on logprobs (NeMo-RL's 1.05, as ln 1.05 nats;
slime's 0.1), so a gap that is large from the first step is a finding; where they publish
none (TRL, OpenRLHF, prime-rl, ROLL, SkyRL, AReaL: qualitative advice only; rlhflab) it is
held to its own early level: a sampler whose weights lag the trainer's drifts further as
the policy moves (MISMATCH_GROWTH, fitted on rlhflab runs with a sampler never synced, its
own decoder and vLLM alike; SGLang's margin is not measured). A limit is crossed by the
smoothed series (the doctor's window), so a single spike is not a finding: NeMo-RL's
guides ask to investigate spikes and call a trend above the limit unacceptable.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from rlhflab.doctor import causes
from rlhflab.doctor.metrics import MISMATCH_METRICS
from rlhflab.doctor.rules.registry import Detection, Threshold, evidence, rule
from rlhflab.doctor.signals import early_level, smooth, window
from rlhflab.doctor.table import MetricTable

VERL_PROB_DIFF = Threshold(
    "VERL_PROB_DIFF", 0.01,
    "mean |p_trainer - p_rollout| per token (veRL's training/rollout_probs_diff_mean): veRL docs/faq/faq.rst, "
    "'Missmatch between inference and training sequence': below 0.005 normally, above 0.01 a precision issue "
    "of the inference engine")
VERL_ROLLOUT_KL = Threshold(
    "VERL_ROLLOUT_KL", 0.1,
    "|rollout_corr/kl| (k1 KL of the rollout policy to the trainer's, per token): veRL docs/algo/rollout_corr.md, "
    "'Conditional Alerting': above 0.1 a significant off-policy gap")
VERL_IS_MEAN_HIGH = Threshold(
    "VERL_IS_MEAN_HIGH", 2.0,
    "mean importance weight trainer/rollout (rollout_corr/rollout_is_mean): veRL docs/algo/rollout_corr.md, "
    "'Conditional Alerting': outside [0.5, 2.0] it is far from 1")
VERL_IS_MEAN_LOW = Threshold("VERL_IS_MEAN_LOW", 0.5, VERL_IS_MEAN_HIGH.source)
NEMO_PROB_ERROR = Threshold(
    "NEMO_PROB_ERROR", 1.05,
    "mean exp(|logp_train - logp_gen|) per token (NeMo-RL's token_mult_prob_error; 1 is a perfect match): NeMo-RL "
    "docs/adding-new-models.md, 'Expected Error Threshold': values exceeding 1.05 require investigation "
    "(docs/guides/dtensor-tp-accuracy.md: above 1.05 a potential framework issue)")
NEMO_GEN_KL = Threshold(
    "NEMO_GEN_KL", 1e-3,
    "KL of the generation policy to the trainer's per token (NeMo-RL's gen_kl_error, k3): NeMo-RL "
    "docs/guides/grpo.md, 'KL Divergence Error': below 1e-3 acceptable, investigate anything above")
NEMO_LOGP_GAP = Threshold(
    "NEMO_LOGP_GAP", math.log(NEMO_PROB_ERROR.value),
    "ln 1.05 nats of mean |logp_train - logp_sampler| per token: NeMo-RL's limit of 1.05 on mean "
    "exp(|logp_train - logp_gen|) (token_mult_prob_error, docs/adding-new-models.md) read on the logprob gap itself. "
    "By Jensen's inequality a mean gap above ln 1.05 puts NeMo-RL's quantity above 1.05, but a gap below it does "
    "not keep that quantity below (a few large gaps weigh more in the mean of exponentials): an approximate bound")
SLIME_ABS_DIFF = Threshold(
    "SLIME_ABS_DIFF", 0.1,
    "mean |logp_train - logp_rollout| (slime's train/train_rollout_logprob_abs_diff): the bound slime asserts on it "
    "by default (slime/utils/arguments.py, --ci-train-rollout-logprob-abs-diff-threshold; 1e-6 for deterministic "
    "alignment, docs/en/advanced/reproducibility.md)")


MISMATCH_GROWTH = Threshold(
    "MISMATCH_GROWTH", 4.0,
    "times the mismatch's early level (its distance from a perfect match; the early level is its second window's "
    "median, or its noise when higher), for a trainer that publishes no limit: a sampler whose weights lag the "
    "trainer's drifts further from it as the policy moves. Fitted on rlhflab runs (bench/mismatch_calibration.py, "
    "mismatch/logp_abs_diff): healthy (sampler and trainer one model, float noise) 0.97-1.02x on seeds 0-1, a "
    "sampler never synced after the start 17.2-17.5x; 4 is their geometric middle, 3.9x above the healthy and 4.3x "
    "below the never-synced. Checked on seed 2, not fitted on: 1.06x and 18.6x. On rlhflab runs sampled by vLLM "
    "(bench/engine_bench.py, float32 engine synced after every update, or with every sync dropped), fitted on seeds "
    "0-1: healthy 1.07-1.08x (mismatch/kl 1.12-1.18x), sync dropped 19.5-19.7x (mismatch/kl 51.8-52.9x), geometric "
    "middle 4.6 (kept at 4: on the gap 3.7x above the healthy and 4.9x below the dropped, on mismatch/kl 3.4x and "
    "13x); seed 2, not fitted on: 0.99x and 22.0x "
    "(mismatch/kl 0.93x and 54.9x). A bfloat16 engine against the float32 trainer has a constant gap (7.8e-3 nats, "
    "1.03-1.07x): its precision, not a lag, and below the published absolute limits")


EVERY_TRAINER = "*"


@dataclass(frozen=True)
class PublishedLimit:
    """A limit a trainer's maintainers publish for one mismatch quantity: above `high` (or,
    for a ratio that must stay near 1, below `low` too; `absolute`: on |value|). It holds
    the logs of `trainer`, or of every trainer that logs the quantity (EVERY_TRAINER: a
    limit on the logprob gap itself, which means the same whoever logs it)."""

    publisher: str  # the trainer whose maintainers publish it
    metric: str
    high: Threshold
    low: Threshold | None = None
    absolute: bool = False
    trainer: str = ""  # the dialect whose logs it holds: the publisher's by default

    def holds(self, trainer: str) -> bool:
        return (self.trainer or self.publisher) in (trainer, EVERY_TRAINER)

    def crossed(self, value: float) -> bool:
        v = abs(value) if self.absolute else value
        return v > self.high.value or (self.low is not None and v < self.low.value)

    def describe(self) -> str:
        name = f"|{self.metric}|" if self.absolute else self.metric
        band = f" or < {self.low.value:g}" if self.low is not None else ""
        return f"smoothed {name} > {self.high.value:g}{band}"


LIMITS: tuple[PublishedLimit, ...] = (
    PublishedLimit("verl", "mismatch/prob_abs_diff", VERL_PROB_DIFF),
    PublishedLimit("verl", "mismatch/kl", VERL_ROLLOUT_KL, absolute=True),
    PublishedLimit("verl", "mismatch/is_ratio_mean", VERL_IS_MEAN_HIGH, VERL_IS_MEAN_LOW),
    PublishedLimit("nemo-rl", "mismatch/prob_ratio_error", NEMO_PROB_ERROR),
    PublishedLimit("nemo-rl", "mismatch/kl", NEMO_GEN_KL),
    # On the logprob gap, for every trainer that logs one (TRL, SkyRL, slime, rlhflab): a
    # constant gap beyond these is a finding from its first steps, not only a growing one.
    PublishedLimit("nemo-rl", "mismatch/logp_abs_diff", NEMO_LOGP_GAP, trainer=EVERY_TRAINER),
    PublishedLimit("slime", "mismatch/logp_abs_diff", SLIME_ABS_DIFF, trainer=EVERY_TRAINER),
)


# Quantities whose perfect match is 1 (a ratio), not 0: their level is the distance from 1.
RATIOS = ("mismatch/prob_ratio_error", "mismatch/is_ratio_mean")


def mismatch_level(metric: str, values: list[float]) -> list[float]:
    """How far from a perfect match each value is: |v - 1| for a ratio, |v| otherwise (a
    k1 estimate can be negative)."""
    return [abs(v - 1.0) if metric in RATIOS else abs(v) for v in values]


def mismatch_growth(metric: str, values: list[float]) -> tuple[float, list[float], float] | None:
    """(late level over early level, the smoothed level, the early level) of a mismatch
    series, or None for a run shorter than two windows. The early level is the median of the
    second window (after the first updates), or the series' noise when that is higher
    (`signals.early_level`): a mismatch at float noise has no level to grow from but its noise."""
    level = mismatch_level(metric, values)
    width = window(len(level))
    early = early_level(level, width)
    if early is None or early <= 0:
        return None
    smoothed = smooth(level, width)
    return smoothed[-1] / early, smoothed, early


@rule("sampler_mismatch", "component_bug",
      thresholds=(VERL_PROB_DIFF, VERL_ROLLOUT_KL, VERL_IS_MEAN_HIGH, VERL_IS_MEAN_LOW, NEMO_PROB_ERROR, NEMO_GEN_KL,
                  NEMO_LOGP_GAP, SLIME_ABS_DIFF, MISMATCH_GROWTH),
      causes=(causes.sampler_mismatch, causes.sampler_settings))
def sampler_mismatch(table: MetricTable) -> Detection | None:
    """The inference engine's logprobs drift from the trainer's beyond the limit the log's
    trainer publishes for the quantity it logs (veRL: probability difference, rollout KL,
    importance weights; NeMo-RL: multiplicative probability error, generation KL; slime:
    absolute logprob difference), and a logprob gap from any trainer to NeMo-RL's ln 1.05
    and slime's 0.1 nats, on the smoothed series: high when the run ends beyond it, medium
    when it returned. For a quantity its trainer publishes no limit for (TRL, OpenRLHF,
    prime-rl, ROLL, SkyRL, AReaL, rlhflab) and that crosses none, growing to
    MISMATCH_GROWTH times its early level (medium)."""
    found = []
    # The quantities the log's own trainer publishes limits for are held to those alone; the
    # others keep the relative rule as well (a lagging sampler below an absolute limit).
    published = {limit.metric for limit in LIMITS if limit.publisher == table.settings.trainer}
    for limit in LIMITS:
        series = table.get(limit.metric) if limit.holds(table.settings.trainer) else None
        if series is None or len(series) < 3:
            continue
        smoothed = smooth(series.values, window(len(series)))
        beyond = [i for i, v in enumerate(smoothed) if limit.crossed(v)]
        if beyond:
            found.append((limit, series, smoothed, beyond))
    if not found:
        return _grown(table, published)
    # The limit crossed longest; at equal length the higher (slime's 0.1 over ln 1.05 on one gap).
    limit, series, smoothed, beyond = max(found, key=lambda f: (len(f[3]), f[0].high.value))
    ends_beyond = limit.crossed(smoothed[-1])
    onset = beyond[0]
    worst = max(series.values, key=abs) if limit.absolute else (
        min(series.values) if limit.low is not None and smoothed[onset] < limit.low.value else max(series.values))
    return Detection(
        f"the inference engine's logprobs drift from the trainer's: {limit.metric} {smoothed[onset]:.4g} at step "
        f"{series.steps[onset]} ({'still beyond' if ends_beyond else 'back within'} its limit at the end)",
        "high" if ends_beyond else "medium", series.steps[onset],
        (evidence(limit.metric, series, onset, limit.describe(), limit.high.source, worst=worst,
                  steps_beyond=float(len(beyond))),))


def _grown(table: MetricTable, published: set[str]) -> Detection | None:
    """A mismatch quantity the log's trainer publishes no limit for that ended MISMATCH_GROWTH
    times its early level or more (medium: a relative limit, fitted on simulated runs)."""
    worst = None
    for metric in sorted(set(table.series) & set(MISMATCH_METRICS) - published):
        series = table.get(metric)
        measured = mismatch_growth(metric, list(series.values)) if series is not None else None
        if measured is None or measured[0] < MISMATCH_GROWTH.value:
            continue
        growth, smoothed, early = measured
        if worst is None or growth > worst[0]:
            onset = next(i for i, v in enumerate(smoothed) if v >= MISMATCH_GROWTH.value * early)
            worst = (growth, metric, series, onset, early)
    if worst is None:
        return None
    growth, metric, series, onset, early = worst
    return Detection(
        f"the inference engine's logprobs drift away from the trainer's: {metric} grew {growth:.3g}x over its early "
        f"level (the sampler's weights lag the trainer's?)", "medium", series.steps[onset],
        (evidence(metric, series, onset, f"smoothed distance from a perfect match >= {MISMATCH_GROWTH.value:g} x its "
                  f"early level ({early:.3g})", MISMATCH_GROWTH.source, growth=growth),))
