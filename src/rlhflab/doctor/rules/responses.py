"""Responses and prompts: responses that stop ending or are cut, lengths that collapse or blow
up, prompt batches that repeat."""

from __future__ import annotations

from rlhflab.doctor import causes
from rlhflab.doctor.causes import Clue
from rlhflab.doctor.findings import Cause
from rlhflab.doctor.rules.registry import GOLD_HELD, Detection, Threshold, crossing, rule, unless_gold_rises
from rlhflab.doctor.signals import baseline, window
from rlhflab.doctor.table import MetricTable

EOS_RATE_LIMIT = Threshold(
    "EOS_RATE_LIMIT", 0.5,
    "Huang et al. 2023 (N implementation details of RLHF): truncated responses get a penalty because a reward model "
    "scores an unfinished text unreliably; healthy demo runs end at least 98% of their responses")
PROMPT_UNIQUE_LIMIT = Threshold(
    "PROMPT_UNIQUE_LIMIT", 0.5,
    "Ouyang et al. 2022 sec. 3.2 deduplicate prompts and cap them per user to keep the prompt distribution broad; "
    "healthy demo batches are at least 90% distinct")


def _repeated_prompts(table: MetricTable) -> Cause | None:
    unique = table.get("prompts/unique_frac")
    if unique is not None and baseline(unique.values, len(unique)) < PROMPT_UNIQUE_LIMIT.value:
        return Cause("prompt_data", f"only {unique.values[-1]:.0%} of each batch's prompts are distinct", None)
    return None


REPEATED_PROMPTS = Clue("repeated_prompts", 5, _repeated_prompts,
                        "the run's mean `prompts/unique_frac` < PROMPT_UNIQUE_LIMIT")


@rule("responses_never_end", "responses", requires=("response/eos_rate",), thresholds=(EOS_RATE_LIMIT,),
      causes=(causes.unended_responses, causes.exploitable_reward_model))
def responses_never_end(table: MetricTable) -> Detection | None:
    """Most responses cut off at the length limit instead of ending with EOS."""
    return crossing(table, "response/eos_rate", lambda v: v < EOS_RATE_LIMIT.value,
                    lambda s: f"responses do not end: EOS rate {s.values[-1]:.0%}",
                    f"smoothed response/eos_rate < {EOS_RATE_LIMIT.value}", EOS_RATE_LIMIT.source, "high")


@rule("prompts_narrow", "prompt_data", requires=("prompts/unique_frac",), thresholds=(PROMPT_UNIQUE_LIMIT,),
      causes=(causes.narrow_prompts,))
def prompts_narrow(table: MetricTable) -> Detection | None:
    """Few distinct prompts per batch: the policy is trained to answer a handful of prompts."""
    return crossing(table, "prompts/unique_frac", lambda v: v < PROMPT_UNIQUE_LIMIT.value,
                    lambda s: f"narrow prompt data: {s.values[-1]:.0%} of a batch's prompts are distinct",
                    f"smoothed prompts/unique_frac < {PROMPT_UNIQUE_LIMIT.value}", PROMPT_UNIQUE_LIMIT.source)


TRUNCATED_LIMIT = Threshold(
    "TRUNCATED_LIMIT", 0.5,
    "a response cut at the length limit has not ended: the same limit as EOS_RATE_LIMIT (Huang et al. 2023), in "
    "the unit trainers that log the cut fraction use (TRL's completions/clipped_ratio, veRL's clip_ratio)")
LENGTH_COLLAPSE_FRACTION = Threshold(
    "LENGTH_COLLAPSE_FRACTION", 0.3,
    "of the run's starting length, fitted on labelled runs (bench/rule_calibration.py): healthy runs keep at least "
    "0.52 of it (rlhflab demo, 3 seeds; veRL PPO on GSM8K 0.65), the TRL GRPO run whose answers collapsed to 2-3 "
    "tokens keeps 0.12; 0.3 sits 1.7x under the healthy floor and 2.5x above the collapse. Checked on TRL "
    "GRPO/RLOO runs it was not fitted on: healthy 0.68-0.84, RLOO at 30x the learning rate 0.14")
LENGTH_BLOWUP_FACTOR = Threshold(
    "LENGTH_BLOWUP_FACTOR", 1.6,
    "times the run's starting length, fitted on labelled runs (bench/rule_calibration.py): healthy runs stay under "
    "1.19x (rlhflab demo, 3 seeds; veRL 1.02x), runs that over-optimise a length-loving proxy reach 2.06-3.0x "
    "(rlhflab kl_coef=0 x4, kl_sign_flipped, reward_scale_100x); 1.6 is their geometric middle, 1.3x from each. "
    "Checked on TRL GRPO/RLOO runs it was not fitted on: healthy 1.01-1.25, length rewarded 1.81, cold sampling 4.4")


@rule("truncation_saturated", "responses", requires=("response/truncated_frac",), thresholds=(TRUNCATED_LIMIT,),
      causes=(causes.unended_responses, causes.length_limit, causes.exploitable_reward_model))
def truncation_saturated(table: MetricTable) -> Detection | None:
    """Most responses cut at the length limit (the log's truncated fraction)."""
    return crossing(table, "response/truncated_frac", lambda v: v > TRUNCATED_LIMIT.value,
                    lambda s: f"responses cut at the length limit: {s.values[-1]:.0%} truncated",
                    f"smoothed response/truncated_frac > {TRUNCATED_LIMIT.value}", TRUNCATED_LIMIT.source, "high")


def _relative_to_start(table: MetricTable, metric: str, predicate, title, threshold: str, source: str,
                       severity) -> Detection | None:
    """`crossing` against the series' own starting level (the mean of its first window)."""
    series = table.get(metric)
    start = baseline(series.values, window(len(series)))
    if start <= 0:
        return None
    return crossing(table, metric, lambda v: predicate(v / start), lambda s: title(s, start),
                    threshold.format(start=start), source, severity)


@rule("length_collapse", "mode_collapse", requires=("response/length_mean",),
      thresholds=(LENGTH_COLLAPSE_FRACTION, GOLD_HELD),
      causes=(causes.step_size, causes.kl_control, causes.exploitable_reward_model))
def length_collapse(table: MetricTable) -> Detection | None:
    """Responses shrinking to a fraction of their starting length: the policy stops answering."""
    return unless_gold_rises(table, _relative_to_start(
        table, "response/length_mean", lambda r: r < LENGTH_COLLAPSE_FRACTION.value,
        lambda s, start: f"length collapse: responses shrank from {start:.1f} to {s.values[-1]:.1f} tokens",
        f"smoothed response/length_mean < {LENGTH_COLLAPSE_FRACTION.value} x its starting level {{start:.1f}}",
        LENGTH_COLLAPSE_FRACTION.source, "high"), "shorter answers that score better")


@rule("length_blowup", "reward_hacking", requires=("response/length_mean",),
      thresholds=(LENGTH_BLOWUP_FACTOR, GOLD_HELD),
      causes=(causes.exploitable_reward_model, causes.kl_control, causes.step_size))
def length_blowup(table: MetricTable) -> Detection | None:
    """Responses growing far beyond their starting length: a proxy that pays for length."""
    return unless_gold_rises(table, _relative_to_start(
        table, "response/length_mean", lambda r: r > LENGTH_BLOWUP_FACTOR.value,
        lambda s, start: f"length blow-up: responses grew from {start:.1f} to {s.values[-1]:.1f} tokens",
        f"smoothed response/length_mean > {LENGTH_BLOWUP_FACTOR.value} x its starting level {{start:.1f}}",
        LENGTH_BLOWUP_FACTOR.source, "medium"), "longer answers that score better")
