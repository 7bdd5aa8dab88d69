"""Log formats on small fixtures written by the tests (TRL trainer_state.json, TensorBoard
event files, CSV and JSONL with a user mapping, an rlhflab run directory): recognised by
content, names mapped, units converted, settings read, fixes rendered in the trainer's
own vocabulary; and the rule table of docs/doctor.md is the registry's."""

import json
import math
from dataclasses import asdict
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rlhflab.cli import app
from rlhflab.doctor.diagnose import diagnose
from rlhflab.doctor.formats import FORMATS, LogFormatError, detect_format, read_log
from rlhflab.doctor.formats.mapping import parse_map_options, parse_pairs
from rlhflab.doctor.formats.rlhflab import CONFIG_KEYS, settings_from_config
from rlhflab.doctor.ruledoc import doc_is_current
from rlhflab.doctor.settings import SETTING_NAMES

DOCS = Path(__file__).resolve().parents[1] / "docs"


def trl_log_history(n=40, explode=False):
    """Entries shaped like TRL PPOTrainer's log_history (its metric names); the KL grows
    like a healthy TRL PPO run's, fast at first and then slower (bench/rule_calibration.py)."""
    history = []
    for i in range(n):
        kl = 0.6 * math.sqrt(i) + (2 * math.exp(0.15 * (i - 20)) if explode and i > 20 else 0)
        history.append({
            "episode": 64 * (i + 1), "epoch": i / n, "step": i + 1, "eps": 12,
            "objective/kl": kl, "objective/entropy": 20.0 - 0.05 * i, "objective/non_score_reward": -0.05 * kl,
            "objective/rlhf_reward": 0.02 * i, "objective/scores": 0.03 * i, "policy/approxkl_avg": 0.01,
            "policy/clipfrac_avg": 0.05, "loss/policy_avg": -0.01, "loss/value_avg": 0.2, "val/clipfrac_avg": 0.1,
            "policy/entropy_avg": 1.5 - 0.002 * i, "val/ratio": 1.0, "val/ratio_var": 1e-4,
            "val/num_eos_tokens": 60, "lr": 3e-6, "custom/thing": 1.0,
        })
    return history


def write_trl(tmp_path: Path, name="trainer_state.json", **kwargs) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps({"log_history": trl_log_history(**kwargs), "global_step": 40}))
    return path


def test_trl_trainer_state_maps_names_and_reports_unknown(tmp_path: Path):
    table = read_log(write_trl(tmp_path))
    assert table.settings.trainer == "trl-ppo"
    assert table.get("kl/mean").values[4] == pytest.approx(1.2)
    assert table.get("policy/entropy").values[0] == pytest.approx(1.5)  # per-token entropy preferred
    assert table.unit("policy/entropy") == "nats/token"
    assert table.get("reward/proxy_mean").values[-1] == pytest.approx(0.03 * 39)
    assert table.get("policy/ratio_mean").values[0] == 1.0
    assert table.get("policy/clipfrac").steps[0] == 1
    assert table.unknown == ["custom/thing"]
    diagnosis = diagnose(table)
    assert diagnosis.healthy
    assert "reward_hacking_gold" in diagnosis.skipped  # no gold in a TRL log: said, not guessed


def test_a_per_sequence_entropy_fills_in_only_when_no_per_token_one_exists_and_says_its_unit(tmp_path: Path):
    history = [{k: v for k, v in row.items() if k != "policy/entropy_avg"} for row in trl_log_history()]
    path = tmp_path / "trainer_state.json"
    path.write_text(json.dumps({"log_history": history}))
    table = read_log(path)
    assert table.unit("policy/entropy") == "nats/sequence"
    assert any("policy/entropy is in nats/sequence" in note for note in table.notes)
    # Only a rule that compares entropy with its own start reads it in another unit.
    assert table.get("policy/entropy") is None
    assert table.get("policy/entropy", any_unit=True).values[0] == pytest.approx(20.0)
    assert "entropy_collapse" not in diagnose(table).skipped


def test_trl_log_with_exploding_kl_is_diagnosed_in_trl_vocabulary(tmp_path: Path):
    diagnosis = diagnose(read_log(write_trl(tmp_path, explode=True)))
    finding = next(f for f in diagnosis.findings if f.rule == "kl_explosion")
    assert finding.causes[0].component == "kl_control"


