"""Each clue that moves a cause to the front, on both sides of its limit: the cause it names
when its evidence is there, nothing when it is not or the metric is absent."""

import pytest

from rlhflab.doctor.rules.responses import PROMPT_UNIQUE_LIMIT, REPEATED_PROMPTS
from rlhflab.doctor.rules.reward_model import RM_LENGTH_CORR_LIMIT, RM_SCORES_LENGTH, RM_VAL_ACC_LIMIT, RM_WEAK
from rlhflab.doctor.rules.update import (
    ADV_STD_LIMIT,
    APPROXKL_LIMIT,
    CLIPFRAC_LIMIT,
    FIRST_UPDATE_LIMIT,
    LARGE_FIRST_UPDATE,
    LARGE_UPDATES,
    UNSCALED_REWARDS,
)
from rlhflab.doctor.table import MetricTable


def table(metric: str, values: list[float]) -> MetricTable:
    return MetricTable.from_records([{"step": i, metric: v} for i, v in enumerate(values)])


# (clue, metric, values over the limit, values within it, the component it names)
CASES = {
    "rm_weak": (RM_WEAK, "rm/val_acc", [0.9, RM_VAL_ACC_LIMIT.value - 0.05], [0.5, RM_VAL_ACC_LIMIT.value + 0.05],
                "reward_model"),
    "rm_scores_length": (RM_SCORES_LENGTH, "rm/length_corr", [0.0, -(RM_LENGTH_CORR_LIMIT.value + 0.1)],
                         [0.9, RM_LENGTH_CORR_LIMIT.value - 0.1], "reward_model"),
    "large_first_update": (LARGE_FIRST_UPDATE, "policy/approxkl", [FIRST_UPDATE_LIMIT.value + 1, 0.01],
                           [FIRST_UPDATE_LIMIT.value - 1, 100.0], "ppo_hyperparameters"),
    "unscaled_rewards": (UNSCALED_REWARDS, "adv/std", [ADV_STD_LIMIT.value * 2] * 4, [ADV_STD_LIMIT.value / 2] * 4,
                         "reward_scaling"),
    "large_updates (approx-KL)": (LARGE_UPDATES, "policy/approxkl", [APPROXKL_LIMIT.value * 2] * 4,
                                  [APPROXKL_LIMIT.value / 2] * 4, "ppo_hyperparameters"),
    "large_updates (clip fraction)": (LARGE_UPDATES, "policy/clipfrac", [CLIPFRAC_LIMIT.value + 0.2] * 4,
                                      [CLIPFRAC_LIMIT.value - 0.2] * 4, "ppo_hyperparameters"),
    "repeated_prompts": (REPEATED_PROMPTS, "prompts/unique_frac", [PROMPT_UNIQUE_LIMIT.value / 2] * 12,
                         [PROMPT_UNIQUE_LIMIT.value + 0.3] * 12, "prompt_data"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_clue_names_its_cause_past_its_limit_and_nothing_within_it(name):
    clue, metric, past, within, component = CASES[name]
    assert clue.find(table(metric, past)).component == component
    assert clue.find(table(metric, within)) is None
    assert clue.find(table("kl/mean", [0.1] * 4)) is None  # its metric not logged
