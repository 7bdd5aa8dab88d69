"""The family of numbers a healthy run cannot produce (doctor/rules/impossible.py) on every
labelled run at hand: for each run, its label and the members that fire; then, per member,
the smallest value the healthy runs log in their second half against the member's floor
(the margin the floor keeps).

    python bench/impossible_numbers.py [--faults runs/faults-bench] [--outside runs/outside-faults]
        [--real ../shared/real_logs] [--trl runs/trl-probes]

Labels: the faults bench's healthy seeds and the outside-bugs bench's healthy seeds are
healthy; a zoo fault or an outside bug is labelled by its name; the real logs by
MANIFEST.md (the veRL GSM8K run and the 100 f + g control are healthy); the TRL probe runs
(bench/trl_side.py) count as healthy: no code bug, though some run at beta 0 (a setting, which
moves the policy as much as any: what these floors need).
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from rlhflab.doctor.diagnose import diagnose
from rlhflab.doctor.formats import read_log
from rlhflab.doctor.rules.impossible import PINNED, printed_resolution

ROOT = Path(__file__).resolve().parents[1]
HEALTHY_REAL = {"verl_ppo_qwen2.5-0.5b_gsm8k_resp256.log", "tinker_leetcode_llama3.2-3b_100f+g_easy.jsonl"}


def labelled_runs(args) -> list[tuple[str, str, Path]]:
    runs = []
    for folder in (args.faults, args.outside):
        for path in sorted(p for p in folder.glob("*") if (p / "metrics").is_dir()):
            runs.append((f"{folder.name}/{path.name}", "healthy" if path.name.startswith("healthy") else path.name,
                         path))
    for path in sorted(args.real.glob("*")):
        if path.name != "MANIFEST.md":
            runs.append((path.name, "healthy" if path.name in HEALTHY_REAL else "see MANIFEST.md", path))
    for path in sorted(p for p in args.trl.glob("*") if p.is_dir()):
        runs.append((f"{args.trl.name}/{path.name}", "healthy", path))
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--faults", type=Path, default=ROOT / "runs" / "faults-bench")
    parser.add_argument("--outside", type=Path, default=ROOT / "runs" / "outside-faults")
    parser.add_argument("--real", type=Path, default=ROOT.parent / "shared" / "real_logs")
    parser.add_argument("--trl", type=Path, default=ROOT / "runs" / "trl-probes")
    args = parser.parse_args()
    members = {p.rule for p in PINNED}
    lowest: dict[str, tuple[float, str]] = {}  # metric -> the smallest healthy second-half |value|, and where
    print("| run | label | members that fire |\n|---|---|---|")
    for name, label, path in labelled_runs(args):
        table = read_log(path)
        fired = sorted(f.rule for f in diagnose(table).findings if f.rule in members)
        print(f"| {name} | {label} | {', '.join(fired) or '-'} |")
        if label != "healthy":
            continue
        for pinned in PINNED:
            series = table.get(pinned.metric, any_unit=True)
            if series is None or pinned.metric in table.derived or len(series) < 2:
                continue
            values = series.values[len(series) // 2:]
            if pinned.pin == "exactly constant":  # the floor is on the step-to-step change
                values = [statistics.median(abs(b - a) for a, b in zip(values, values[1:]))] if len(values) > 1 else []
            elif pinned.pin != "exactly 0":
                continue
            if not values:
                continue
            late = min(abs(v) for v in values)
            if late > printed_resolution(table, series) and late < lowest.get(pinned.metric, (float("inf"), ""))[0]:
                lowest[pinned.metric] = (late, name)
    print("\n| metric | rule | floor | smallest healthy second-half value (entropy: median step change) | run | "
          "margin |\n|---|---|---|---|---|---|")
    for pinned in PINNED:
        if pinned.metric in lowest:
            value, where = lowest[pinned.metric]
            print(f"| `{pinned.metric}` | `{pinned.rule}` | `{pinned.floor.name}` = {pinned.floor.value:g} | "
                  f"{value:.3g} | {where} | {value / pinned.floor.value:.0f}x |")


if __name__ == "__main__":
    main()
