"""What keeping samples costs: `ppo.samples_per_iteration` in disk and in the PPO loop's
time, and the doctor's time to measure a sample file, on runs that kept the default 64.

    python bench/samples_cost.py --runs runs/faults-bench/healthy-seed0 runs/faults-bench/healthy-seed1
        [--doc docs/benchmarks.md]

And the doctor's time to read and measure a veRL-sized dump: 200 steps of 512 responses
of 150 words (random words of a 2,000-word vocabulary, seeded), each step measured on 256.

For each run: bytes per iteration of `samples/ppo.jsonl` at 64 a step and at 4 (the old
default: its first 4 rows of each step, rewritten); the seconds `sample_rows` and `append_jsonl` take
to write one iteration's rows (median of 20 repeats, the run's own rows, from an in-memory
rollout), against the run's seconds per PPO iteration; the doctor's seconds to read the
run without its samples and with them (median of 5).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

from benchlib import replace_section

ROOT = Path(__file__).resolve().parents[1]
START, END = "<!-- samples-cost:start -->", "<!-- samples-cost:end -->"


def median_seconds(work, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(run: Path) -> dict:
    from rlhflab.doctor.formats import read_log
    from rlhflab.doctor.sample_measures import _step_measures_of
    from rlhflab.ppo.run import sample_rows
    from rlhflab.runs import RunDir, append_jsonl, read_jsonl

    rows = read_jsonl(run / "samples" / "ppo.jsonl")
    metrics = read_jsonl(run / "metrics" / "ppo.jsonl")
    steps = sorted({r["step"] for r in rows})
    first = [r for r in rows if r["step"] == steps[0]]
    kept = len(first)
    rollout = SimpleNamespace(prompts=[r["prompt"] for r in first], responses=[r["response"] for r in first],
                              proxy=[r["proxy"] for r in first], has_eos=[r["ended"] for r in first])
    gold = [r.get("gold", 0.0) for r in first]
    with tempfile.TemporaryDirectory() as scratch:
        target = RunDir(Path(scratch))
        write_s = median_seconds(lambda: append_jsonl(target.samples("ppo"), sample_rows(0, rollout, gold, kept)), 20)
    lines = (run / "samples" / "ppo.jsonl").read_text(encoding="utf-8").splitlines()
    by_step: dict[int, list[str]] = {}
    for line, row in zip(lines, rows):
        by_step.setdefault(row["step"], []).append(line)
    bytes_all = sum(len(line) + 1 for line in lines) / len(steps)
    bytes_four = sum(len(line) + 1 for group in by_step.values() for line in group[:4]) / len(steps)
    iteration_s = statistics.median(m.get("time/rollout_s", 0) + m.get("time/score_s", 0)
                                    + m.get("time/advantages_s", 0) + m.get("time/train_s", 0) for m in metrics)
    without = median_seconds(lambda: read_log(run, find_samples=False), 5)
    with_samples = median_seconds(lambda: (_step_measures_of.cache_clear(), read_log(run)), 5)  # cold each time
    return {"run": str(run.relative_to(ROOT) if run.is_relative_to(ROOT) else run), "kept": kept,
            "iterations": len(steps), "bytes_per_iteration": bytes_all, "bytes_per_iteration_at_4": bytes_four,
            "write_s": write_s, "iteration_s": iteration_s, "doctor_s_without": without,
            "doctor_s_with": with_samples}


def measure_large_dump(steps: int = 200, per_step: int = 512, words: int = 150) -> dict:
    """Seconds to read and measure a synthetic veRL rollout dump (median of 3)."""
    import random

    from rlhflab.doctor.formats.sample_files import read_samples
    from rlhflab.doctor.sample_measures import _step_measures_of
    from rlhflab.doctor.sample_measures import measure as measure_set

    rng = random.Random(0)
    vocab = [f"w{i}" for i in range(2000)]
    with tempfile.TemporaryDirectory() as scratch:
        for step in range(1, steps + 1):
            lines = [json.dumps({"input": f"question {i}", "output": " ".join(rng.choices(vocab, k=words)),
                                 "gts": None, "score": rng.random(), "step": step}) for i in range(per_step)]
            (Path(scratch) / f"{step}.jsonl").write_text("\n".join(lines) + "\n")
        seconds = median_seconds(lambda: (_step_measures_of.cache_clear(), measure_set(read_samples(Path(scratch)))), 3)
    return {"steps": steps, "per_step": per_step, "words": words, "seconds": seconds}


def render(results: list[dict], large: dict, command: str) -> str:
    lines = [START, "## Keeping samples: `ppo.samples_per_iteration`", "",
             f"Command: `{command}` (2-core CPU; demo runs that kept the default 64 responses a step, the whole "
             "batch). Writing is `sample_rows` and `append_jsonl` on the run's own rows (median of 20); the "
             "iteration is the median of the run's `time/rollout_s + time/score_s + time/advantages_s + "
             "time/train_s`; the doctor is "
             "`read_log` of the run without and with its sample file (median of 5).", "",
             "| run | kept a step | disk a step (64 / 4) | whole file | write a step | share of an iteration | "
             "doctor without / with samples |", "|---|---|---|---|---|---|---|"]
    for r in results:
        lines.append(
            f"| {r['run']} | {r['kept']} | {r['bytes_per_iteration'] / 1024:.1f} / "
            f"{r['bytes_per_iteration_at_4'] / 1024:.2f} KiB | "
            f"{r['bytes_per_iteration'] * r['iterations'] / 2**20:.2f} MiB ({r['iterations']} iterations) | "
            f"{r['write_s'] * 1e3:.2f} ms | {r['write_s'] / r['iteration_s']:.2%} of {r['iteration_s']:.2f} s | "
            f"{r['doctor_s_without']:.2f} / {r['doctor_s_with']:.2f} s |")
    lines += ["", f"A veRL-sized dump ({large['steps']} steps of {large['per_step']} responses of {large['words']} "
              f"words, random words, each step measured on 256): read and measured in {large['seconds']:.1f} s "
              "(median of 3)."]
    return "\n".join(lines + [END]) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=Path, nargs="+", required=True)
    parser.add_argument("--doc", type=Path, default=None)
    args = parser.parse_args()
    results = [measure(run.resolve()) for run in args.runs]
    large = measure_large_dump()
    for r in results + [large]:
        print(json.dumps(r))
    if args.doc is not None:
        command = "python bench/samples_cost.py --runs " + " ".join(str(r) for r in args.runs)
        replace_section(args.doc, START, END, render(results, large, command))


if __name__ == "__main__":
    main()
