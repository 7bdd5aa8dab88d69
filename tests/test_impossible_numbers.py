"""Numbers a healthy run cannot produce (doctor/rules/impossible.py): every canonical metric
decided, "exactly 0" claimed only at a precision that could show a healthy value (a veRL
console printing 4 decimals against one printing 2, and the real veRL log's 3), and a NaN
gradient in a run that never moved blamed on the arithmetic or the optimiser first."""

import math
import random
from pathlib import Path

import pytest

from rlhflab.doctor.diagnose import diagnose
from rlhflab.doctor.formats import read_log
from rlhflab.doctor.metrics import CANONICAL
from rlhflab.doctor.rules import RULES
from rlhflab.doctor.rules.impossible import APPROXKL_FLOOR, FREE, PINNED, decisions, printed_resolution
from rlhflab.doctor.table import MetricTable
from test_doctor_rules import fired, healthy_records, modify, table_of

REAL_VERL = Path(__file__).resolve().parents[2] / "shared" / "real_logs" / "verl_ppo_qwen2.5-0.5b_gsm8k_resp256.log"


def test_every_canonical_metric_is_decided_once_and_every_member_is_a_rule_of_the_family():
    pinned = {p.metric for p in PINNED}
    assert not pinned & set(FREE)
    assert pinned | set(FREE) == set(CANONICAL)
    assert [row[0] for row in decisions()] == list(CANONICAL)
    family = {r.name for r in RULES if r.family == "impossible"}
    assert {p.rule for p in PINNED} | {"pinned_without_its_condition", "steps_logged_twice"} == family


def verl_console(tmp_path: Path, decimals: int, n: int = 40) -> Path:
    """A veRL console whose KL to the reference is 0 throughout while the clip fraction
    and approx-KL show the policy moving, every number printed with `decimals` decimals."""
    rng = random.Random(0)
    lines = []
    for step in range(1, n + 1):
        values = {"critic/kl": 0.0, "critic/kl_coeff": 0.001, "actor/ppo_kl": 0.002 + 0.001 * rng.random(),
                  "actor/pg_clipfrac": 0.05 + 0.02 * rng.random(), "actor/entropy_loss": 0.45 - 0.002 * step
                  + 0.01 * rng.random(), "actor/grad_norm": 2.0 + rng.random(),
                  "critic/score/mean": 0.1 + 0.01 * step + 0.05 * rng.random(), "response_length/mean": 200.0
                  + 10 * rng.random()}
        lines.append(f"(main_task pid=1) step:{step} - "
                     + " - ".join(f"{key}:{value:.{decimals}f}" for key, value in values.items()))
    path = tmp_path / f"verl_{decimals}.log"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_kl_of_exactly_zero_is_claimed_only_where_the_console_could_show_a_healthy_one(tmp_path):
    four = read_log(verl_console(tmp_path, 4))
    assert printed_resolution(four, four.get("kl/token_mean", any_unit=True)) == pytest.approx(5e-5)
    found = {f.rule: f for f in diagnose(four).findings}
    assert "kl_stuck_at_zero" in found
    assert found["kl_stuck_at_zero"].causes[0].component == "kl_control"  # the reference
    # At 2 decimals a per-token KL of 0.004 prints as 0.00: nothing can be said.
    two = read_log(verl_console(tmp_path, 2))
    assert printed_resolution(two, two.get("kl/token_mean", any_unit=True)) == pytest.approx(5e-3)
    assert "kl_stuck_at_zero" not in fired(two)


@pytest.mark.skipif(not REAL_VERL.exists(), reason="the shared real logs are not beside this checkout")
def test_the_real_verl_console_prints_approxkl_too_coarsely_for_its_zeros_to_count():
    table = read_log(REAL_VERL)
    approxkl = table.get("policy/approxkl")
    assert sum(v == 0.0 for v in approxkl.values) > len(approxkl) / 2  # 0.000 on most steps, healthy
    assert printed_resolution(table, approxkl) == pytest.approx(5e-4)
    assert printed_resolution(table, approxkl) > APPROXKL_FLOOR.value
    assert not {f.rule for f in diagnose(table).findings} & {p.rule for p in PINNED}


def test_a_json_log_prints_every_digit_and_a_short_number_is_exact():
    table = table_of(healthy_records(0))
    assert printed_resolution(table, table.get("lr")) == 0.0  # 3e-4, written `0.0003`, is exact


def non_finite_gradient(records: list[dict], kl_moves: bool) -> MetricTable:
    records = modify(records, 10, policy__grad_norm=lambda k, old: math.nan)
    if not kl_moves:
        records = modify(records, 0, kl__mean=lambda k, old: 0.0, kl__k3_mean=lambda k, old: 0.0,
                         policy__approxkl=lambda k, old: 0.0)
    return table_of(records, accounts=False)


def test_a_nan_gradient_before_the_policy_ever_moved_points_at_the_arithmetic_not_the_reward_scale():
    never_moved = next(f for f in diagnose(non_finite_gradient(healthy_records(3), kl_moves=False)).findings
                       if f.rule == "non_finite")
    assert never_moved.causes[0].component == "ppo_hyperparameters"
    assert "not the reward's scale" in never_moved.causes[0].explanation
    moved = next(f for f in diagnose(non_finite_gradient(healthy_records(3), kl_moves=True)).findings
                 if f.rule == "non_finite")
    assert moved.causes[0].component == "reward_scaling"  # the rule's own ranking


def test_a_nan_gradient_in_a_console_printing_decimals_does_not_claim_the_policy_never_moved():
    table = non_finite_gradient(healthy_records(3), kl_moves=False)
    for name, series in list(table.series.items()):  # every number as a 3-decimal console prints it
        table.series[name] = type(series)(series.steps, tuple(round(v, 3) for v in series.values))
    finding = next(f for f in diagnose(table).findings if f.rule == "non_finite")
    assert finding.causes[0].component == "reward_scaling"  # the rule's own ranking: 0.000 may be 4e-4
