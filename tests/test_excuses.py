"""The conditions under which a healthy run may pin a number (doctor/excuses.py), each asked
of the run: a trace where the condition holds gets no finding, the same pin where the log
shows it does not (a broken component's trace) gets `pinned_without_its_condition` with the
component that computes the number first. And a gradient norm of exactly 0 while the
policy moves points at the update loop, not the reward model."""

import re

import pytest

from rlhflab.doctor.diagnose import diagnose
from rlhflab.doctor.excuses import EXCUSES, Excuse, is_count_fraction, rises
from rlhflab.doctor.rules.impossible import FREE
from test_doctor_rules import DEMO, healthy_records, modify, table_of

RULE = "pinned_without_its_condition"
N = 60
HALF = N // 2
# Words that make a reason conditional: such a reason must be a predicate the doctor evaluates.
CONDITIONS = re.compile(r"\b(when|while|until|unless|after|with one|near|if|for a)\b")


def test_a_reason_that_names_a_condition_has_a_predicate_and_a_plain_one_names_none():
    for metric, why in FREE.items():
        if isinstance(why, Excuse):
            assert callable(why.holds) and callable(why.computed_by), metric
        else:
            assert not CONDITIONS.search(why), (metric, why)
    assert {m for m, why in FREE.items() if isinstance(why, Excuse)} == set(EXCUSES)
    assert CONDITIONS.search("0 when every group's rewards vary")  # the check itself sees a condition


def _first(table):
    found = {f.rule: f for f in diagnose(table).findings}
    return found[RULE].causes[0].component if RULE in found else None


def pinned(metric, value, **also):
    """A healthy demo trace with `metric` pinned at `value` on its second half (and `also`)."""
    records = healthy_records(0, N)
    for r in records[HALF:]:
        r.update({metric: value} | also)
    return records


ALIKE = {"reward/proxy_std": 0.0, "response/identical_frac": 1.0}  # every response the same
CASES = {
    # metric: (pinned value, settings and other series where the condition fails, ... where it holds, component)
    "reward/proxy_mean": (0.0, ({}, {}), ({}, ALIKE), "reward_model"),
    "reward/proxy_std": (0.0, ({}, {}), ({}, {"response/identical_frac": 1.0}), "reward_model"),
    "kl/coef": (0.2, ({"kl_target": 6.0}, {}), ({}, {}), "kl_control"),
    "policy/ratio_mean": (1.0, ({"epochs": 2, "minibatches": 4}, {}), ({"epochs": 1, "minibatches": 1}, {}),
                          "logprob_bookkeeping"),
    "policy/loss": (0.0, ({"epochs": 2, "minibatches": 4}, {}), ({"epochs": 1, "minibatches": 1}, {}),
                    "advantages_values"),
    "value/explained_variance": (0.0, ({}, {}), ({}, ALIKE), "advantages_values"),
    "adv/mean": (0.0, ({}, {}), ({}, {"adv/std": 1.0}), "advantages_values"),
    "response/length_mean": (12.0, ({}, {}), ({}, {"response/length_mean": 32.0}), "sampling"),
    "response/eos_rate": (0.0, ({}, {}), ({}, {"response/length_mean": 32.0}), "sampling"),
    "mismatch/kl": (0.0, ({"separate_sampler": True}, {}), ({"separate_sampler": False}, {}), "logprob_bookkeeping"),
}


@pytest.mark.parametrize("metric", sorted(CASES))
def test_a_pin_is_held_where_its_condition_fails_and_left_where_it_holds(metric):
    value, (fail_settings, fail_series), (hold_settings, hold_series), component = CASES[metric]
    settings = DEMO | {"kl_target": None}
    broken = table_of(pinned(metric, value, **fail_series), **(settings | fail_settings))
    assert _first(broken) == component, diagnose(broken).findings
    healthy = table_of(pinned(metric, value, **hold_series), **(settings | hold_settings))
    assert _first(healthy) is None


def test_a_held_out_rate_may_sit_at_zero_and_a_continuous_score_may_not():
    rate = modify(healthy_records(0, N), 0, reward__gold_mean=lambda k, v: 0.0 if k >= HALF else round(k / 256, 9))
    assert is_count_fraction([r["reward/gold_mean"] for r in rate])
    assert _first(table_of(rate, **DEMO)) is None
    continuous = pinned("reward/gold_mean", 0.0)
    assert _first(table_of(continuous, **DEMO)) == "evaluation"


def test_a_correlation_near_zero_is_no_excuse_for_exactly_zero():
    records = pinned("reward/length_corr", 0.0)
    assert _first(table_of(records, **DEMO)) == "reward_model"
    records = pinned("reward/length_corr", 1e-3)  # near 0, computed: nothing pinned
    assert _first(table_of(records, **DEMO)) is None


def test_a_pin_in_a_console_that_rounds_is_not_judged():
    records = pinned("policy/ratio_mean", 1.0)
    for r in records:  # a console printing 3 decimals
        for key, value in list(r.items()):
            if isinstance(value, float):
                r[key] = round(value, 3)
    assert _first(table_of(records, **DEMO | {"epochs": 2, "minibatches": 4})) is None


def _dead(moving: bool):
    records = modify(healthy_records(0, N), HALF, policy__grad_norm=lambda k, v: 0.0)
    if not moving:
        records = modify(records, HALF, kl__mean=lambda k, v: 2.0, kl__k3_mean=lambda k, v: 1.8,
                         policy__approxkl=lambda k, v: 0.0)
    return table_of(records, **DEMO)


def test_a_gradient_of_exactly_zero_while_the_policy_moves_points_at_the_update_loop():
    found = {f.rule: f for f in diagnose(_dead(moving=True)).findings}
    assert found["dead_gradients"].causes[0].component == "ppo_hyperparameters"
    assert "update loop" in found["dead_gradients"].causes[0].explanation
    still = {f.rule: f for f in diagnose(_dead(moving=False)).findings}
    assert still["dead_gradients"].causes[0].component == "reward_model"


def test_a_rise_is_a_trend_beyond_the_noise_of_a_level():
    assert rises([0.1 * i for i in range(30)])
    assert not rises([1.0, 1.2, 0.9, 1.1, 1.0, 0.95, 1.05, 1.1, 0.9, 1.0, 1.05, 0.95])
    assert not rises([1.0, 2.0])


def test_steps_logged_twice_by_a_writer_that_logs_each_once_are_a_broken_resume(smoke_run, tmp_path):
    import shutil

    from rlhflab.doctor.formats import read_log

    run = tmp_path / "run"
    shutil.copytree(smoke_run.root, run, ignore=shutil.ignore_patterns("stage*", "checkpoints"))
    metrics = run / "metrics" / "ppo.jsonl"
    lines = metrics.read_text().splitlines(keepends=True)
    assert "steps_logged_twice" not in {f.rule for f in diagnose(read_log(run)).findings}
    metrics.write_text("".join(lines + lines[10:15]))  # resumed at 10 with the lines after it kept
    found = {f.rule: f for f in diagnose(read_log(run)).findings}
    assert found["steps_logged_twice"].causes[0].component == "checkpointing"
    assert "5 step(s)" in found["steps_logged_twice"].title
