"""`verify` round trip on the smoke preset: no KL penalty is diagnosed as exploding KL,
and a positive coefficient, rerun with the same seeds, makes the finding go away."""

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rlhflab.cli import app
from rlhflab.config import ConfigError, config_from_run, load_config, with_strategy
from rlhflab.pipeline import run_pipeline
from rlhflab.ppo.components import PPOComponents, record_components
from rlhflab.ppo.run import run_ppo
from rlhflab.runs import RunDir, read_jsonl

OVERRIDES = ["ppo.kl_coef=0", "ppo.iterations=60"]


@pytest.fixture(scope="module")
def verified(tmp_path_factory):
    root = tmp_path_factory.mktemp("verify")
    run = run_pipeline(load_config("smoke", overrides=OVERRIDES), root / "kl0", show_progress=False).run
    result = CliRunner().invoke(app, ["verify", str(run.root), "--fix", "ppo.kl_coef=0.2", "--quiet"])
    assert result.exit_code == 0, result.output
    return run.root, Path(f"{run.root}-verify")


def test_no_kl_penalty_is_diagnosed_with_kl_control_first(verified):
    before, _ = verified
    diagnosis = json.loads((before / "diagnosis.json").read_text())
    kl = [f for f in diagnosis["findings"] if f["symptom"] == "exploding_kl"]
    assert kl, [f["rule"] for f in diagnosis["findings"]]
    assert kl[0]["causes"][0]["component"] == "kl_control"
    assert kl[0]["fix"]["changes"] == ["ppo.kl_coef=0.2"]
    assert kl[0]["verify"] == f"rlhflab verify {before} --fix ppo.kl_coef=0.2"
    # The smoke preset's small RM is length-biased, so a reward-hacking finding may put the
    # reward model first; the missing KL penalty must still be among its causes.
    for finding in diagnosis["findings"]:
        if finding["symptom"] == "reward_hacking":
            assert "kl_control" in [c["component"] for c in finding["causes"]]


def test_the_fix_removes_the_symptom_with_the_same_seeds(verified):
    before, after = verified
    assert config_from_run(after) == record_components(
        with_strategy(load_config("smoke", overrides=OVERRIDES + ["ppo.kl_coef=0.2"]), 1), PPOComponents())
    # Stages 1 and 2 were reused, so the rerun differs only in PPO.
    assert (after / "stage2_rm" / "model.safetensors").read_bytes() == (before / "stage2_rm" / "model.safetensors").read_bytes()
    report = json.loads((before / "verify.json").read_text())
    assert report["fix"] == ["ppo.kl_coef=0.2"]
    rows = {r["rule"]: r for r in report["comparison"]}
    # The row holds the last quarter's mean of the finding's first evidence metric (the
    # comparison `rlhflab compare` makes): KL falls with the fix, and gold reward (when gold
    # hacking was found) rises.
    assert rows["kl_explosion"]["gone"] and rows["kl_explosion"]["after"] < rows["kl_explosion"]["before"]
    if "reward_hacking_gold" in rows:
        row = rows["reward_hacking_gold"]
        assert row["gone"] and row["metric"] == "reward/gold_mean" and row["after"] > row["before"], row
    assert report["verdict"] in ("fixed", "partly fixed") and report["truth"]["metric"] == "reward/gold_mean"
    after_kl = read_jsonl(after / "metrics" / "ppo.jsonl")[-1]["kl/mean"]
    before_kl = read_jsonl(before / "metrics" / "ppo.jsonl")[-1]["kl/mean"]
    assert after_kl < before_kl / 2
    assert "kl_explosion" not in {f["rule"] for f in json.loads((after / "diagnosis.json").read_text())["findings"]}


def test_report_is_self_contained_and_marks_findings(verified):
    before, _ = verified
    page = (before / "report.html").read_text()
    assert page.count("data:image/png;base64,") >= 5
    assert "Verification" in page and "<td>kl_explosion</td><td>gone</td>" in page
    assert "src='http" not in page and 'src="http' not in page
    # The verdict and what could be checked, family by family.
    assert "Findings of medium or high severity" in page
    assert "<td>exploding_kl</td><td>checked</td>" in page and "<td>update_health</td><td>checked</td>" in page


def test_live_doctor_stops_the_run_with_a_checkpoint_and_the_diagnosis(verified, tmp_path):
    before, _ = verified
    run = RunDir(tmp_path / "live").create()
    for name in ("world", "stage1_lm", "stage2_rm"):
        shutil.copytree(before / name, run.root / name)
    config = load_config("smoke", overrides=OVERRIDES + ["ppo.stop_on=kl_explosion", "ppo.doctor_every=5"])
    summary = run_ppo(config, run, show_progress=False)
    steps = [r["step"] for r in read_jsonl(run.metrics("ppo"))]
    assert summary["stopped"]["rule"] == "kl_explosion"
    assert len(steps) < 60 and (steps[-1] + 1) % 5 == 0  # stopped at a doctor check
    assert (run.checkpoints / "stopped" / "model.safetensors").is_file()
    assert (run.checkpoints / "stopped" / "value_head.safetensors").is_file()
    diagnosis = json.loads(run.diagnosis.read_text())
    assert "kl_explosion" in {f["rule"] for f in diagnosis["findings"]}


def test_stop_on_names_are_checked():
    with pytest.raises(ConfigError, match="ppo.stop_on = .kl_explosoin.: unknown rule"):
        load_config("smoke", overrides=["ppo.stop_on=kl_explosoin"])


def test_a_fix_reruns_from_the_earliest_stage_it_touches():
    from rlhflab.verify import first_stage_to_rerun

    assert first_stage_to_rerun({"ppo.kl_coef": "0.2"}) == "ppo"
    assert first_stage_to_rerun({"ppo.lr": "1e-4", "reward.pairs": "100"}) == "reward"
    assert first_stage_to_rerun({"pretrain.steps": "10", "ppo.lr": "1e-4"}) == "pretrain"
    # Keys of no stage's section may shape any stage; a code-only fault touches PPO only.
    assert first_stage_to_rerun({"seed": "1"}) == "pretrain"
    assert first_stage_to_rerun({"fault": "lr_100x"}) == "pretrain"
    assert first_stage_to_rerun({}) == "ppo"


def test_stop_on_is_one_tuple_of_rule_names_from_a_string_or_a_toml_list(tmp_path):
    from rlhflab.config import config_from_run, save_config

    config = load_config("smoke", overrides=["ppo.stop_on=kl_explosion, approxkl_high"])
    assert config.ppo.stop_on == ("kl_explosion", "approxkl_high")
    (tmp_path / "run").mkdir()
    save_config(config, tmp_path / "run" / "config.toml")
    assert 'stop_on = ["kl_explosion", "approxkl_high"]' in (tmp_path / "run" / "config.toml").read_text()
    assert config_from_run(tmp_path / "run").ppo.stop_on == ("kl_explosion", "approxkl_high")


def test_stop_on_items_that_are_not_names_are_a_config_error(tmp_path):
    config_file = tmp_path / "bad.toml"
    config_file.write_text("[ppo]\nstop_on = [1]\n")
    with pytest.raises(ConfigError, match="ppo.stop_on"):
        load_config("smoke", config_file=config_file)
