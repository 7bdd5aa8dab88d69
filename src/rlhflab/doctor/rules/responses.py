"""Responses and prompts: responses that stop ending, prompt batches that repeat."""

from __future__ import annotations

from rlhflab.doctor import causes
from rlhflab.doctor.causes import Clue
from rlhflab.doctor.findings import Cause
from rlhflab.doctor.rules.registry import Detection, Threshold, crossing, rule
from rlhflab.doctor.signals import baseline
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
