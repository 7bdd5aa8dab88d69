"""Other trainers' logs, each recognised by its content and read in its trainer's names and
units: fixtures written from each trainer's format strings (tests/fixtures/logs, see its
README), and TRL's by the real trainers. Verdicts, coverage and exit codes."""

import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rlhflab.cli import app
from rlhflab.doctor.diagnose import diagnose, diagnosis_json
from rlhflab.doctor.formats import DIALECTS, detect_format, read_log

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "logs"
REAL_LOGS = Path(__file__).resolve().parents[2] / "shared" / "real_logs"


def read(name: str):
    table = read_log(FIXTURES / name)
    return table, diagnose(table)


@pytest.mark.parametrize("name, fmt, trainer, steps", [
    ("verl_console_early.log", "verl-console", "verl", 16),
    ("verl_console_late.log", "verl-console", "verl", 16),
    ("verl_file.jsonl", "verl-jsonl", "verl", 16),
    ("dschat_step3.log", "deepspeed-chat", "deepspeed-chat", 16),
    ("openrlhf_wandb.csv", "wandb-csv", "openrlhf", 32),
    ("nemo_rl_mlruns", "mlflow", "nemo-rl", 16),
    ("trlx_tensorboard", "tensorboard", "trlx", 16),
    ("trl_ppo_legacy_tensorboard", "tensorboard", "trl-ppo-0.x", 16),
])
def test_each_fixture_is_recognised_by_content_and_read_to_its_last_step(name, fmt, trainer, steps):
    assert detect_format(FIXTURES / name).name == fmt
    table, diagnosis = read(name)
    assert (table.settings.trainer, diagnosis.steps) == (trainer, steps)
    assert table.get("reward/proxy_mean") is not None and table.get("reward/proxy_mean").steps[-1] >= steps - 1


def test_verl_early_console_names_units_settings_and_gold():
    table, diagnosis = read("verl_console_early.log")
    # actor/lr(1e-4):0.010 is 1e-6; critic/kl is a per-token k1 mean, made per sequence with the length.
    assert table.get("lr").values[0] == pytest.approx(1e-6)
    kl_token, length = table.get("kl/token_mean"), table.get("response/length_mean")
    assert table.estimators["kl/token_mean"] == "k1"
    assert table.get("kl/mean").values[-1] == pytest.approx(kl_token.values[-1] * length.values[-1])
    assert 3 in table.get("policy/entropy").steps  # the line with a NUL byte is read
    assert table.get("reward/gold_mean").steps == (4, 9, 14)  # val/test_score/openai/gsm8k
    assert table.settings.kl_coef == 0.001 and table.settings.clip_eps == 0.2 and table.settings.lr == 1e-6
    assert table.settings.response_length == 256 and table.settings.entropy_coef == 0.001
    assert diagnosis.verdict == "no_finding" and diagnosis.exit_code == 0
    assert not [n for n in table.unknown if n.startswith(("timing", "critic/score/m", "prompt_length"))]


def test_verl_late_console_kl_loss_run_is_fixed_in_verl_keys_without_rlhflab_verify():
    table, diagnosis = read("verl_console_late.log")
    assert table.get("policy/grad_norm").values[0] == pytest.approx(0.13)  # np.float64(0.13)
    assert table.estimators["kl/token_mean"] == "k3"  # actor/kl_loss, low_var_kl by default
    assert table.get("policy/approxkl") is not None and table.estimators["policy/approxkl"] == "k1"
    finding = next(f for f in diagnosis.findings if f.rule == "kl_explosion")
    rendered = diagnosis_json(diagnosis)["findings"][0]
    assert any("actor_rollout_ref.actor.kl_loss_coef" in c for c in rendered["fix"]["changes"]), rendered["fix"]
    assert "rlhflab verify" not in rendered["verify"] and finding.severity in ("high", "medium")
    assert diagnosis.exit_code == 1


