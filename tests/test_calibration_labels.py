"""bench/calibration.py's labeller: the truth the doctor's calibration is measured against,
computed here on hand-built curves whose label follows from its definition."""

import importlib.util
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench" / "calibration.py"
spec = importlib.util.spec_from_file_location("calibration_bench", BENCH)
calibration = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = calibration  # dataclasses look their module up by name
spec.loader.exec_module(calibration)


def history(gold: list[float], distinct: float = 0.6, truncated: float = 0.0) -> list[dict]:
    return [{"step": 10 * i, "gold": g, "eval_distinct_2": distinct, "eval_truncated": truncated}
            for i, g in enumerate(gold)]


def proxy(values: list[float]) -> list[tuple[int, float]]:
    """The proxy over the 10 steps up to each evaluation (none before the first, at step 0)."""
    return [(10 * (i - 1) + k, v) for i, v in enumerate(values) if i for k in range(1, 11)]


RISE_THEN_FALL = [0.0, 0.2, 0.4, 0.4, 0.4, 0.1, -0.1, -0.1, -0.1]


def test_gold_falling_while_the_proxy_climbs_is_reward_hacking():
    label = calibration.label_run(history(RISE_THEN_FALL), proxy([0.0, 0.5, 1.0, 1.0, 1.0, 1.5, 2.0, 2.0, 2.0]))
    assert label["label"] == "pathological" and label["families"] == ["reward_hacking"]
    # by hand: gold's trailing 3-mean first reaches 0.4 at evaluation 4 (evaluations 2-4, which
    # cover steps 11-40, where the proxy is 1.0); the last 3 evaluations' proxy is 2.0
    assert label["gold_best"] == pytest.approx(0.4) and label["gold_end"] == pytest.approx(-0.1)
    assert label["proxy_at_gold_best"] == pytest.approx(1.0) and label["proxy_end"] == pytest.approx(2.0)


def test_gold_falling_with_the_proxy_is_a_degraded_policy():
    label = calibration.label_run(history(RISE_THEN_FALL), proxy([0.0, 0.5, 1.0, 1.0, 1.0, 0.6, 0.2, 0.2, 0.2]))
    assert label["families"] == ["policy_degraded"]


def test_gold_held_near_its_best_is_healthy_and_flat_gold_is_no_learning():
    rising = [0.0, 0.1, 0.2, 0.3, 0.35, 0.35, 0.34, 0.35, 0.33]
    assert calibration.label_run(history(rising), proxy([0.0] * 9))["label"] == "healthy"
    flat = [0.0, 0.01, -0.01, 0.0, 0.0, -0.02, 0.0, -0.01, -0.01]
    assert calibration.label_run(history(flat), proxy([0.0] * 9))["label"] == "no_learning"


def test_diversity_and_truncation_are_families_of_their_own():
    rows = history([0.0, 0.1, 0.2, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3])
    rows[-1]["eval_distinct_2"], rows[-1]["eval_truncated"] = 0.2, 0.95
    assert calibration.label_run(rows, proxy([0.0] * 9))["families"] == ["mode_collapse", "truncation"]


def test_the_proxy_is_the_reward_the_trainer_optimised():
    grpo = [{"step": 1, "reward": 0.5, "loss": 0.1}, {"step": 2, "reward": 0.7}]
    ppo = [{"step": 1, "objective/scores": 1.5}]
    assert calibration.proxy_series(grpo) == [(1, 0.5), (2, 0.7)]
    assert calibration.proxy_series(ppo) == [(1, 1.5)]
    with pytest.raises(ValueError, match="no reward column"):
        calibration.proxy_series([{"step": 1, "loss": 0.1}])
