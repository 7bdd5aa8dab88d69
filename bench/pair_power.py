"""How many side-by-side comparisons tell a preference from none: for a true win rate p (60/40
is p = 0.6), the decisive comparisons a study needs so that its Wilson 95% interval leaves out
1/2 with 80% power, by the normal approximation for one proportion
(`studies.pairwise.comparisons_needed`) and by simulating the test itself.

    python bench/pair_power.py [--studies 20000] [--doc docs/studies.md]

Simulated: for each n, `--studies` studies of n comparisons at win rate p, the share whose
interval leaves out 1/2 (`simulated_power`); the table gives the smallest n from which that
share stays at or above 0.8 for the next 10 n (a binomial test's power saws up and down with n).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from benchlib import replace_section
from rlhflab.studies.pairwise import comparisons_needed, simulated_power

ROOT = Path(__file__).resolve().parent.parent
START, END = "<!-- pair-power:start -->", "<!-- pair-power:end -->"
WIN_RATES = (0.55, 0.6, 0.65, 0.7, 0.8)
POWER = 0.8


def simulated_needed(p1: float, studies: int, start: int) -> tuple[int, float]:
    """The smallest n (searched from `start`) whose simulated power, and that of the next 10
    n, is at least POWER; and its power."""
    n = max(2, start)
    while simulated_power(p1, n, studies, seed=n) >= POWER:  # step down below the threshold first
        n = max(2, n - 10)
        if n == 2:
            break
    while True:
        powers = [simulated_power(p1, m, studies, seed=m) for m in range(n, n + 11)]
        if min(powers) >= POWER:
            return n, powers[0]
        n += 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--studies", type=int, default=20_000)
    parser.add_argument("--doc", type=Path)
    args = parser.parse_args()
    rows = []
    for p1 in WIN_RATES:
        normal = comparisons_needed(p1)
        simulated, power = simulated_needed(p1, args.studies, normal)
        rows.append((p1, normal, simulated, power, simulated_power(p1, normal, args.studies, seed=1)))
        print(f"p={p1}: normal {normal}, simulated {simulated} (power {power:.3f}); power at the normal n "
              f"{rows[-1][4]:.3f}", flush=True)
    lines = [START, "### How many comparisons tell a preference from none", "",
             f"Command: `python bench/pair_power.py --studies {args.studies}`. Decisive comparisons (ties and "
             "\"both bad\" not counted) a study needs for its Wilson 95% interval on the win rate to leave out 1/2 with "
             "80% power; the normal approximation n = ((1.96 x 0.5 + 0.8416 x sqrt(p q)) / (p - 1/2))^2 against a "
             f"simulation of the test itself ({args.studies} studies per n; the smallest n from which the power stays "
             "at 0.8 or above for the next 10 n). With a tie rate t, a study needs n / (1 - t) items; with one "
             "majority vote per item, each item counts once however many raters read it.", "",
             "| true win rate | normal approximation | simulated | power there (simulated) | "
             "power at the normal n (simulated) |",
             "|---|---|---|---|---|"]
    lines += [f"| {p1:.2f} ({p1 * 100:.0f}/{100 - p1 * 100:.0f}) | {normal} | {simulated} | {power:.3f} | {at:.3f} |"
              for p1, normal, simulated, power, at in rows]
    if args.doc:
        replace_section(ROOT / args.doc, START, END, "\n".join(lines + [END]) + "\n")


if __name__ == "__main__":
    main()
