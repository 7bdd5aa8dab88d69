"""The conditions under which a healthy run may log a number exactly 0, exactly 1 or exactly
constant, each as a predicate the doctor evaluates on the run's own log and settings.

A reason such as "0 when every response of a step scores alike" is a claim about the run,
and the run can be asked: were the responses alike on the steps where the number is 0?
`rules/impossible.py` holds a metric whose condition does not hold as pinned, and points at
the component that computes or applies the number.

A predicate answers True (the condition holds on those steps), False (the log shows it does
not), or None (the log lacks what the condition needs: the reason stands, untested). "Near
0" is no such condition: a number computed from sampled data in floating point carries
noise, so "near 0" never excuses exactly 0 over the run's second half.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from fractions import Fraction
from typing import Callable, Literal, Optional

from rlhflab.doctor import causes
from rlhflab.doctor.causes import CauseMaker
from rlhflab.doctor.table import MetricTable

Pin = Literal["exactly 0", "exactly 1", "exactly constant"]
Verdict = tuple[Optional[bool], str]  # whether the condition holds, and what in the log says so

LARGEST_COUNT = 4096  # a mean over at most this many 0/1 (or integer) scores is a fraction with this denominator
VALUE_CLIP_OFF = 1.0  # a value clip range this wide clips nothing a standardised return reaches


@dataclass(frozen=True)
class Excuse:
    """Why a healthy run may log `pin`, under a condition the run can be asked about."""

    reason: str  # the condition in words (docs/doctor.md's table prints it)
    pin: Pin
    holds: Callable[[MetricTable, list[int]], Verdict]  # over the pinned steps (their step numbers)
    computed_by: CauseMaker  # the component that computes or applies the number: where a pin without it points


# --- reading other series at the pinned steps ---------------------------------------------------------
def at_steps(table: MetricTable, metric: str, steps: list[int], any_unit: bool = False) -> list[float] | None:
    """`metric`'s values at `steps` (those it logged), or None where it logs none of them."""
    series = table.get(metric, any_unit=any_unit)
    if series is None:
        return None
    wanted = set(steps)
    values = [v for s, v in zip(series.steps, series.values) if s in wanted]
    return values or None


def is_count_fraction(values: list[float]) -> bool:
    """Whether every value is a mean of integer scores over at most LARGEST_COUNT responses
    (a rate: 0 when nothing succeeds), to the float's precision."""
    for value in values:
        nearest = Fraction(value).limit_denominator(LARGEST_COUNT)
        if abs(float(nearest) - value) > 1e-9 * max(1.0, abs(value)):
            return False
    return True


def rises(values: list[float]) -> bool:
    """Whether the last third of `values` lies above the first third beyond twice the
    standard error of their difference (a trend, not a step's noise)."""
    third = len(values) // 3
    if third < 2:
        return False
    first, last = values[:third], values[-third:]
    spread = (statistics.pvariance(first) + statistics.pvariance(last)) / third
    return statistics.fmean(last) - statistics.fmean(first) > 2 * spread ** 0.5 + 1e-12


def steps_per_batch(table: MetricTable) -> int | None:
    settings = table.settings
    if not settings.epochs or not settings.minibatches:
        return None
    return settings.epochs * settings.minibatches


# --- the predicates ---------------------------------------------------------------------------------
def sparse_or_alike(metric: str) -> Callable[[MetricTable, list[int]], Verdict]:
    """A mean reward exactly 0: a rate (0/1 or integer scores, none succeeding), or every
    response of the step scored 0."""

    def holds(table: MetricTable, steps: list[int]) -> Verdict:
        if is_count_fraction(table.get(metric).values):
            return True, f"{metric} is a mean of integer scores throughout"
        spread = at_steps(table, "reward/proxy_std", steps)
        if spread is None:
            return None, "the log has no reward/proxy_std to tell whether the responses scored alike"
        if all(v == 0 for v in spread):
            return True, "reward/proxy_std is 0 on those steps: every response scored alike"
        return False, (f"the scores are continuous and vary (median reward/proxy_std {statistics.median(spread):.3g} "
                       "on those steps): their mean is 0 only by a coincidence at every step")
    return holds


