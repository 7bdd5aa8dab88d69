"""Checkpoint and resume with real processes: a PPO run stopped by SIGTERM (checkpoint,
exit 143), resumed, killed by SIGKILL mid-iteration, and resumed again, ends with the
same metrics and samples as an uninterrupted run of the same config, each step once.
And the non-finite guard: NaN rewards skip updates, and enough in a row stop the run."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch
from typer.testing import CliRunner

from rlhflab.checkpoint import load_checkpoint
from rlhflab.cli import app
from rlhflab.config import config_from_run, load_config
from rlhflab.ppo.components import PPOComponents, standardise
from rlhflab.ppo.run import run_ppo
from rlhflab.ppo.state import load_ppo_state
from rlhflab.runs import RunDir, read_jsonl

ARGS = ["--preset", "smoke", "ppo.iterations=14", "ppo.checkpoint_every=3"]
RLHFLAB = [sys.executable, "-c", "from rlhflab.cli import app; app()"]


def lines(path: Path) -> int:
    return sum(1 for _ in path.open()) if path.is_file() else 0


def start(*args) -> subprocess.Popen:
    env = os.environ | {"PYTHONUNBUFFERED": "1"}
    return subprocess.Popen([*RLHFLAB, *map(str, args)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)


def wait_for_lines(process: subprocess.Popen, path: Path, n: int, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while lines(path) < n:
        assert process.poll() is None, process.stderr.read().decode()[-2000:]
        assert time.monotonic() < deadline, f"{path} never reached {n} lines"
        time.sleep(0.05)


def without_timings(records: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in records]


def test_sigterm_then_sigkill_then_resume_equals_an_uninterrupted_run(tmp_path):
    run = tmp_path / "run"
    metrics = run / "metrics" / "ppo.jsonl"
    first = start("pipeline", "--out", run, "--quiet", *ARGS)
    wait_for_lines(first, metrics, 4)
    first.send_signal(signal.SIGTERM)  # a clean stop: finish the iteration, checkpoint, exit
    assert first.wait(timeout=120) == 128 + signal.SIGTERM, first.stderr.read().decode()[-2000:]
    state = json.loads((run / "checkpoints" / "ppo" / "state.json").read_text())
    assert state["next_step"] == lines(metrics)  # the checkpoint is of the last logged iteration

    second = start("pipeline", "--resume", run, "--quiet")
    wait_for_lines(second, metrics, state["next_step"] + 4)
    second.kill()  # SIGKILL: no handler runs; whatever was written after the checkpoint is stale
    second.wait(timeout=60)

    result = CliRunner().invoke(app, ["pipeline", "--resume", str(run), "--quiet"])
    assert result.exit_code == 0, result.output

    # The same config and stage-1/2 models, trained without interruption.
    reference = RunDir(tmp_path / "reference").create()
    for stage in ("stage1_lm", "stage2_rm"):
        shutil.copytree(run / stage, reference.root / stage)
    run_ppo(config_from_run(run), reference, show_progress=False)
    resumed = read_jsonl(metrics)
    assert [r["step"] for r in resumed] == list(range(14))
    assert without_timings(resumed) == without_timings(read_jsonl(reference.metrics("ppo")))
    assert read_jsonl(run / "samples" / "ppo.jsonl") == read_jsonl(reference.samples("ppo"))


class NaNAfter:
    """Scores standardised as usual for the first `good` calls, then NaN (an RM that overflows)."""

    def __init__(self, good: int) -> None:
        self.calls, self.good = 0, good

    def __call__(self, raw, mean, std, normalize):
        self.calls += 1
        scores = standardise(raw, mean, std, normalize)
        return scores if self.calls <= self.good else torch.full_like(scores, float("nan"))


def test_non_finite_rewards_skip_updates_and_stop_the_run_with_a_finding(smoke_run, tmp_path):
    run = RunDir(tmp_path / "nan").create()
    for stage in ("stage1_lm", "stage2_rm"):
        shutil.copytree(smoke_run.root / stage, run.root / stage)
    config = load_config("smoke", overrides=["ppo.iterations=10", "ppo.max_nonfinite_iterations=3"])
    # The held-out evaluation of the starting policy calls the reward once (64 prompts), then
    # each iteration once: NaN from iteration 3 on.
    summary = run_ppo(config, run, PPOComponents(reward_transform=NaNAfter(good=1 + 3)), show_progress=False)
    records = read_jsonl(run.metrics("ppo"))
    updates = config.ppo.epochs * config.ppo.minibatches
    assert [r["guard/skipped_updates"] for r in records] == [0, 0, 0, updates, updates, updates]
    assert summary["stopped"]["rule"] == "updates_skipped" and summary["stopped"]["step"] == 5
    diagnosis = json.loads(run.diagnosis.read_text())
    assert diagnosis["findings"][0]["rule"] in {"updates_skipped", "non_finite"}
    assert "updates_skipped" in {f["rule"] for f in diagnosis["findings"]}
    assert (run.checkpoints / "stopped").is_dir() and (run.checkpoints / "ppo" / "state.json").is_file()
    state = load_ppo_state(config, run, PPOComponents())
    load_checkpoint(run.checkpoints / "ppo", state.policy, state.optimizer, state.controller)
    # Skipped steps left the weights and Adam's moments clean.
    assert all(torch.isfinite(w).all() for w in state.policy.state_dict().values())
    assert all(torch.isfinite(m).all() for slots in state.optimizer.state.values() for m in slots.values())
