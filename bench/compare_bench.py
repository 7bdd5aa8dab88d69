"""`rlhflab compare` on the reviews world: how often two runs that differ only in their seed
are called a change (the false-positive rate, with its Wilson interval), and how often a
known fix comes out fixed. Short PPO-only reruns reusing a healthy run's stages 1-2.

    python bench/compare_bench.py [--base runs/faults-bench/healthy-seed0] [--out runs/compare-bench]
        [--pairs 30] [--fixes 10] [--iterations 40] [--trl runs/calibration] [--doc docs/benchmarks.md]

Seed-only pairs: disjoint pairs of healthy runs (seeds 1000+2k and 1000+2k+1). Known fixes, each
against the healthy run of the same seed: `ppo.kl_coef` 0 -> 0.2 and `ppo.lr` 30x -> 1x.
One run a side, so the truth (gold) is held to the world's seed spread (doctor/compare.py).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from benchlib import replace_section, wilson

ROOT = Path(__file__).resolve().parents[1]
START, END = "## Comparing runs before and after a fix", "<!-- end compare bench -->"


def train(base: Path, out: Path, overrides: list[str]) -> Path:
    from rlhflab.config import apply_overrides, config_from_run, parse_override
    from rlhflab.faults.zoo import components_for
    from rlhflab.runs import RunDir
    from rlhflab.verify import rerun

    run = RunDir(out)
    if not run.metrics("ppo").is_file():
        start = time.perf_counter()
        config = apply_overrides(config_from_run(base), dict(parse_override(o) for o in overrides), "bench")
        rerun(config, RunDir(base), run, "ppo", components_for(config), show_progress=False)
        (out / TIMING).write_text(json.dumps({"seconds": time.perf_counter() - start}))
    return out


TIMING = "bench.json"  # in each run: the wall time of its training


def trained_seconds(out: Path) -> float:
    """The wall time the bench's runs took to train, when they were trained (0 for runs trained before
    timings were kept)."""
    return sum(json.loads(p.read_text())["seconds"] for p in out.glob(f"*/{TIMING}"))


def verdict(before: Path, after: Path) -> dict:
    from rlhflab.doctor.compare import compare_tables
    from rlhflab.doctor.formats import read_log

    result = compare_tables([read_log(before)], [read_log(after)])
    return {"verdict": result.verdict, "why": result.why,
            "change": result.truth.change if result.truth else None}


# TRL runs of the world (bench/calibration.py's, whose callback logs the gold beside the
# proxy): (before, after, what differs) for seed-only pairs and known fixes.
TRL_PAIRS = (
    ("grpo-healthy-s0", "grpo-healthy-s1", "seed"), ("grpo-healthy-s1", "grpo-healthy-s2", "seed"),
    ("rloo-healthy-s0", "rloo-healthy-s1", "seed"), ("ppo-healthy-s0", "ppo-healthy-s1", "seed"),
    ("grpo-lr30x", "grpo-healthy-s0", "learning rate 30x -> 1x"), ("rloo-lr30x", "rloo-healthy-s0", "learning rate "
                                                                                                   "30x -> 1x"),
    ("ppo-lr30x", "ppo-healthy-s0", "learning rate 30x -> 1x"), ("ppo-kl0-lr3x", "ppo-healthy-s0", "kl_coef 0 -> 0.05, "
                                                                                                  "lr 3x -> 1x"),
)


def trl_pairs(calibration: Path) -> list[dict]:
    from rlhflab.doctor.compare import compare_tables
    from rlhflab.doctor.formats import read_log
    from rlhflab.doctor.formats.mapping import parse_pairs

    gold = parse_pairs(["gold=reward/gold_mean"])
    rows = []
    for before, after, what in TRL_PAIRS:
        paths = [calibration / name / "trainer_state.json" for name in (before, after)]
        if not all(p.is_file() for p in paths):
            continue
        result = compare_tables([read_log(paths[0], gold)], [read_log(paths[1], gold)])
        rows.append({"before": before, "after": after, "differs": what, "verdict": result.verdict, "why": result.why})
        print(json.dumps(rows[-1]), flush=True)
    return rows


def world_seed_spread(runs: list[Path]) -> tuple[list[float], float]:
    """The last quarter's mean gold of each healthy run, and their standard deviation: the
    number `WORLD_SEED_SPREAD` (doctor/compare.py) states."""
    import statistics

    from rlhflab.doctor.compare import end_values
    from rlhflab.runs import read_jsonl

    ends = [statistics.fmean(end_values([r["reward/gold_mean"] for r in read_jsonl(run / "metrics" / "ppo.jsonl")
                                         if "reward/gold_mean" in r])) for run in runs]
    return ends, statistics.stdev(ends)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", type=Path, default=ROOT / "runs" / "faults-bench" / "healthy-seed0")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "compare-bench")
    parser.add_argument("--pairs", type=int, default=30)
    parser.add_argument("--fixes", type=int, default=10)
    parser.add_argument("--iterations", type=int, default=40)
    parser.add_argument("--trl", type=Path, default=ROOT / "runs" / "calibration",
                        help="bench/calibration.py's TRL runs, for a few pairs of TRL GRPO/RLOO/PPO runs of the world")
    parser.add_argument("--doc", type=Path, default=None)
    args = parser.parse_args()
    from rlhflab.config import config_from_run

    lr = config_from_run(args.base).ppo.lr
    common = [f"ppo.iterations={args.iterations}"]

    def healthy(seed: int) -> Path:
        return train(args.base, args.out / f"healthy-{seed}", [*common, f"seed={seed}"])

    rows = {"seed_only": [], "kl_coef": [], "lr": []}
    for k in range(args.pairs):
        a, b = 1000 + 2 * k, 1000 + 2 * k + 1
        rows["seed_only"].append({"pair": [a, b], **verdict(healthy(a), healthy(b))})
        print(json.dumps(rows["seed_only"][-1]), flush=True)
    for k in range(args.fixes):
        seed = 1000 + 2 * k
        kl0 = train(args.base, args.out / f"kl0-{seed}", [*common, f"seed={seed}", "ppo.kl_coef=0"])
        rows["kl_coef"].append({"seed": seed, **verdict(kl0, healthy(seed))})
        fast = train(args.base, args.out / f"lr30x-{seed}", [*common, f"seed={seed}", f"ppo.lr={30 * lr}"])
        rows["lr"].append({"seed": seed, **verdict(fast, healthy(seed))})
        print(json.dumps({"kl": rows["kl_coef"][-1], "lr": rows["lr"][-1]}), flush=True)
    seconds = trained_seconds(args.out)  # 0: runs trained before the bench timed them
    seeds = sorted(args.base.parent.glob("healthy-seed*"))
    if len(seeds) >= 2:
        ends, spread = world_seed_spread(seeds)
        rows["world_seed_spread"] = {"runs": [p.name for p in seeds], "ends": ends, "sd": spread}
        print(json.dumps(rows["world_seed_spread"]), flush=True)
    rows["trl"] = trl_pairs(args.trl) if args.trl.is_dir() else []
    (args.out / "results.json").write_text(json.dumps(rows, indent=1))
    if args.doc is not None:
        replace_section(args.doc, START, END, render(rows, args, seconds))


def render(rows: dict, args, seconds: float) -> str:
    pairs = rows["seed_only"]
    called = sum(r["verdict"] in ("fixed", "worse", "not fixed", "partly fixed") for r in pairs)
    low, high = wilson(called, len(pairs))
    counts = lambda rs: ", ".join(f"{v} {sum(r['verdict'] == v for r in rs)}" for v in  # noqa: E731
                                  ("fixed", "partly fixed", "not fixed", "worse", "cannot tell")
                                  if any(r["verdict"] == v for r in rs))
    return "\n".join([
        START, "",
        f"Command: `python bench/compare_bench.py --pairs {args.pairs} --fixes {args.fixes} --iterations "
        f"{args.iterations} --doc docs/benchmarks.md` (2-core CPU; PPO-only reruns of {args.iterations} iterations from "
        f"the stages 1-2 of {args.base.relative_to(ROOT) if args.base.is_relative_to(ROOT) else args.base}"
        + (f"; {seconds / 60:.0f} min of training" if seconds else "")
        + "). One run a side: the gold is held to the world's seed spread (doctor/compare.py, "
        "`WORLD_SEED_SPREAD`). A seed-only pair is called a change when its verdict is anything but cannot tell; "
        "every healthy run has no finding, so a change could only come from the gold or a new finding.", "",
        f"- seed-only pairs called a change: {called} of {len(pairs)} = {called / max(1, len(pairs)):.0%} (95% Wilson "
        f"interval {low:.0%}-{high:.0%}); verdicts: {counts(pairs)}",
        f"- of which among the pairs whose runs `WORLD_SEED_SPREAD` was fitted on (seeds 1000-1029): "
        f"{sum(r['verdict'] != 'cannot tell' for r in pairs if r['pair'][1] < 1030)} of "
        f"{sum(r['pair'][1] < 1030 for r in pairs)}; held out (seeds 1030 on): "
        f"{sum(r['verdict'] != 'cannot tell' for r in pairs if r['pair'][1] >= 1030)} of "
        f"{sum(r['pair'][1] >= 1030 for r in pairs)}",
        f"- `ppo.kl_coef` 0 -> 0.2, same seed: {counts(rows['kl_coef'])} (of {len(rows['kl_coef'])})",
        f"- `ppo.lr` 30x -> 1x, same seed: {counts(rows['lr'])} (of {len(rows['lr'])})",
        *world_line(rows.get("world_seed_spread")), "", *trl_table(rows.get("trl", [])), END])


def world_line(spread: dict | None) -> list[str]:
    if not spread:
        return []
    ends = ", ".join(f"{v:.3f}" for v in spread["ends"])
    return [f"- the world's seed spread (`WORLD_SEED_SPREAD`): last-quarter mean gold of {', '.join(spread['runs'])} "
            f"= {ends}, standard deviation {spread['sd']:.3f}"]


def trl_table(rows: list[dict]) -> list[str]:
    if not rows:
        return []
    return ["TRL runs of the world (bench/calibration.py's, 60-120 steps, gold mapped with `--map gold=reward/gold_mean`; "
            "one run a side and no world spread for them, so the gold alone cannot tell):", "",
            "| before | after | what differs | verdict | why |", "|---|---|---|---|---|",
            *[f"| {r['before']} | {r['after']} | {r['differs']} | {r['verdict']} | {r['why']} |" for r in rows], ""]


if __name__ == "__main__":
    main()
