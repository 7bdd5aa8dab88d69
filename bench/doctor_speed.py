"""How fast the doctor answers: wall time of `rlhflab doctor trainer_state.json` on an
80-step TRL PPO log (a fresh process each time, imports included: what a user waits
for); reading and diagnosing long logs (a 100,000-row TRL GRPO trainer_state.json, a
TensorBoard directory of a million scalars); and the cost of the diversity metric
self-BLEU on one PPO batch.

    python bench/doctor_speed.py [--rounds 5] [--before-src OLD_CHECKOUT/src] [--rows 100000]
        [--scalars 1000000]

`--before-src` times another checkout's source the same way (PYTHONPATH), for a
before/after comparison. Results go to docs/benchmarks.md ("Doctor speed").
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchlib import replace_section

ROOT = Path(__file__).resolve().parents[1]
START, END = "## Doctor speed", "<!-- end doctor speed -->"


def trl_ppo_log(path: Path, steps: int = 80) -> Path:
    """A trainer_state.json shaped like TRL PPOTrainer's: its metric names, one row a step."""
    history = [{
        "episode": 64 * (i + 1), "epoch": i / steps, "step": i + 1, "eps": 12, "objective/kl": 0.1 * i,
        "objective/entropy": 20.0 - 0.05 * i, "objective/non_score_reward": -0.005 * i,
        "objective/rlhf_reward": 0.02 * i, "objective/scores": 0.03 * i, "policy/approxkl_avg": 0.01,
        "policy/clipfrac_avg": 0.05, "loss/policy_avg": -0.01, "loss/value_avg": 0.2, "val/clipfrac_avg": 0.1,
        "policy/entropy_avg": 1.5 - 0.002 * i, "val/ratio": 1.0, "val/ratio_var": 1e-4, "val/num_eos_tokens": 60,
        "lr": 3e-6,
    } for i in range(steps)]
    path.write_text(json.dumps({"log_history": history, "global_step": steps}))
    return path


def time_doctor(log: Path, rounds: int, src: Path | None) -> list[float]:
    """Seconds of `rlhflab doctor LOG`, a fresh interpreter each round, after one warm-up."""
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = str(src)
    command = [sys.executable, "-c", "from rlhflab.cli import app; app()", "doctor", str(log)]
    times = []
    for round_ in range(rounds + 1):
        start = time.perf_counter()
        result = subprocess.run(command, env=env, capture_output=True)
        if result.returncode not in (0, 1, 3):  # a verdict (no finding, finding, cannot tell), not an error
            raise RuntimeError(f"rlhflab doctor exited {result.returncode}: {result.stderr.decode()[-500:]}")
        if round_:
            times.append(time.perf_counter() - start)
    return times


GRPO_NAMES = ("loss", "grad_norm", "learning_rate", "num_tokens", "completions/mean_length",
              "completions/clipped_ratio", "rewards/accuracy/mean", "rewards/accuracy/std", "reward", "reward_std",
              "frac_reward_zero_std", "kl", "entropy", "clip_ratio/region_mean", "epoch")


def grpo_log(path: Path, rows: int) -> Path:
    """A trainer_state.json of `rows` TRL GRPO logging steps (15 metrics each), noisy and healthy."""
    rng = random.Random(0)
    history = [{**{name: rng.random() for name in GRPO_NAMES}, "step": i + 1} for i in range(rows)]
    path.write_text(json.dumps({"log_history": history, "global_step": rows}))
    return path


def tensorboard_log(directory: Path, scalars: int, tags: int = 20) -> Path:
    """A TensorBoard directory of `scalars` scalar events over `tags` canonical tags."""
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.summary_pb2 import Summary
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    names = ["kl/mean", "reward/proxy_mean", "policy/entropy", "policy/clipfrac", "policy/approxkl",
             "response/length_mean", "policy/grad_norm", "lr"] + [f"extra/{i}" for i in range(tags - 8)]
    rng = random.Random(0)
    writer = EventFileWriter(str(directory))
    for step in range(scalars // tags):
        for name in names:
            value = Summary(value=[Summary.Value(tag=name, simple_value=rng.random())])
            writer.add_event(Event(wall_time=1.0 + step, step=step, summary=value))
    writer.close()
    return directory


def time_read_and_diagnose(path: Path, rounds: int) -> list[float]:
    """Seconds to read and diagnose `path` in-process (imports done once before)."""
    from rlhflab.doctor.diagnose import diagnose
    from rlhflab.doctor.formats import read_log

    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        diagnose(read_log(path))
        times.append(time.perf_counter() - start)
    return times


def time_self_bleu(rounds: int) -> list[float]:
    """Seconds of self-BLEU over a batch of 64 responses of 30 words from 300."""
    from rlhflab.metrics.diversity import self_bleu

    rng = random.Random(0)
    words = [f"w{i}" for i in range(300)]
    texts = [" ".join(rng.choice(words) for _ in range(30)) for _ in range(64)]
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        self_bleu(texts)
        times.append(time.perf_counter() - start)
    return times


def describe(times: list[float], unit: float = 1.0, fmt: str = ".2f") -> str:
    return (f"{statistics.median(times) * unit:{fmt}} (min {min(times) * unit:{fmt}}, "
            f"max {max(times) * unit:{fmt}}, {len(times)} rounds)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--before-src", type=Path, default=None, help="src/ of the checkout to compare with")
    parser.add_argument("--rows", type=int, default=100_000, help="rows of the long trainer_state.json")
    parser.add_argument("--scalars", type=int, default=1_000_000, help="scalars in the TensorBoard directory")
    parser.add_argument("--doc", type=Path, default=ROOT / "docs" / "benchmarks.md")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        log = trl_ppo_log(Path(tmp) / "trainer_state.json")
        after = time_doctor(log, args.rounds, ROOT / "src")
        before = time_doctor(log, args.rounds, args.before_src) if args.before_src else None
        long_log = time_read_and_diagnose(grpo_log(Path(tmp) / "trainer_state_long.json", args.rows), 3)
        events = time_read_and_diagnose(tensorboard_log(Path(tmp) / "tb", args.scalars), 3)
    bleu = time_self_bleu(max(args.rounds, 7))
    command = "python bench/doctor_speed.py --rounds " + str(args.rounds) + (
        " --before-src OLD_CHECKOUT/src" if before else "")
    rows = [f"| this checkout | {describe(after)} |"]
    if before:
        rows.insert(0, f"| before (`--before-src`) | {describe(before)} |")
    section = "\n".join([
        START, "",
        f"Command: `{command}` (2-core CPU). Wall time of `rlhflab doctor trainer_state.json` on an 80-step TRL",
        "PPO log, a fresh process each round (interpreter start and imports included); target: under 0.5 s.",
        "", "| code | seconds, median |", "|---|---|", *rows, "",
        "Long logs, read and diagnosed in-process (imports excluded): a TRL GRPO trainer_state.json of "
        f"{args.rows:,} logging steps x 15 metrics in {describe(long_log)} s (target: under 2 s); a TensorBoard "
        f"directory of {args.scalars:,} scalars (20 tags) in {describe(events)} s (target: under 10 s).", "",
        f"Self-BLEU of one PPO batch (64 responses of 30 words): {describe(bleu, 1000, '.1f')} ms.", "",
        END,
    ])
    replace_section(args.doc, START, END, section)
    print(section)


if __name__ == "__main__":
    main()