def test_a_trl_log_is_recognised_by_content_under_any_name(tmp_path: Path):
    path = write_trl(tmp_path, name="history.json")
    assert detect_format(path).name == "trainer_state"
    with pytest.raises(LogFormatError, match="unknown log format"):
        detect_format(tmp_path)


def test_trl_reader_errors_name_the_file(tmp_path: Path):
    bad = tmp_path / "trainer_state.json"
    bad.write_text('{"log_history": [\n{"step": 1,}\n]}')
    with pytest.raises(LogFormatError, match=r"trainer_state.json:2: invalid JSON"):
        read_log(bad)
    bad.write_text('{"global_step": 3}')
    with pytest.raises(LogFormatError, match="'log_history' list"):
        read_log(bad)


def test_tensorboard_events_are_read(tmp_path: Path):
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(log_dir=str(tmp_path / "tb"))
    for i in range(30):
        writer.add_scalar("kl/mean", 0.1 * i, i)
        writer.add_scalar("kl/coef", 0.2, i)
        writer.add_scalar("response/distinct_2", 0.8, i)
    writer.close()
    table = read_log(tmp_path / "tb")
    assert table.settings.trainer == "canonical"  # too few TRL names to tell the trainer; read as they are
    assert table.get("kl/mean").values[10] == pytest.approx(1.0)
    assert table.get("kl/coef").steps == tuple(range(30))
    assert table.unknown == []
    (tmp_path / "empty").mkdir()
    with pytest.raises(LogFormatError, match="no TensorBoard event files"):
        read_log(tmp_path / "empty", format_name="tensorboard")