def responses_alike(table: MetricTable, steps: list[int]) -> Verdict:
    """A reward spread exactly 0: a discrete reward alike on every response (solved or
    failed alike), or responses that are all the same."""
    mean = table.get("reward/proxy_mean")
    if mean is not None and is_count_fraction(mean.values):
        return True, "reward/proxy_mean is a mean of integer scores: a step can fail or solve alike"
    identical = at_steps(table, "response/identical_frac", steps)
    if identical is not None and all(v == 1 for v in identical):
        return True, "response/identical_frac is 1 on those steps: every response is the same"
    if mean is None:
        return None, "the log has no reward/proxy_mean to tell whether the reward is discrete"
    if identical is None:
        return None, "the log has no response/identical_frac to tell whether the responses are alike"
    return False, (f"the scores are continuous and the responses differ (median response/identical_frac "
                   f"{statistics.median(identical):.3g} on those steps)")


def discrete_score(metric: str) -> Callable[[MetricTable, list[int]], Verdict]:
    """A held-out score exactly 0: a rate (a hard task none of whose answers pass)."""

    def holds(table: MetricTable, steps: list[int]) -> Verdict:
        if is_count_fraction(table.get(metric).values):
            return True, f"{metric} is a rate (a mean of integer scores): a hard task can score 0"
        return False, f"{metric} is a continuous score: a mean of continuous scores is not 0 to every digit"
    return holds


def fixed_coefficient(table: MetricTable, steps: list[int]) -> Verdict:
    """A KL coefficient exactly constant: a fixed beta."""
    settings = table.settings
    if settings.adaptive_kl or settings.kl_controller == "adaptive":
        return False, "the run's KL controller is adaptive: its coefficient moves at every step the KL is off target"
    if settings.kl_controller == "fixed" or settings.kl_coef is not None:
        return True, "the run's KL coefficient is fixed"
    return None, "the log does not say whether the KL controller is fixed or adaptive"


def one_step_per_batch(metric: str) -> Callable[[MetricTable, list[int]], Verdict]:
    """A ratio of exactly 1, or a policy loss of exactly 0: one optimiser step per batch,
    before which the policy is the one that sampled."""

    def holds(table: MetricTable, steps: list[int]) -> Verdict:
        per_batch = steps_per_batch(table)
        if per_batch is None:
            return None, "the log does not say how many optimiser steps each batch takes"
        if per_batch == 1:
            return True, "one optimiser step per batch: the policy is the sampler's at every step"
        return False, (f"{per_batch} optimiser steps per batch: after the first, {metric} is taken on a policy "
                       "that has moved")
    return holds


def value_clip_wide(table: MetricTable, steps: list[int]) -> Verdict:
    """A value clip fraction exactly 0: a clip that is off or wide, or a critic that moves
    less than the clip range in an update (which the log cannot show)."""
    eps = table.settings.value_clip_eps
    if eps is not None and eps >= VALUE_CLIP_OFF:
        return True, f"the value clip range {eps:g} is wide"
    return None, "whether the critic moves less than its clip range in an update is not in the log"


def returns_constant(table: MetricTable, steps: list[int]) -> Verdict:
    """An explained variance exactly 0: returns that do not vary (nothing to explain).
    "Near 0 for a critic that learns slowly" does not excuse exactly 0: a critic's values
    and noisy returns computed in floating point do not cancel to every digit."""
    spread = at_steps(table, "reward/proxy_std", steps)
    if spread is not None and all(v == 0 for v in spread):
        return True, "reward/proxy_std is 0 on those steps: the returns do not vary"
    return False, "a slow critic explains near 0 of the variance, never exactly 0: its values are constant"


