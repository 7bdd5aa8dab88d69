"""Readers on small fixtures written by the tests: TRL trainer_state.json, TensorBoard
event files, CSV and JSONL with a user mapping, and an rlhflab run directory."""

import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rlhflab.cli import app
from rlhflab.doctor.diagnose import diagnose
from rlhflab.doctor.readers import LogFormatError, read_log, read_table_file, read_tensorboard, read_trl_state


def trl_log_history(n=40, explode=False):
    """Entries shaped like TRL PPOTrainer's log_history (its metric names)."""
    history = []
    for i in range(n):
        kl = 0.1 * i + (2 * math.exp(0.15 * (i - 20)) if explode and i > 20 else 0)
        history.append({
            "episode": 64 * (i + 1), "epoch": i / n, "step": i + 1, "eps": 12,
            "objective/kl": kl, "objective/entropy": 20.0 - 0.05 * i, "objective/non_score_reward": -0.05 * kl,
            "objective/rlhf_reward": 0.02 * i, "objective/scores": 0.03 * i, "policy/approxkl_avg": 0.01,
            "policy/clipfrac_avg": 0.05, "loss/policy_avg": -0.01, "loss/value_avg": 0.2, "val/clipfrac_avg": 0.1,
            "policy/entropy_avg": 1.5 - 0.002 * i, "val/ratio": 1.0, "val/ratio_var": 1e-4,
            "val/num_eos_tokens": 60, "lr": 3e-6, "custom/thing": 1.0,
        })
    return history


def test_trl_trainer_state_maps_names_and_reports_unknown(tmp_path: Path):
    path = tmp_path / "trainer_state.json"
    path.write_text(json.dumps({"log_history": trl_log_history(), "global_step": 40}))
    table = read_trl_state(path)
    assert table.get("kl/mean").values[3] == pytest.approx(0.3)
    assert table.get("policy/entropy").values[0] == pytest.approx(1.5)  # per-token entropy preferred
    assert table.get("reward/proxy_mean").values[-1] == pytest.approx(0.03 * 39)
    assert table.get("policy/ratio_mean").values[0] == 1.0
    assert table.get("policy/clipfrac").steps[0] == 1
    assert table.unknown == ["custom/thing"]
    diagnosis = diagnose(table)
    assert diagnosis.healthy
    assert "reward_hacking_gold" in diagnosis.skipped  # no gold in a TRL log: said, not guessed


def test_trl_log_with_exploding_kl_is_diagnosed(tmp_path: Path):
    path = tmp_path / "trainer_state.json"
    path.write_text(json.dumps({"log_history": trl_log_history(explode=True)}))
    rules = {f.rule for f in diagnose(read_log(path)).findings}
    assert "kl_explosion" in rules


def test_trl_reader_errors_name_the_file(tmp_path: Path):
    bad = tmp_path / "trainer_state.json"
    bad.write_text('{"log_history": [\n{"step": 1,}\n]}')
    with pytest.raises(LogFormatError, match=r"trainer_state.json:2: invalid JSON"):
        read_trl_state(bad)
    bad.write_text('{"global_step": 3}')
    with pytest.raises(LogFormatError, match="'log_history' list"):
        read_trl_state(bad)


def test_tensorboard_events_are_read(tmp_path: Path):
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(log_dir=str(tmp_path / "tb"))
    for i in range(30):
        writer.add_scalar("train/objective/kl", 0.1 * i, i)
        writer.add_scalar("kl/coef", 0.2, i)
        writer.add_scalar("response/distinct_2", 0.8, i)
    writer.close()
    table = read_tensorboard(tmp_path / "tb")
    assert table.get("kl/mean").values[10] == pytest.approx(1.0)
    assert table.get("kl/coef").steps == tuple(range(30))
    assert table.unknown == []
    with pytest.raises(LogFormatError, match="no TensorBoard event files"):
        read_tensorboard(tmp_path / "empty")


def test_csv_and_jsonl_with_a_user_mapping(tmp_path: Path):
    csv_path = tmp_path / "log.csv"
    rows = ["iter,my_kl,my_reward,other"] + [f"{i},{0.1 * i},{0.02 * i},{i}" for i in range(20)]
    csv_path.write_text("\n".join(rows) + "\n")
    table = read_table_file(csv_path, {"my_kl": "kl/mean", "my_reward": "reward/proxy_mean"}, step_key="iter")
    assert table.get("kl/mean").values[5] == pytest.approx(0.5)
    assert table.unknown == ["other"]
    with pytest.raises(LogFormatError, match=r"log.csv:1: no 'step' column"):
        read_table_file(csv_path)
    jsonl = tmp_path / "log.jsonl"
    jsonl.write_text("\n".join(json.dumps({"step": i, "kl": 0.1 * i, "loss": None if i == 3 else 1.0})
                               for i in range(10)) + "\n")
    table = read_table_file(jsonl, {"kl": "kl/mean", "loss": "policy/loss"})
    assert table.non_finite == {"policy/loss": [3]}
    assert "non_finite" in {f.rule for f in diagnose(table).findings}
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"step": 0}\n{oops\n')
    with pytest.raises(LogFormatError, match=r"broken.jsonl:2: invalid JSON"):
        read_table_file(broken)


def test_cli_doctor_on_a_trl_log_prints_json(tmp_path: Path):
    path = tmp_path / "trainer_state.json"
    path.write_text(json.dumps({"log_history": trl_log_history(explode=True)}))
    result = CliRunner().invoke(app, ["doctor", str(path), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["healthy"] is False
    finding = next(f for f in data["findings"] if f["rule"] == "kl_explosion")
    assert finding["evidence"][0]["metric"] == "kl/mean"
    assert finding["verify"].startswith("rlhflab verify")


def test_cli_doctor_on_a_missing_path(tmp_path: Path):
    result = CliRunner().invoke(app, ["doctor", str(tmp_path / "nope")])
    assert result.exit_code == 2 and "no such file or directory" in result.output