def test_csv_and_jsonl_with_a_user_mapping(tmp_path: Path):
    csv_path = tmp_path / "log.csv"
    rows = ["iter,my_kl,my_reward,other"] + [f"{i},{0.1 * i},{0.02 * i},{i}" for i in range(20)]
    csv_path.write_text("\n".join(rows) + "\n")
    table = read_log(csv_path, parse_pairs(["my_kl=kl/mean", "my_reward=reward/proxy_mean", "iter=step"]))
    assert table.get("kl/mean").values[5] == pytest.approx(0.5)
    assert table.get("kl/mean").steps[5] == 5
    assert table.unknown == ["other"]
    table = read_log(csv_path)  # `iter` is a step column's usual name
    assert table.unknown == ["my_kl", "my_reward", "other"] and table.steps_read == 0
    no_step = tmp_path / "no_step.csv"
    no_step.write_text("kl/mean,policy/clipfrac\n" + "".join(f"{0.1 * i},0.1\n" for i in range(12)))
    table = read_log(no_step)  # no step column: rows are numbered, and the table says so
    assert any("no step column" in note for note in table.notes) and table.get("kl/mean").steps[-1] == 11
    jsonl = tmp_path / "log.jsonl"
    jsonl.write_text("\n".join(json.dumps({"step": i, "kl": 0.1 * i, "loss": None if i == 3 else 1.0})
                               for i in range(10)) + "\n")
    table = read_log(jsonl, parse_pairs(["kl=kl/mean", "loss=policy/loss"]))
    assert table.non_finite == {"policy/loss": [3]}
    assert "non_finite" in {f.rule for f in diagnose(table).findings}
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"step": 0}\n{oops\n')
    with pytest.raises(LogFormatError, match=r"broken.jsonl:2: invalid JSON"):
        read_log(broken)
    with pytest.raises(LogFormatError, match="not a canonical metric name"):
        parse_pairs(["kl=kl/means"])


def test_a_toml_mapping_states_units_and_the_table_converts_them(tmp_path: Path):
    log = tmp_path / "run.log"  # no telling suffix: the format is forced
    log.write_text("\n".join(json.dumps({"it": i, "kl_tok": 0.01 * i, "clip_pct": 25.0, "len": 50.0,
                                         "lr_e4": 3.0}) for i in range(1, 21)) + "\n")
    mapping_file = tmp_path / "columns.toml"
    mapping_file.write_text('it = "step"\n'
                            'kl_tok = { metric = "kl/mean", unit = "nats/token" }\n'
                            'clip_pct = { metric = "policy/clipfrac", unit = "percent" }\n'
                            'len = "response/length_mean"\n'
                            'lr_e4 = { metric = "lr", scale = 1e-4 }\n')
    table = read_log(log, parse_map_options([str(mapping_file)]), format_name="table")
    # per-token KL x length = the per-sequence sum the canonical kl/mean is
    assert table.get("kl/mean").values[9] == pytest.approx(0.01 * 10 * 50.0)
    assert table.get("policy/clipfrac").values[0] == pytest.approx(0.25)
    assert table.get("lr").values[0] == pytest.approx(3e-4)
    assert table.get("kl/mean").steps[0] == 1
    assert any("kl/mean converted from nats/token" in note for note in table.notes)
    # Without a length the per-token KL stays per token, and the table says so.
    mapping_file.write_text('it = "step"\nkl_tok = { metric = "kl/mean", unit = "nats/token" }\n')
    table = read_log(log, parse_map_options([str(mapping_file)]), format_name="table")
    assert table.unit("kl/mean") == "nats/token"
    assert table.get("kl/mean", any_unit=True).values[9] == pytest.approx(0.1)
    # A per-token KL is never held against the per-sequence limits: those rules say they lack it.
    assert table.get("kl/mean") is None and "kl_explosion" in diagnose(table).skipped
    mapping_file.write_text('kl_tok = { metric = "kl/mean", unit = "nats per token" }\n')
    with pytest.raises(LogFormatError, match="columns.toml: kl_tok: unknown unit"):
        parse_map_options([str(mapping_file)])


def test_map_works_with_every_format_and_marks_gold(tmp_path: Path):
    table = read_log(write_trl(tmp_path), parse_pairs(["custom/thing=reward/gold_mean"]))
    assert table.unknown == [] and table.settings.has_gold
    assert "reward_hacking_gold" not in diagnose(table).skipped


def test_a_mapping_can_read_what_a_format_ignores_and_rename_the_step(tmp_path: Path):
    table = read_log(write_trl(tmp_path), parse_pairs(["episode=step", "train_loss=policy/loss"]))
    assert table.get("kl/mean").steps[:2] == (64, 128)  # the episode counts the steps now
    assert "step" not in table.series and "step" not in table.unknown
    path = tmp_path / "with_loss.json"
    path.write_text(json.dumps({"log_history": [{"step": i, "train_loss": 0.5} for i in range(1, 4)]}))
    assert read_log(path, parse_pairs(["train_loss=policy/loss"])).get("policy/loss").values == (0.5, 0.5, 0.5)


def test_a_scale_applies_to_its_own_column_and_a_fallbacks_nans_only_count_when_used(tmp_path: Path):
    history = trl_log_history(n=6)
    for row in history:
        row["lr"], row["learning_rate"] = 3.0, None  # two columns for one metric, one scaled
    history[1]["policy/entropy_avg"] = float("nan")
    history[2]["objective/entropy"] = float("nan")
    path = tmp_path / "trainer_state.json"
    path.write_text(json.dumps({"log_history": history}))
    mapping = parse_map_options([])
    table = read_log(path, mapping)
    assert table.non_finite["policy/entropy"] == [2]  # the per-token column's NaN, not the fallback's
    toml = tmp_path / "lr.toml"
    toml.write_text('lr = { metric = "lr", scale = 1e-4 }\n')
    assert read_log(path, parse_map_options([str(toml)])).get("lr").values[0] == pytest.approx(3e-4)
    with pytest.raises(LogFormatError, match="nope.toml: mapping file not found"):
        parse_map_options([str(tmp_path / "nope.toml")])


def test_rlhflab_settings_keys_are_config_fields_and_settings_fields():
    from rlhflab.config import PipelineConfig

    settings = settings_from_config(asdict(PipelineConfig()))
    # kl_target is unset by default; the controller's kind, where the KL sits and who samples are read beside the keys
    assert set(settings) == set(CONFIG_KEYS.values()) - {"kl_target"} | {"kl_controller", "kl_in_reward",
                                                                         "importance_sampling_correction", "separate_sampler"}
    assert set(CONFIG_KEYS.values()) <= set(SETTING_NAMES)


def test_every_format_is_listed_and_recognises_its_own_kind_only(tmp_path: Path):
    trl = write_trl(tmp_path)
    csv_path = tmp_path / "log.csv"
    csv_path.write_text("step,kl/mean\n0,0.1\n")
    recognised = {fmt.name: [p.name for p in (trl, csv_path) if fmt.recognise(p)] for fmt in FORMATS}
    assert recognised == {"rlhflab": [], "trainer_state": ["trainer_state.json"], "wandb-run": [], "tensorboard": [],
                          "mlflow": [], "verl-jsonl": [], "wandb-csv": [], "notebook-table": [], "verl-console": [],
                          "deepspeed-chat": [], "hf-console": [], "table": ["log.csv"]}
    result = CliRunner().invoke(app, ["doctor", "--list-formats"])
    assert result.exit_code == 0 and all(fmt.name in result.output for fmt in FORMATS)


def test_cli_doctor_on_a_trl_log_prints_json_with_the_fix_in_trl_terms(tmp_path: Path):
    path = write_trl(tmp_path, explode=True)
    result = CliRunner().invoke(app, ["doctor", str(path), "--json"])
    assert result.exit_code == 1, result.output  # a finding
    data = json.loads(result.output)
    assert data["healthy"] is False and data["trainer"] == "trl-ppo"
    finding = next(f for f in data["findings"] if f["rule"] == "kl_explosion")
    assert finding["evidence"][0]["metric"] == "kl/mean"
    assert finding["fix"]["changes"] == ["PPOConfig.kl_coef=0.2"]
    assert finding["verify"].startswith("rerun with PPOConfig.kl_coef=0.2")
    assert finding["verify"].endswith(f"then: rlhflab compare {path} -- NEW_LOG")


def test_cli_doctor_errors(tmp_path: Path):
    result = CliRunner().invoke(app, ["doctor", str(tmp_path / "nope")])
    assert result.exit_code == 2 and "no such file or directory" in result.output
    result = CliRunner().invoke(app, ["doctor", str(write_trl(tmp_path)), "--format", "wandb"])
    assert result.exit_code == 2 and "unknown format 'wandb'" in result.output
    result = CliRunner().invoke(app, ["doctor", str(write_trl(tmp_path)), "--map", "nonsense"])
    assert result.exit_code == 2 and "expected THEIR_NAME=canonical/name" in result.output


def test_the_rule_table_in_docs_is_generated_from_the_registry():
    assert doc_is_current(DOCS / "doctor.md"), "stale: run `rlhflab doctor --rules-doc docs/doctor.md`"


def test_a_bad_step_is_an_error_naming_the_row(tmp_path: Path):
    log = tmp_path / "log.jsonl"
    log.write_text('{"step": 0, "kl/mean": 0.1}\n{"step": "one", "kl/mean": 0.2}\n')
    with pytest.raises(LogFormatError, match=r"log.jsonl: row 2: step 'one' \('step'\) is not a whole number"):
        read_log(log)
    result = CliRunner().invoke(app, ["doctor", str(log)])
    assert result.exit_code == 2 and "row 2" in result.output


def test_gold_evaluated_every_few_steps_is_paired_with_the_proxy_by_step(tmp_path: Path):
    # The proxy rises every step; a held-out gold score, every 5th step, peaks at step 40
    # and falls: paired by position, gold's 16 values would sit against the first 16 proxy
    # values and the rise would be missed.
    rows = [{"step": s, "reward/proxy_mean": 0.05 * s} for s in range(80)]
    for row in rows:
        if row["step"] % 5 == 0:
            s = row["step"]
            row["reward/gold_mean"] = 0.01 * s if s <= 40 else 0.4 - 0.04 * (s - 40)
    log = tmp_path / "log.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    finding = next(f for f in diagnose(read_log(log)).findings if f.rule == "reward_hacking_gold")
    assert 40 < finding.onset_step <= 60
    # The proxy at the gold peak is the proxy of steps 30, 35 and 40 (a 3-point window).
    assert finding.evidence[1].observed["at_gold_peak"] == pytest.approx(0.05 * 35)
