"""rlhflab's PPO against TRL's (`trl.experimental.ppo.PPOTrainer`, trl 1.12.0), side by side.

    make bench-trl          # creates .venv-trl from bench/trl-requirements.txt, then runs this
    .venv/bin/python bench/compare_trl.py --repeats 3 --iterations 3

Both sides get the same randomly initialised models (the demo preset's GPT-2 config and
a 1-label reward model on its trunk), the same tokenizer and prompts, 64 rollouts of up
to 32 tokens, 4 PPO epochs of 4 minibatches. Random models rarely emit EOS, so both
sides generate (nearly) full-length responses: equal work. Each side runs in its own
process (its own venv, so TRL's pinned versions do not touch rlhflab's), the two
alternating, `--repeats` times each; every process times `--iterations` iterations after
one warm-up and reports its peak RSS. rlhflab's process also measures the machine's fp32
matmul rate and plain `model.generate` on the same model (bench/rlhflab_side.py).

Results go to bench/results/compare_trl.json and to the `compare-trl` section of
docs/benchmarks.md. Run it on an otherwise idle machine: two torch processes at once on
2 cores slow each other down many times.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

from benchlib import random_models, replace_section

ROOT = Path(__file__).resolve().parents[1]
TRL_PYTHON = ROOT / ".venv-trl" / "bin" / "python"
SECTION = ("<!-- compare-trl:start -->", "<!-- compare-trl:end -->")


def run_side(python: Path, script: str, lm: Path, rm: Path, prompts: Path, iterations: int) -> dict:
    """One measuring process; its JSON result."""
    done = subprocess.run(
        [str(python), str(ROOT / "bench" / script), "--model", str(lm), "--reward", str(rm), "--prompts",
         str(prompts), "--iterations", str(iterations)],
        capture_output=True, text=True, check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{script} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout)


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.3g} ({min(values):.3g}-{max(values):.3g})"


def timed_mean(result: dict) -> float:
    """Seconds per iteration without the first (warm-up) iteration."""
    return statistics.fmean(result["iteration_seconds"][1:])


def render(ours: list[dict], theirs: list[dict], command: str) -> str:
    ours_s, theirs_s = [timed_mean(r) for r in ours], [timed_mean(r) for r in theirs]
    speedup = [t / o for o, t in zip(ours_s, theirs_s)]
    rss_ratio = [o["peak_rss_mib"] / t["peak_rss_mib"] for o, t in zip(ours, theirs)]
    sampler = [r["rlhflab_sampler_tokens_per_s"] / r["generate_tokens_per_s"] for r in ours]
    train_fraction = [r["train_fraction_of_matmul_peak"] for r in ours]
    theirs_tps = [r["generated_tokens"] / r["generation_seconds"] for r in theirs]
    first = ours[0]
    rows = [
        ("seconds per PPO iteration", spread(ours_s), spread(theirs_s)),
        ("generated tokens/s during rollouts", spread([r["generated_tokens_per_s"] for r in ours]), spread(theirs_tps)),
        ("generated tokens/s over the whole iteration", spread([r["generated_tokens_per_s_of_iteration"] for r in ours]),
         spread([r["generated_tokens_per_s_of_iteration"] for r in theirs])),
        ("peak RSS (MiB)", spread([r["peak_rss_mib"] for r in ours]), spread([r["peak_rss_mib"] for r in theirs])),
    ]
    targets = [
        ("rlhflab's PPO iteration >= 2x faster than TRL's", spread(speedup), min(speedup) >= 2),
        ("rlhflab's peak RSS <= TRL's (ratio)", spread(rss_ratio), max(rss_ratio) <= 1),
        ("training phase >= 40% of the fp32 matmul rate", spread(train_fraction), min(train_fraction) >= 0.4),
        ("rollout sampler >= 2x `model.generate` tokens/s", spread(sampler), min(sampler) >= 2),
    ]
    lines = [
        SECTION[0],
        "## PPO against TRL's PPOTrainer (issue: performance)",
        "",
        f"Command: `{command}` (2-core CPU, torch {torch.__version__}, trl {theirs[0].get('trl_version')}). "
        f"{len(ours)} alternating repeats per side, each the mean of {ours[0]['iterations']} iterations after a "
        "warm-up; median (min-max) over repeats. Same random models "
        f"({first['parameters']:,} policy parameters), tokenizer and prompts; 64 rollouts, 32 tokens, 4 epochs x 4 "
        "minibatches.",
        "",
        "| | rlhflab | TRL |",
        "|---|---|---|",
        *[f"| {name} | {a} | {b} |" for name, a, b in rows],
        "",
        "| target | measured, median (min-max) | met |",
        "|---|---|---|",
        *[f"| {name} | {value} | {'yes' if met else 'no'} |" for name, value, met in targets],
        "",
        f"Training rate: {spread([r['train_gflops_per_s'] for r in ours])} GFLOP/s of model FLOPs (6 x parameters x "
        f"real tokens per epoch) against a measured fp32 matmul rate of "
        f"{spread([r['matmul_gflops_per_s'] for r in ours])} GFLOP/s (2048^3 matmul, best of 10, same process). "
        f"rlhflab's sampler {spread([r['rlhflab_sampler_tokens_per_s'] for r in ours])} tokens/s against "
        f"`model.generate` (default settings, sampling) {spread([r['generate_tokens_per_s'] for r in ours])} tokens/s "
        "on the same 64 prompts.",
        SECTION[1],
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--doc", type=Path, default=ROOT / "docs" / "benchmarks.md")
    args = parser.parse_args()
    if not TRL_PYTHON.is_file():
        sys.exit(f"{TRL_PYTHON} not found: run `make bench-trl` (it creates .venv-trl from bench/trl-requirements.txt)")
    ours, theirs = [], []
    with tempfile.TemporaryDirectory(prefix="compare-trl-") as tmp:
        from rlhflab.config import load_config

        lm, rm, prompts = random_models(Path(tmp), load_config("demo"))
        for repeat in range(args.repeats):
            ours.append(run_side(Path(sys.executable), "rlhflab_side.py", lm, rm, prompts, args.iterations))
            theirs.append(run_side(TRL_PYTHON, "trl_side.py", lm, rm, prompts, args.iterations + 1))
            print(f"repeat {repeat}: rlhflab {timed_mean(ours[-1]):.3f} s/iteration, "
                  f"TRL {timed_mean(theirs[-1]):.3f} s/iteration", flush=True)
    results = ROOT / "bench" / "results" / "compare_trl.json"
    results.write_text(json.dumps({"rlhflab": ours, "trl": theirs}, indent=2) + "\n")
    command = f"python bench/compare_trl.py --repeats {args.repeats} --iterations {args.iterations}"
    replace_section(args.doc, *SECTION, render(ours, theirs, command))
    print(f"wrote {results} and {args.doc}")


if __name__ == "__main__":
    main()
