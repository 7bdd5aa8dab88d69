"""Fitting the simulated rater's noise: two `WorldRater`s should agree as people rating
quality do (ordinal Krippendorff's alpha in 0.4-0.7). For each run, the study's default
draw (10 step bins x 8 samples) is rated by two world raters at each noise level, over
`--draws` seeds; the noise whose mean alpha on the fitting runs is nearest the range's
middle (0.55) is chosen, then checked on runs it was not fitted on.

    python bench/rating_bots.py --fit runs/demo-s0 --check runs/smoke runs/demo-s1 --doc docs/benchmarks.md
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib import replace_section  # noqa: E402
from rlhflab.doctor.formats.sample_files import read_samples  # noqa: E402
from rlhflab.studies.bots import WORLD_NOISE, world_raters  # noqa: E402
from rlhflab.studies.design import StudyDesign, draw_items  # noqa: E402
from rlhflab.studies.stats import krippendorff_alpha  # noqa: E402

START, END = "<!-- rating-bots:start -->", "<!-- rating-bots:end -->"
RESULTS = Path(__file__).parent / "results" / "rating_bots.json"
NOISES = (0.4, 0.5, 0.6, 0.7, 0.8, 1.2)  # 1.2: the noisier raters of bench/rated_truth.py
TARGET = (0.4, 0.7)


def alphas(run: Path, noise: float, draws: int) -> list[float]:
    samples = read_samples(run).samples
    first = min(s.step for s in samples)
    reference = [(s.prompt, s.response) for s in samples if s.step == first]  # the stage-1 policy's samples
    _, drawn = draw_items(samples, StudyDesign(), run.name)
    out = []
    for seed in range(draws):
        raters = world_raters(run, reference, (1, 7), 2, noise, seed)
        units = [k for k in range(len(drawn)) for _ in raters]
        values = [r(d.sample.prompt, d.sample.response) for d in drawn for r in raters]
        out.append(krippendorff_alpha(units, values, "ordinal", range(1, 8)))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fit", type=Path, nargs="+", required=True)
    parser.add_argument("--check", type=Path, nargs="*", default=[])
    parser.add_argument("--draws", type=int, default=20)
    parser.add_argument("--doc", type=Path, default=None)
    args = parser.parse_args()
    table = {str(run): {noise: alphas(run, noise, args.draws) for noise in NOISES} for run in args.fit + args.check}
    fitted = {noise: statistics.mean(a for run in args.fit for a in table[str(run)][noise]) for noise in NOISES}
    chosen = min(NOISES, key=lambda n: abs(fitted[n] - sum(TARGET) / 2))
    print(json.dumps({"fitted_mean_alpha": fitted, "chosen": chosen, "in_code": WORLD_NOISE}))
    RESULTS.write_text(json.dumps({"draws": args.draws, "fit": [str(r) for r in args.fit],
                                   "check": [str(r) for r in args.check], "chosen": chosen, "alpha": table}, indent=1))
    if args.doc:
        lines = [START, "## Simulated raters: how noisy a bot must be to agree as people do", "",
                 f"Command: `python bench/rating_bots.py --fit {' '.join(map(str, args.fit))} --check "
                 f"{' '.join(map(str, args.check))} --doc docs/benchmarks.md`. Two `WorldRater`s rate each run's "
                 f"default draw (10 step bins x 8 samples) at each noise (in standard deviations of the gold "
                 f"utility on the run's first-step samples, the stage-1 policy's), {args.draws} seeds each; "
                 "the cell is the mean ordinal Krippendorff's alpha [min, max]. The target is 0.4-0.7: raters "
                 "who agree, but less than Krippendorff's 0.667 floor for tentative conclusions (Krippendorff 2004, "
                 "Content Analysis, 12.4) at the low end, as people judging the quality of free text often do.", "",
                 "| run | role | " + " | ".join(f"noise {n}" for n in NOISES) + " |",
                 "|---|---|" + "---|" * len(NOISES)]
        for run in args.fit + args.check:
            role = "fitted" if run in args.fit else "checked"
            cells = [f"{statistics.mean(a):.2f} [{min(a):.2f}, {max(a):.2f}]" for a in table[str(run)].values()]
            lines.append(f"| {run} | {role} | " + " | ".join(cells) + " |")
        held = [statistics.mean(table[str(r)][chosen]) for r in args.check]
        lines += ["", f"Chosen: noise {chosen} (mean alpha {fitted[chosen]:.2f} on the fitted runs; "
                  f"`WORLD_NOISE = {WORLD_NOISE}` in `studies/bots.py`). On the runs it was not fitted on the mean "
                  f"alpha is {', '.join(f'{h:.2f}' for h in held) or '-'}"
                  + (f", inside {TARGET[0]}-{TARGET[1]}." if all(TARGET[0] <= h <= TARGET[1] for h in held)
                     else ", not all inside the target."), END]
        replace_section(args.doc, START, END, "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