def test_verl_jsonl_merges_lines_of_a_step_and_reports_repeats():
    table, diagnosis = read("verl_file.jsonl")
    assert table.get("reward/gold_mean").steps == (0, 5, 10, 15)  # val-core/.../acc/mean@1, same step as train
    assert table.get("reward/proxy_mean").values[-1] == pytest.approx(0.71)  # the last write of step 16 wins
    assert any("logged more than once" in n for n in table.notes)
    assert diagnosis.verdict == "no_finding"


def test_deepspeed_chat_holds_too_little_to_call_healthy():
    table, diagnosis = read("dschat_step3.log")
    assert table.get("reward/proxy_mean").values[0] == pytest.approx(-0.68)
    assert table.get("policy/loss") is not None and table.get("value/loss") is not None
    assert diagnosis.verdict == "cannot_tell" and diagnosis.exit_code == 3
    assert diagnosis.coverage["exploding_kl"].status == "missing"
    assert "symptom families" in diagnosis.cannot_tell_reason()


def test_openrlhf_wandb_export_reads_means_not_their_range_and_flags_the_run():
    table, diagnosis = read("openrlhf_wandb.csv")
    assert table.get("kl/token_mean").values[0] == pytest.approx(0.002 * math.exp(0.19))
    assert not [n for n in table.unknown if "__M" in n]
    assert table.get("kl/mean") is not None  # per token x response length
    assert diagnosis.verdict == "finding"
    # fixes in OpenRLHF's flags since v0.10.2 (dotted), the flat ones of older releases in a note
    assert any(c.startswith("--algo.kl.init_coef")
               for f in diagnosis_json(diagnosis)["findings"] for c in (f["fix"] or {}).get("changes", []))
    assert any("--algo.kl.init_coef = --init_kl_coef" in note for note in table.notes)


def test_nemo_rl_mlflow_run_maps_validation_accuracy_to_the_truth():
    table, diagnosis = read("nemo_rl_mlruns")
    assert table.get("reward/gold_mean").steps == (0, 5, 10, 15)
    assert table.estimators["kl/token_mean"] == "k3"
    assert table.get("policy/entropy").values[0] == pytest.approx(0.7)
    assert diagnosis.verdict == "no_finding"


def test_trlx_kl_is_the_square_of_sqrt_kl_and_approx_kl_is_not_kl():
    table, _ = read("trlx_tensorboard")
    assert table.get("kl/mean").values[-1] == pytest.approx(4.0)
    assert table.get("policy/approxkl").values[0] == pytest.approx(0.01)


def test_trl_legacy_ppo_from_tensorboard_is_fixed_with_init_kl_coef():
    table, diagnosis = read("trl_ppo_legacy_tensorboard")
    assert table.get("policy/entropy").values[0] == pytest.approx(2.0)  # ppo/policy/entropy, per token
    assert table.get("reward/proxy_mean").values[-1] == pytest.approx(2.5)
    changes = [c for f in diagnosis_json(diagnosis)["findings"] for c in (f["fix"] or {}).get("changes", [])]
    assert any("PPOConfig.init_kl_coef" in c or "PPOConfig.target" in c for c in changes), changes


def test_approx_kl_of_any_trainer_is_never_read_as_kl_to_the_reference():
    for dialect in DIALECTS:
        for name, column in dialect.columns.items():
            if "approx" in name or name.endswith("ppo_kl"):
                assert not column.metric.startswith("kl/"), (dialect.name, name)


