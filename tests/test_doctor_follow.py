"""`rlhflab doctor --follow` on a log another process is still writing, and the watch
behind it (each finding told once; a stop rule ends the following)."""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rlhflab.doctor import Watch, stop_rules
from rlhflab.doctor.follow import follow
from rlhflab.doctor.formats import LogFormatError, read_log

RLHFLAB = str(Path(sys.executable).parent / "rlhflab")

# A TRL GRPO-style JSONL log, one row per step; `runaway` makes the per-token KL run away
# from step 40 (as a learning rate 100x too high does), the rest stays healthy.
WRITER = textwrap.dedent("""
    import json, math, random, sys, time
    path, steps, runaway, pause = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1", float(sys.argv[4])
    rng = random.Random(0)
    with open(path, "a") as log:
        for i in range(steps):
            t = i / 100
            kl = 0.02 + 0.03 * t + abs(rng.gauss(0, 0.005))
            if runaway and i >= 40:
                kl += 0.25 * (i - 40)
            row = {"step": i + 1, "reward": 0.5 * (1 - math.exp(-3 * t)) + rng.gauss(0, 0.03),
                   "reward_std": 0.6 + rng.gauss(0, 0.02), "kl": kl, "entropy": 1.8 - 0.3 * t + rng.gauss(0, 0.02),
                   "completions/mean_length": 20 + rng.gauss(0, 0.5), "completions/clipped_ratio": 0.02,
                   "frac_reward_zero_std": 0.1, "grad_norm": 0.8 + abs(rng.gauss(0, 0.1)), "learning_rate": 1e-6}
            log.write(json.dumps(row) + "\\n")
            log.flush()
            time.sleep(pause)
""")


def start_writer(tmp_path: Path, steps: int, runaway: bool, pause: float) -> tuple[subprocess.Popen, Path]:
    script, log = tmp_path / "writer.py", tmp_path / "train.jsonl"
    script.write_text(WRITER)
    return subprocess.Popen([sys.executable, str(script), str(log), str(steps), str(int(runaway)), str(pause)]), log


def test_follow_stops_on_a_runaway_kl_while_the_run_is_still_writing(tmp_path):
    writer, log = start_writer(tmp_path, steps=400, runaway=True, pause=0.02)
    try:
        doctor = subprocess.run([RLHFLAB, "doctor", str(log), "--follow", "--stop-on", "kl_explosion",
                                 "--interval", "0.2", "--idle-exit", "20"], capture_output=True, text=True, timeout=60)
        still_writing = writer.poll() is None
    finally:
        writer.kill()
        writer.wait()
    said = doctor.stdout + doctor.stderr
    assert doctor.returncode == 1, said
    assert "] kl_explosion at step" in said and "stop: kl_explosion fired" in said
    assert still_writing, "the doctor should stop the run before it ends"
    rows = sum(1 for _ in log.open())
    assert rows < 400


def test_follow_tells_nothing_on_a_healthy_run_and_exits_when_the_log_goes_idle(tmp_path):
    writer, log = start_writer(tmp_path, steps=80, runaway=False, pause=0.01)
    try:
        doctor = subprocess.run([RLHFLAB, "doctor", str(log), "--follow", "--stop-on", "kl_explosion",
                                 "--interval", "0.2", "--idle-exit", "2"], capture_output=True, text=True, timeout=60)
    finally:
        writer.wait()
    said = doctor.stdout + doctor.stderr
    assert doctor.returncode == 0, said
    assert "rlhflab doctor: [" not in said and "stop:" not in said


def test_follow_waits_for_a_log_that_does_not_exist_yet_and_rereads_a_half_written_line(tmp_path):
    log = tmp_path / "later.jsonl"
    # Flat while the line is half written, running away after: the stop needs the rest of the log.
    rows = [json.dumps({"step": i, "kl/mean": 0.1 + 0.1 * max(0, i - 31) ** 2, "reward/proxy_mean": 0.01 * i,
                        "policy/entropy": 2.0}) for i in range(60)]
    ticks = iter(range(10_000))
    writes = {3: "\n".join(rows[:30]) + "\n" + rows[30][:10], 5: rows[30][10:] + "\n" + "\n".join(rows[31:]) + "\n"}
    told = []

    def sleep(_):
        tick = next(ticks)
        if tick in writes:
            with log.open("a") as handle:
                handle.write(writes[tick])

    followed = follow(log, Watch(stop_rules("kl_explosion")), interval=0, idle_exit=5, emit=told.append, sleep=sleep)
    assert followed.reason == "stop" and followed.watch.stopped_by.rule == "kl_explosion"
    assert len(followed.table.get("kl/mean")) == 60 and any("kl_explosion" in line for line in told)


