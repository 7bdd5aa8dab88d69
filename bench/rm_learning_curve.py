"""The reward model's held-out accuracy against its training pairs, on the reviews world.

    python bench/rm_learning_curve.py [--base runs/demo] [--out runs/rm-curve]
                                      [--pairs 120 480 ...] [--epochs 2] [--doc docs/benchmarks.md]

Stage 2 is trained again on the base run's stage-1 model at each size (its other settings
unchanged), as the doctor's "more comparisons" fix would rerun it. The curve checks the size
the fix proposes (`causes.RM_PAIRS_FLOOR`, taken from the literature) against the doctor's
reward-model limits (`RM_VAL_ACC_LIMIT`, `RM_GOLD_AGREEMENT_LIMIT`). A size already measured
in OUT/results.jsonl is not trained again.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from benchlib import replace_section
from rlhflab.config import apply_overrides, config_from_run
from rlhflab.doctor.causes import RM_PAIRS_FLOOR
from rlhflab.doctor.rules.reward_model import RM_GOLD_AGREEMENT_LIMIT, RM_VAL_ACC_LIMIT
from rlhflab.runs import RunDir
from rlhflab.stages.reward import run_reward
from rlhflab.verify import share_stages

ROOT = Path(__file__).resolve().parent.parent
START, END = "<!-- rm-curve:start -->", "<!-- rm-curve:end -->"


def measure(base: Path, out: Path, pairs: int, epochs: int) -> dict:
    run = RunDir(out / f"pairs{pairs}-epochs{epochs}")
    run.create()
    share_stages(RunDir(base), run, "reward")
    config = apply_overrides(config_from_run(base), {"reward.pairs": str(pairs), "reward.epochs": str(epochs)},
                             source="rm learning curve")
    start = time.perf_counter()
    result = run_reward(config, run, show_progress=False)
    return {"pairs": pairs, "epochs": epochs, "train_acc": result.train_acc, "val_acc": result.val_acc,
            "gold_agreement": result.gold_agreement, "seconds": round(time.perf_counter() - start)}


def render(rows: list[dict], command: str) -> str:
    lines = [START, "## Reward model: held-out accuracy against training pairs", "",
             f"Command: `{command}`. Measured on a 2-core CPU, demo size, on the demo run's stage-1 model. The "
             f"doctor's fix for a weak or overfit reward model asks for twice the run's pairs and at least "
             f"{RM_PAIRS_FLOOR:,} (`RM_PAIRS_FLOOR`, the smallest published language reward-model set: Ziegler et "
             f"al. 2019's 5,000 four-way choices); the doctor calls a reward model weak below held-out accuracy "
             f"{RM_VAL_ACC_LIMIT.value} or gold agreement {RM_GOLD_AGREEMENT_LIMIT.value}.", "",
             "| pairs | epochs | train acc | held-out acc | gold agreement | weak | seconds |", "|---|---|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: (r["epochs"], r["pairs"])):
        weak = r["val_acc"] < RM_VAL_ACC_LIMIT.value or r["gold_agreement"] < RM_GOLD_AGREEMENT_LIMIT.value
        lines.append(f"| {r['pairs']:,} | {r['epochs']} | {r['train_acc']:.3f} | {r['val_acc']:.3f} | "
                     f"{r['gold_agreement']:.3f} | {'yes' if weak else 'no'} | {r['seconds']} |")
    lines += ["", "The held-out set is 1,200 pairs (a standard error of about 0.013 on an accuracy near 0.7): the "
              "curve is flat from 120 to a few thousand pairs, then rises, so doubling a set 100x too small "
              "changes nothing, which the ablation bench measured before the floor.", END]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", type=Path, default=ROOT / "runs" / "demo")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "rm-curve")
    parser.add_argument("--pairs", type=int, nargs="+", default=[120, 480, 1920, 3840, 7680, RM_PAIRS_FLOOR, 24000])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--doc", type=Path)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    results = args.out / "results.jsonl"
    rows = [json.loads(line) for line in results.read_text().splitlines()] if results.is_file() else []
    for pairs in args.pairs:
        if any(r["pairs"] == pairs and r["epochs"] == args.epochs for r in rows):
            continue
        row = measure(args.base, args.out, pairs, args.epochs)
        rows.append(row)
        with open(results, "a") as f:
            f.write(json.dumps(row) + "\n")
        print(json.dumps(row), flush=True)
    command = "python bench/" + " ".join(Path(a).name if a.endswith(".py") else a for a in sys.argv)
    section = render([r for r in rows if r["pairs"] in args.pairs and r["epochs"] == args.epochs], command)
    if args.doc:
        replace_section(args.doc, START, END, section)
    print(section)


if __name__ == "__main__":
    main()