# --- TRL trainer_state.json and console ------------------------------------------------------------
def grpo_rows(n=30, beta=True, zero_clip=True, functions=("accuracy", "format")):
    rows = []
    for i in range(n):
        row = {"loss": 0.01, "grad_norm": 0.5, "learning_rate": 1e-6, "num_tokens": 1000.0 * i,
               "completions/mean_length": 120.0 - i, "completions/clipped_ratio": 0.01,
               "reward": 0.2 + 0.01 * i, "reward_std": 0.3, "frac_reward_zero_std": 0.1, "entropy": 0.8,
               "clip_ratio/low_mean": 0.0, "clip_ratio/region_mean": 0.0 if zero_clip else 0.02,
               "epoch": i / n, "step": 10 * (i + 1)}
        for k, fn in enumerate(functions):
            row[f"rewards/{fn}/mean"] = 0.5 if k == 0 else max(0.0, 0.3 - 0.02 * i)
            row[f"rewards/{fn}/std"] = 0.1
        if beta:
            row["kl"] = 0.001 * (i + 1)
        rows.append(row)
    rows.append({"train_runtime": 100.0, "train_samples_per_second": 1.0, "train_steps_per_second": 0.1,
                 "total_flos": 0.0, "train_loss": 0.01, "epoch": 1.0, "step": 10 * n})
    rows.insert(5, {"eval_loss": 0.2, "eval_reward": 0.3, "eval_runtime": 3.0, "epoch": 0.2, "step": 50})
    return rows


def test_grpo_trainer_state_names_summary_row_eval_rows_and_reward_functions(tmp_path: Path):
    path = tmp_path / "trainer_state.json"
    path.write_text(json.dumps({"log_history": grpo_rows(), "global_step": 300}))
    table = read_log(path)
    assert table.settings.trainer == "trl-grpo" and table.steps_read == 30  # the summary row is not a step
    assert table.get("kl/token_mean").values[0] == pytest.approx(0.001)
    assert table.estimators["kl/token_mean"] == "k3 (GRPO) or k1 (RLOO)"  # the two log the same names
    # The proxy on held-out prompts is the run's held-out score; the training proxy stays apart.
    assert table.get("reward/gold_mean").steps == (50,) and table.get("reward/proxy_mean").steps[0] == 10
    assert table.settings.has_gold and "eval/reward/proxy_mean" not in table.series
    assert any("held-out score eval/reward/proxy_mean" in n for n in table.notes)
    assert table.get("reward/function/format").values[-1] == 0.0
    assert table.get("reward/function/accuracy") is not None
    assert table.get("policy/clipfrac") is None and any("on-policy" in n for n in table.notes)
    assert not table.unknown


def test_grpo_without_kl_had_no_kl_penalty_and_says_so(tmp_path: Path):
    path = tmp_path / "log_history.json"
    path.write_text(json.dumps(grpo_rows(beta=False)))  # a bare log_history list
    table = read_log(path)
    diagnosis = diagnose(table)
    assert table.settings.kl_coef == 0.0
    assert diagnosis.coverage["exploding_kl"].status == "not_applicable"
    assert any("beta = 0" in n for n in diagnosis.notes)


def test_trl_ppo_negative_entropy_artefact_is_not_read_as_entropy(tmp_path: Path):
    rows = [{"objective/kl": 0.5, "objective/entropy": -79.0, "objective/scores": 0.1, "objective/rlhf_reward": 0.05,
             "policy/approxkl_avg": 0.001, "val/num_eos_tokens": 15, "episode": 16 * (i + 1), "step": i + 1}
            for i in range(12)]
    path = tmp_path / "trainer_state.json"
    path.write_text(json.dumps({"log_history": rows}))
    table = read_log(path)
    assert table.settings.trainer == "trl-ppo" and table.get("policy/entropy") is None
    assert any("artefact" in n for n in table.notes)
    assert table.settings.batch_size == 16 and table.get("response/eos_rate").values[0] == pytest.approx(15 / 16)


def test_captured_console_takes_steps_from_the_progress_bar(tmp_path: Path):
    rows = grpo_rows(n=12)
    text = "Loading checkpoint shards: 100%|██████████| 2/2 [00:01<00:00,  1.5it/s]\n"
    for i, row in enumerate(r for r in rows if "train_runtime" not in r and "eval_loss" not in r):
        step = 10 * (i + 1)
        row = {k: v for k, v in row.items() if k != "step"}
        text += f"\r  {step}%|▋   | {step}/120 [00:{i:02d}<01:00,  1.0s/it]" + "\n" + repr(row) + "\n"
    text += repr({"train_runtime": 10.0, "train_loss": 0.01, "epoch": 1.0}) + "\n"
    path = tmp_path / "terminal.txt"
    path.write_text(text)
    assert detect_format(path).name == "hf-console"
    table = read_log(path)
    assert table.settings.trainer == "trl-grpo" and table.get("reward/proxy_mean").steps[:2] == (10, 20)
    assert any("progress bar" in n for n in table.notes)


