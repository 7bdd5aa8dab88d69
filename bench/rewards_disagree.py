"""The calibration of the `rewards_disagree` rule (doctor/rules/hacking.py): each reward's
gain in its own noise, and the second reward's gain as a share of the first's.

Fitted on the faults bench's demo runs (`rlhflab faults bench`), each read with its gold
renamed to an unnamed second reward (`reward/judge`), labelled by their gold: the healthy
seeds and the faults whose gold followed the proxy, against those whose gold stayed flat or
fell while the proxy climbed. Checked on the public logs of one researcher's loop that log
two rewards (../shared/real_logs, MANIFEST.md), which the thresholds were not fitted on.

    python bench/rewards_disagree.py [--faults runs/faults-bench] [--real ../shared/real_logs]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rlhflab.doctor.diagnose import diagnose
from rlhflab.doctor.formats import read_log
from rlhflab.doctor.rules.hacking import REWARDS_CLIMB, REWARDS_FOLLOW, gain

ROOT = Path(__file__).resolve().parents[1]
# The real logs with two rewards, and the reading MANIFEST.md gives each.
REAL = {"tinker_leetcode_llama3.2-3b_g-compilable_easy.jsonl": ("reward/g", "reward/f", "reward hacking"),
        "tinker_leetcode_llama3.2-3b_100f+g_easy.jsonl": ("reward/g", "reward/f", "healthy control")}


def row(name: str, label: str, first, second, fired: bool) -> str:
    climb = gain(first)
    share = gain(second) / climb if climb else float("nan")
    return f"| {name} | {label} | {climb:.1f} | {share:+.2f} | {'yes' if fired else 'no'} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--faults", type=Path, default=ROOT / "runs" / "faults-bench")
    parser.add_argument("--real", type=Path, default=ROOT.parent / "shared" / "real_logs")
    args = parser.parse_args()
    print(f"REWARDS_CLIMB = {REWARDS_CLIMB.value:g} sigma, REWARDS_FOLLOW = {REWARDS_FOLLOW.value:g}")
    print("| run | label (by gold / manifest) | first reward's gain (sigma) | second's share of it | fires |")
    print("|---|---|---|---|---|")
    for run in sorted(p for p in args.faults.iterdir() if p.is_dir()):
        table = read_log(run)
        proxy, gold = table.get("reward/proxy_mean"), table.series.pop("reward/gold_mean", None)
        if proxy is None or gold is None:
            continue
        table.series["reward/judge"] = gold  # the gold as a second reward nothing names the truth
        label = ("no reward climbed" if max(gain(proxy), gain(gold)) < REWARDS_CLIMB.value else
                 "gold flat or falling as the proxy climbed" if gain(gold) < REWARDS_FOLLOW.value * gain(proxy) else
                 "gold followed")
        fired = any(f.rule == "rewards_disagree" for f in diagnose(table).findings)
        print(row(run.name, label, proxy, gold, fired))
    for name, (first, second, label) in REAL.items():
        table = read_log(args.real / name)
        fired = any(f.rule == "rewards_disagree" for f in diagnose(table).findings)
        print(row(name, label, table.get(first, any_unit=True), table.get(second, any_unit=True), fired))


if __name__ == "__main__":
    main()