def whitened(table: MetricTable, steps: list[int]) -> Verdict:
    """A mean advantage exactly 0: advantages whitened (their std 1 on those steps)."""
    std = at_steps(table, "adv/std", steps)
    if std is None:
        return None, "the log has no adv/std to tell whether the advantages are whitened"
    if all(abs(v - 1) < 1e-3 for v in std):
        return True, "adv/std is 1 on those steps: the advantages are whitened"
    return False, f"the advantages are not whitened (median adv/std {statistics.median(std):.3g}), yet average 0"


def _at_limit(table: MetricTable, steps: list[int]) -> Verdict:
    limit = table.settings.response_length
    lengths = at_steps(table, "response/length_mean", steps)
    eos = at_steps(table, "response/eos_rate", steps)
    cut = at_steps(table, "response/truncated_frac", steps)
    if (eos is not None and all(v == 0 for v in eos)) or (cut is not None and all(v == 1 for v in cut)):
        return True, "no response ends on those steps: every one runs to the length limit"
    if limit and lengths is not None and all(abs(v - limit) < 0.5 for v in lengths):
        return True, f"the mean length is the limit {limit} on those steps"
    if limit and lengths is not None:
        return False, (f"the mean length ({statistics.median(lengths):.3g} tokens) is below the limit {limit}: "
                       "responses that do not end run to it")
    return None, "the log has neither the length limit nor the ended fraction"


def cut_at_limit(table: MetricTable, steps: list[int]) -> Verdict:
    """A mean response length exactly constant: every response cut at the length limit, or
    every response the same."""
    identical = at_steps(table, "response/identical_frac", steps)
    if identical is not None and all(v == 1 for v in identical):
        return True, "response/identical_frac is 1: every response is the same"
    return _at_limit(table, steps)


def eos_unreachable(table: MetricTable, steps: list[int]) -> Verdict:
    """An EOS rate exactly 0: every response cut at the length limit (its mean length the limit)."""
    limit, lengths = table.settings.response_length, at_steps(table, "response/length_mean", steps)
    if limit and lengths is not None:
        if all(abs(v - limit) < 0.5 for v in lengths):
            return True, f"the mean length is the limit {limit} on those steps"
        return False, (f"the mean length ({statistics.median(lengths):.3g} tokens) is below the limit {limit}: "
                       "a response that does not end runs to the limit")
    return None, "the log has not both the length limit and the mean length"


def lengths_and_rewards_vary(table: MetricTable, steps: list[int]) -> Verdict:
    """A length-reward correlation exactly 0: lengths or rewards that do not vary. "Near 0
    for a reward that ignores length" does not excuse exactly 0 over sampled responses."""
    lengths, spread = table.get("response/length_mean"), at_steps(table, "reward/proxy_std", steps)
    if spread is not None and all(v == 0 for v in spread):
        return True, "reward/proxy_std is 0 on those steps: the rewards do not vary"
    if lengths is not None and len(set(lengths.values)) > 1:
        return False, "the lengths and the rewards vary: their sample correlation is not 0 to every digit"
    return None, "the log does not show whether the lengths vary"


def sampler_is_trainer(table: MetricTable, steps: list[int]) -> Verdict:
    """A sampler/trainer difference exactly 0 (a ratio exactly 1): the trainer samples its
    own rollouts, from the logprobs of its own forward."""
    separate = table.settings.separate_sampler
    if separate is None:
        return None, "the log does not say whether an inference engine samples the rollouts"
    if not separate:
        return True, "the trainer samples its own rollouts"
    return False, "an inference engine samples the rollouts in its own kernels: it does not match the trainer to every digit"