def test_a_printed_none_is_no_value_and_a_printed_nan_is_non_finite(tmp_path: Path):
    # The head of a veRL console log prints the model's config as a dict: an unset field
    # (None) there is not a non-finite metric, while a nan in a metrics dict is.
    path = tmp_path / "console.txt"
    path.write_text("{'eos_token_id': 151645, 'bos_token_id': None, 'pad_token_id': 151643}\n")
    assert diagnose(read_log(path)).findings == []
    rows = [{"loss": 0.1 * i, "reward": 0.5, "kl": 0.01, "grad_norm": float("nan") if i == 3 else 1.0}
            for i in range(1, 8)]
    path.write_text("".join(repr(row) + "\n" for row in rows))
    assert "non_finite" in {f.rule for f in diagnose(read_log(path)).findings}


# --- verdicts and exit codes -----------------------------------------------------------------------------
def test_exit_codes_finding_no_finding_cannot_tell_and_bad_input(tmp_path: Path):
    runner = CliRunner()
    assert runner.invoke(app, ["doctor", str(FIXTURES / "verl_console_late.log")]).exit_code == 1
    assert runner.invoke(app, ["doctor", str(FIXTURES / "verl_console_early.log")]).exit_code == 0
    result = runner.invoke(app, ["doctor", str(FIXTURES / "dschat_step3.log")])
    assert result.exit_code == 3 and "cannot tell" in result.output
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    result = runner.invoke(app, ["doctor", str(empty), "--json"])
    assert result.exit_code == 3 and json.loads(result.output)["verdict"] == "cannot_tell"
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"step": "x", "kl/mean": 1.0}\n')
    result = runner.invoke(app, ["doctor", str(bad)])
    assert result.exit_code == 2 and "row 1" in result.output and "Traceback" not in result.output


def test_diagnosis_json_carries_its_schema_version_and_coverage():
    _, diagnosis = read("verl_console_early.log")
    data = diagnosis_json(diagnosis)
    assert data["schema_version"] == 2 and data["verdict"] == "no_finding" and data["exit_code"] == 0
    assert data["coverage"]["exploding_kl"]["status"] == "checked" and data["coverage"]["exploding_kl"]["steps"] == 16
    assert set(data["coverage"]) == {"exploding_kl", "mode_collapse", "reward_hacking", "update_health"}


