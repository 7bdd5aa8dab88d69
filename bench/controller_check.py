"""Held-out runs for the thresholds fitted on seed 0's adaptive-KL runs: the adaptive
controller from a beta 4x off either way, and the zoo's inverted controller, trained from
the healthy runs of other seeds (bench/pipeline_targets.py's `demo-seed{N}`).

    python bench/controller_check.py [--out runs/bench] [--seeds 1 2] [--runs beta0.05 beta0.8 inverted]

Writes each run to `OUT/demo-seed{N}-adaptive/{beta0.05,beta0.8,inverted}`, where
bench/rule_calibration.py reads them with the rest of the calibration set, and prints, for
each, the correlation of beta's changes with the KL before them (CONTROLLER_CORRELATION)
and the doctor's findings from the metrics alone.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from pipeline_targets import ADAPTIVE_STARTS, ADAPTIVE_TARGET, ppo_again
from rlhflab.config import load_config
from rlhflab.faults.zoo import with_fault
from rlhflab.runs import RunDir

ROOT = Path(__file__).resolve().parents[1]


def controller_correlation(records: list[dict]) -> float | None:
    """Correlation of beta's changes with the KL before them (as the rule computes it)."""
    kl = [r["kl/mean"] for r in records]
    coef = [r["kl/coef"] for r in records]
    changes = [b - a for a, b in zip(coef, coef[1:])]
    if len(set(changes)) < 2 or len(set(kl[:-1])) < 2:
        return None
    return statistics.correlation(changes, kl[:-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "bench")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--preset", default="demo")
    parser.add_argument("--runs", nargs="+", default=[f"beta{beta:g}" for beta in ADAPTIVE_STARTS] + ["inverted"])
    args = parser.parse_args()
    for seed in args.seeds:
        healthy = RunDir(args.out / f"{args.preset}-seed{seed}")
        config = load_config(args.preset, overrides=[f"seed={seed}"])
        variants = {f"beta{beta:g}": (config, {"ppo.kl_target": ADAPTIVE_TARGET, "ppo.kl_coef": beta})
                    for beta in ADAPTIVE_STARTS}
        variants["inverted"] = (with_fault(config, "adaptive_kl_inverted"), {})
        for name, (base, overrides) in variants.items():
            if name not in args.runs:
                continue
            start = time.perf_counter()
            out = args.out / f"{args.preset}-seed{seed}-adaptive" / name
            records, findings = ppo_again(healthy, base, overrides, out)
            print(json.dumps({"seed": seed, "run": name, "seconds": round(time.perf_counter() - start),
                              "controller_correlation": controller_correlation(records),
                              "findings_with_config": findings}), flush=True)


if __name__ == "__main__":
    main()