_MAY = "may be {} in a healthy run: "
SAMPLER = "when the sampler is the trainer"
EXCUSES: dict[str, Excuse] = {
    "reward/proxy_mean": Excuse(_MAY.format(0) + "a sparse reward (0 or 1) sits at 0 until the first success, or "
                                "every response scores 0", "exactly 0", sparse_or_alike("reward/proxy_mean"),
                                causes.reward_not_read),
    "reward/score_mean": Excuse(_MAY.format(0) + "as the proxy", "exactly 0", sparse_or_alike("reward/score_mean"),
                                causes.reward_not_read),
    "reward/total_mean": Excuse(_MAY.format(0) + "as the proxy", "exactly 0", sparse_or_alike("reward/total_mean"),
                                causes.penalty_accounting),
    "reward/proxy_std": Excuse(_MAY.format(0) + "when every response of a step scores alike (solved or failed alike, "
                               "or the responses are the same)", "exactly 0", responses_alike, causes.reward_not_read),
    "reward/gold_mean": Excuse(_MAY.format(0) + "a held-out rate (a mean of pass/fail scores) starts at 0 on a hard "
                               "task", "exactly 0", discrete_score("reward/gold_mean"), causes.held_out_evaluation),
    "kl/coef": Excuse("a setting: constant when the coefficient is fixed (no adaptive target)", "exactly constant",
                      fixed_coefficient, causes.inverted_controller),
    "policy/ratio_mean": Excuse(_MAY.format(1) + "exactly 1 with one optimiser step per batch", "exactly 1",
                                one_step_per_batch("policy/ratio_mean"), causes.logprob_bookkeeping),
    "policy/ratio_max": Excuse(_MAY.format(1) + "exactly 1 with one optimiser step per batch", "exactly 1",
                               one_step_per_batch("policy/ratio_max"), causes.logprob_bookkeeping),
    "policy/loss": Excuse(_MAY.format(0) + "exactly 0 with one optimiser step per batch (its value is not its "
                          "gradient: on policy with advantages of mean 0, GRPO's and whitened PPO's)", "exactly 0",
                          one_step_per_batch("policy/loss"), causes.advantages_values),
    "value/clipfrac": Excuse(_MAY.format(0) + "when the value clip is wide or off, or the critic moves less than it "
                             "in an update", "exactly 0", value_clip_wide, causes.advantages_values),
    "value/explained_variance": Excuse(_MAY.format(0) + "when the returns do not vary (near 0 for a slow critic is "
                                       "no excuse for exactly 0)", "exactly 0", returns_constant,
                                       causes.advantages_values),
    "adv/mean": Excuse(_MAY.format(0) + "exactly 0 after whitening", "exactly 0", whitened, causes.advantages_values),
    "response/length_mean": Excuse(_MAY.format("constant") + "when every response is cut at the length limit, or "
                                   "every response is the same", "exactly constant", cut_at_limit,
                                   causes.unended_responses),
    "response/eos_rate": Excuse(_MAY.format(0) + "while every response is cut at the length limit", "exactly 0",
                                eos_unreachable, causes.unended_responses),
    "reward/length_corr": Excuse(_MAY.format(0) + "when the rewards do not vary (near 0 for a reward that ignores "
                                 "length is no excuse for exactly 0)", "exactly 0", lengths_and_rewards_vary,
                                 causes.reward_model_length),
    "mismatch/logp_abs_diff": Excuse(_MAY.format(0) + SAMPLER, "exactly 0", sampler_is_trainer, causes.sampler_mismatch),
    "mismatch/prob_abs_diff": Excuse(_MAY.format(0) + SAMPLER, "exactly 0", sampler_is_trainer, causes.sampler_mismatch),
    "mismatch/kl": Excuse(_MAY.format(0) + SAMPLER, "exactly 0", sampler_is_trainer, causes.sampler_mismatch),
    "mismatch/prob_ratio_error": Excuse(_MAY.format(1) + SAMPLER, "exactly 1", sampler_is_trainer,
                                        causes.sampler_mismatch),
    "mismatch/is_ratio_mean": Excuse(_MAY.format(1) + SAMPLER, "exactly 1", sampler_is_trainer, causes.sampler_mismatch),
    "correction/weight_mean": Excuse(_MAY.format(1) + SAMPLER, "exactly 1", sampler_is_trainer, causes.sampler_mismatch),
    "correction/changed_frac": Excuse(_MAY.format(0) + SAMPLER, "exactly 0", sampler_is_trainer,
                                      causes.sampler_mismatch),
}