def test_a_truncated_trl_log_under_another_name_is_invalid_json_at_a_line(tmp_path: Path):
    path = tmp_path / "run1_trainer_state.json"
    text = json.dumps({"log_history": grpo_rows()}, indent=2)
    path.write_text(text[: len(text) // 2])
    result = CliRunner().invoke(app, ["doctor", str(path)])
    assert result.exit_code == 2 and "invalid JSON" in result.output and str(path.name) in result.output


# --- the public logs of real runs (../shared/real_logs), when present ------------------------------------
@pytest.mark.skipif(not REAL_LOGS.is_dir(), reason="../shared/real_logs is not present")
@pytest.mark.parametrize("name, trainer, steps, verdict", [
    ("verl_ppo_qwen2.5-0.5b_gsm8k_resp256.log", "verl", 435, "no_finding"),
    ("dschat_step3_opt1.3b_opt350m.log", "deepspeed-chat", 477, "cannot_tell"),
    ("trl_grpo_vlm_qwen2.5vl-3b_collapse_run_terminal.md", "trl-grpo", 18, None),
    ("trl0.24_ppo_qwen2.5-0.5b_1step_trainer_log_history.json", "trl-ppo", 1, "cannot_tell"),
    ("trl0.24_grpo_qwen2.5-0.5b_1step_trainer_log_history.json", "trl-grpo", 1, "cannot_tell"),
])
def test_real_logs_are_read_to_their_last_step(name, trainer, steps, verdict):
    table = read_log(REAL_LOGS / name)
    diagnosis = diagnose(table)
    assert (table.settings.trainer, diagnosis.steps) == (trainer, steps)
    if verdict is not None:
        assert diagnosis.verdict == verdict, [f.rule for f in diagnosis.findings]


# --- written by TRL's real trainers (bench/trl_fixtures.py) ---------------------------------------------
@pytest.mark.parametrize("trainer", ["trl_grpo", "trl_rloo"])
def test_grpo_and_rloo_logs_of_the_real_trainers_read_alike_from_every_file_they_write(trainer):
    """trainer_state.json, the TensorBoard events and the captured console of one run: the
    same steps and the same values, whichever a user has."""
    state, events, console = (read_log(FIXTURES / trainer / part) for part in ("", "tensorboard", "console.txt"))
    for table in (state, events, console):
        assert table.settings.trainer == "trl-grpo" and table.steps_read == 12
        assert not table.unknown
        assert table.get("reward/function/gold") is not None and table.get("reward/function/length_bonus") is not None
        assert table.settings.kl_coef is None  # kl is logged: beta != 0
    assert state.get("kl/token_mean").values == pytest.approx(events.get("kl/token_mean").values, rel=1e-6)
    assert state.get("kl/token_mean").steps == events.get("kl/token_mean").steps == tuple(range(1, 13))
    # The printed dicts round to 4 significant digits; fast steps leave the bar behind, so steps are positions.
    assert console.get("reward/proxy_mean").values == pytest.approx(state.get("reward/proxy_mean").values, rel=1e-3,
                                                                     abs=1e-4)
    assert any("positions among the dicts" in n for n in console.notes)
    # Random weights rarely sample EOS within 16 tokens: every completion is cut at the limit, and said.
    assert [f.rule for f in diagnose(state).findings if f.severity != "low"] == ["truncation_saturated"]


def test_ppo_log_of_the_real_trl_1_12_trainer():
    state, events = read_log(FIXTURES / "trl_ppo"), read_log(FIXTURES / "trl_ppo" / "tensorboard")
    for table in (state, events):
        assert table.settings.trainer == "trl-ppo" and table.steps_read == 12
        assert table.get("kl/mean") is not None and table.get("policy/approxkl") is not None
    assert state.get("kl/mean").values == pytest.approx(events.get("kl/mean").values, rel=1e-6)
    assert state.settings.batch_size == 8  # episodes per step
    assert 0 <= min(state.get("response/eos_rate").values) <= max(state.get("response/eos_rate").values) <= 1
    # Random weights rarely sample EOS: the doctor says the responses never end.
    assert [f.rule for f in diagnose(state).findings if f.severity != "low"] == ["responses_never_end"]


def test_tensorboard_scalars_as_tf2_tensors_and_a_file_cut_short(tmp_path: Path):
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.summary_pb2 import Summary, SummaryMetadata
    from tensorboard.compat.proto.tensor_pb2 import TensorProto
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    writer = EventFileWriter(str(tmp_path))
    metadata = SummaryMetadata(plugin_data=SummaryMetadata.PluginData(plugin_name="scalars"))
    for step in range(12):
        tensor = TensorProto(dtype=1, float_val=[0.1 * step])  # DT_FLOAT, as tf.summary.scalar writes it
        value = Summary.Value(tag="kl/mean", tensor=tensor, metadata=metadata)
        writer.add_event(Event(wall_time=1.0, step=step, summary=Summary(value=[value])))
    writer.close()
    events = next(tmp_path.glob("events.out.tfevents.*"))
    assert read_log(tmp_path).get("kl/mean").values[-1] == pytest.approx(1.1)
    events.write_bytes(events.read_bytes()[:-7])  # the last record cut short
    table = read_log(tmp_path)
    assert table.get("kl/mean").steps[-1] == 10 and any("cut short" in note for note in table.notes)
