"""Training-inference mismatch: the inference engine's logprobs for the tokens it sampled
are not the trainer's for the same tokens (its precision and kernels, weights synced late
or not at all, a stale asynchronous sampler), so the update treats off-policy samples as
on-policy; behind many silent failures of RL with vLLM or SGLang (Yao et al. 2025, "Your
efficient RL framework secretly brings you off-policy RL training").

Each trainer logs its own quantity (`metrics.MISMATCH_METRICS`). A run is held to the
limits its trainer's maintainers publish for that quantity, each cited; where they publish
none (TRL, OpenRLHF, prime-rl, ROLL, SkyRL, AReaL: qualitative advice only) the quantity is
read and shown but not judged: a relative rule against the run's own early level would need
labelled runs with an inference engine apart from the trainer, which cannot be trained
here. A limit is crossed by the smoothed series (the doctor's window), so a single spike
is not a finding: NeMo-RL's guides ask to investigate spikes and call a trend above the
limit unacceptable.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlhflab.doctor import causes
from rlhflab.doctor.rules.registry import Detection, Threshold, evidence, rule
from rlhflab.doctor.signals import smooth, window
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
SLIME_ABS_DIFF = Threshold(
    "SLIME_ABS_DIFF", 0.1,
    "mean |logp_train - logp_rollout| (slime's train/train_rollout_logprob_abs_diff): the bound slime asserts on it "
    "by default (slime/utils/arguments.py, --ci-train-rollout-logprob-abs-diff-threshold; 1e-6 for deterministic "
    "alignment, docs/en/advanced/reproducibility.md)")


@dataclass(frozen=True)
class PublishedLimit:
    """A limit a trainer's maintainers publish for one mismatch quantity: above `high` (or,
    for a ratio that must stay near 1, below `low` too; `absolute`: on |value|)."""

    trainer: str  # the dialect whose logs it holds
    metric: str
    high: Threshold
    low: Threshold | None = None
    absolute: bool = False

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
    PublishedLimit("slime", "mismatch/logp_abs_diff", SLIME_ABS_DIFF),
)


@rule("sampler_mismatch", "component_bug",
      thresholds=(VERL_PROB_DIFF, VERL_ROLLOUT_KL, VERL_IS_MEAN_HIGH, VERL_IS_MEAN_LOW, NEMO_PROB_ERROR, NEMO_GEN_KL,
                  SLIME_ABS_DIFF),
      causes=(causes.sampler_mismatch, causes.sampler_settings))
def sampler_mismatch(table: MetricTable) -> Detection | None:
    """The inference engine's logprobs drift from the trainer's beyond the limit the log's
    trainer publishes for the quantity it logs (veRL: probability difference, rollout KL,
    importance weights; NeMo-RL: multiplicative probability error, generation KL; slime:
    absolute logprob difference), on the smoothed series. High when the run ends beyond it,
    medium when it returned."""
    found = []
    for limit in LIMITS:
        series = table.get(limit.metric) if table.settings.trainer == limit.trainer else None
        if series is None or len(series) < 3:
            continue
        smoothed = smooth(series.values, window(len(series)))
        beyond = [i for i, v in enumerate(smoothed) if limit.crossed(v)]
        if beyond:
            found.append((limit, series, smoothed, beyond))
    if not found:
        return None
    limit, series, smoothed, beyond = max(found, key=lambda f: len(f[3]))
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