def test_a_jsonl_log_cut_mid_line_is_read_up_to_its_last_whole_line_and_says_so(tmp_path):
    log = tmp_path / "cut.jsonl"
    rows = [json.dumps({"step": i, "kl/mean": 0.1, "reward/proxy_mean": 0.01 * i}) for i in range(20)]
    log.write_text("\n".join(rows[:19]) + "\n" + rows[19][:7])
    table = read_log(log)
    assert table.steps_read == 19 and any("line 20 is cut" in note for note in table.notes)
    log.write_text("\n".join(rows[:10]) + "\n{not json\n" + "\n".join(rows[10:]) + "\n")
    with pytest.raises(LogFormatError, match=":11: invalid JSON"):
        read_log(log)  # a bad line inside the log is bad input, said with its line


def test_a_watch_tells_each_finding_once_and_again_only_when_it_grows_more_severe(tmp_path):
    log = tmp_path / "run.jsonl"
    log.write_text("".join(json.dumps({"step": i, "kl/mean": 0.1 * i ** 2, "reward/proxy_mean": 0.01 * i,
                                       "policy/entropy": 2.0}) + "\n" for i in range(60)))
    watch = Watch(stop_rules(["kl_explosion"]))
    first = watch.check(read_log(log))
    assert "kl_explosion" in {f.rule for f in first} and watch.stopped_by.rule == "kl_explosion"
    assert watch.check(read_log(log)) == []  # nothing new the second time
    watch.told["kl_explosion"] = "low"  # as if it had been told at a lower severity
    assert [f.rule for f in watch.check(read_log(log))] == ["kl_explosion"]


def test_an_unknown_rule_to_stop_on_is_refused_with_the_known_names():
    with pytest.raises(ValueError, match="unknown rule.*kl_explsion.*known: .*kl_explosion"):
        stop_rules("kl_explsion")
    doctor = subprocess.run([RLHFLAB, "doctor", "x.jsonl", "--follow", "--stop-on", "nope"], capture_output=True,
                            text=True)
    assert doctor.returncode == 2 and "unknown rule" in doctor.stdout + doctor.stderr


def test_follow_reads_an_output_dir_whose_trainer_state_is_rewritten_at_each_save(tmp_path):
    """A transformers output directory: each save writes checkpoint-N/trainer_state.json
    with the whole history so far; the newest one is read."""
    history = [{"step": i, "reward": 0.01 * i, "reward_std": 0.5, "kl": 0.02 + (0.3 * (i - 30) if i > 30 else 0),
                "entropy": 1.5, "completions/mean_length": 20.0, "frac_reward_zero_std": 0.1, "grad_norm": 1.0}
               for i in range(1, 81)]
    saves = iter(range(10, 81, 10))

    def save_next(_):
        step = next(saves, None)
        if step is not None:
            (tmp_path / f"checkpoint-{step}").mkdir()
            (tmp_path / f"checkpoint-{step}" / "trainer_state.json").write_text(
                json.dumps({"global_step": step, "log_history": history[:step]}))

    followed = follow(tmp_path, Watch(stop_rules("kl_explosion")), interval=0, idle_exit=2, emit=lambda _: None,
                      sleep=save_next)
    assert followed.reason == "stop" and followed.table.settings.trainer == "trl-grpo"
    assert followed.table.steps_read < 80  # stopped at a save before the last


REAL_LOGS = Path(__file__).resolve().parents[2] / "shared" / "real_logs"


@pytest.mark.skipif(not REAL_LOGS.is_dir(), reason="../shared/real_logs is not present")
@pytest.mark.parametrize("name, stop_on, stops", [
    # MANIFEST.md: a healthy veRL PPO run (435 steps); a TRL GRPO run whose answers collapsed.
    ("verl_ppo_qwen2.5-0.5b_gsm8k_resp256.log", "kl_explosion,entropy_collapse,length_collapse", False),
    ("trl_grpo_vlm_qwen2.5vl-3b_collapse_run_terminal.md", "entropy_collapse,length_collapse", True),
])
def test_follow_replays_a_real_log_as_its_trainer_wrote_it(tmp_path, name, stop_on, stops):
    """The real log appended to a file in 20 chunks while the doctor follows it."""
    lines = (REAL_LOGS / name).read_text().splitlines(keepends=True)
    chunks = iter([lines[len(lines) * k // 20:len(lines) * (k + 1) // 20] for k in range(20)])
    log = tmp_path / name

    def append_next(_):
        chunk = next(chunks, None)
        if chunk is not None:
            with log.open("a") as handle:
                handle.writelines(chunk)

    told = []
    followed = follow(log, Watch(stop_rules(stop_on)), interval=0, idle_exit=1, emit=told.append, sleep=append_next)
    assert (followed.reason == "stop") == stops, told
    if not stops:  # the whole healthy run read, and no finding of medium or high severity told on the way
        assert followed.table.steps_read == read_log(REAL_LOGS / name).steps_read
        assert not [line for line in told if "[high]" in line or "[medium]" in line]
