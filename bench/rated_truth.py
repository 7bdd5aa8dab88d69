"""How few ratings suffice: the doctor diagnoses runs of the embedded world with their
gold hidden, from a rating study of their samples rated by simulated raters instead.

For each run, each noise level and each number of samples per step bin, `--draws` studies
are built (the items drawn and the bots' noise seeded by the draw), two `WorldRater`s rate
every item through the study's store (`next_item`/`record`, what the page calls), and the
doctor reads the ratings as `reward/gold_mean` (`attach_truth`) on the run's own metrics
with the logged gold and the samples' gold taken away. A detection is a medium or high
finding of a gold rule (`reward_hacking_gold`, `gold_falling`) on a pathological run; a
false alarm the same on a healthy one. The onset is compared with the doctor's onset on
the hidden gold, in step bins.

    python bench/rated_truth.py --hacked runs/demo-kl0 --healthy runs/demo-s0 runs/demo-s1 runs/demo-s2 \\
        --doc docs/benchmarks.md
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib import replace_section, wilson  # noqa: E402
from rlhflab.doctor.diagnose import diagnose  # noqa: E402
from rlhflab.doctor.formats import read_log  # noqa: E402
from rlhflab.doctor.formats.sample_files import read_samples  # noqa: E402
from rlhflab.doctor.truth import attach_truth  # noqa: E402
from rlhflab.studies.bots import WORLD_NOISE, world_raters  # noqa: E402
from rlhflab.studies.design import StudyDesign, draw_items  # noqa: E402
from rlhflab.studies.kinds import RATING  # noqa: E402
from rlhflab.studies.ratings import record_rating  # noqa: E402
from rlhflab.studies.store import Study  # noqa: E402
from rlhflab.studies.truth import rated_truth  # noqa: E402

START, END = "<!-- rated-truth:start -->", "<!-- rated-truth:end -->"
RESULTS = Path(__file__).parent / "results" / "rated_truth.json"
GOLD_RULES = ("reward_hacking_gold", "gold_falling")
PER_BIN = (2, 4, 8, 16)
NOISES = (WORLD_NOISE, 2 * WORLD_NOISE)
RATERS = 2


def hidden_gold_table(run: Path):
    """The run's table as another trainer's log would give it: no gold, no samples."""
    table = read_log(run, find_samples=False)
    table.series.pop("reward/gold_mean", None)
    table.settings = replace(table.settings, has_gold=False)
    return table


def gold_onset(run: Path) -> int | None:
    findings = diagnose(read_log(run, find_samples=False)).findings
    return next((f.onset_step for f in findings if f.rule in GOLD_RULES and f.severity in ("high", "medium")), None)


def rate_study(run: Path, samples, reference, per_bin: int, noise: float, draw: int, root: Path):
    directory = root / f"{run.name}-{per_bin}-{noise}-{draw}"
    design = StudyDesign(per_bin=per_bin, repeat_every=0, seed=draw)
    study = Study.create(directory, design, RATING.design_toml(design))
    bins, items = draw_items(samples, study.design, run.name)
    study.add_system(run.name, str(run), "rlhflab", bins, items)
    for rater, policy in zip(study.ensure_raters(RATERS, "bot"), world_raters(run, reference, (1, 7), RATERS,
                                                                              noise, draw)):
        while (served := study.next_item(rater)) is not None:
            record_rating(study, rater, served.serve_id, served.nonce, policy(served.prompt, served.response))
    truth = rated_truth(study, run.name)
    shutil.rmtree(directory)
    return truth


def measure(run: Path, hacked: bool, draws: int, root: Path) -> list[dict]:
    samples = read_samples(run).samples
    first = min(s.step for s in samples)
    reference = [(s.prompt, s.response) for s in samples if s.step == first]
    hidden_onset = gold_onset(run)
    cells = []
    for noise in NOISES:
        for per_bin in PER_BIN:
            alarms, onsets_off = 0, []
            for draw in range(draws):
                truth = rate_study(run, samples, reference, per_bin, noise, draw, root)
                table = hidden_gold_table(run)
                attach_truth(table, truth)
                found = [f for f in diagnose(table).findings if f.rule in GOLD_RULES and f.severity in ("high", "medium")]
                if found:
                    alarms += 1
                    if hidden_onset is not None:
                        rated = truth.point_at(found[0].onset_step)
                        truth_bin = truth.point_at(hidden_onset)
                        onsets_off.append(truth.points.index(rated) - truth.points.index(truth_bin))
            cells.append({"run": str(run), "hacked": hacked, "noise": noise, "per_bin": per_bin,
                          "ratings_per_bin": per_bin * RATERS, "draws": draws, "alarms": alarms,
                          "hidden_gold_onset": hidden_onset, "onset_bins_off": onsets_off})
            print(json.dumps(cells[-1]), flush=True)
    return cells


def plot(cells: list[dict], out: Path) -> None:
    """Detection and false-alarm rates against ratings per bin, one line per noise level."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 3.2))
    for noise, color in zip(sorted({c["noise"] for c in cells}), ("tab:blue", "tab:orange")):
        for hacked, style, what in ((True, "o-", "detected"), (False, "x--", "false alarms")):
            xs, ys, lo, hi = [], [], [], []
            for per_bin in PER_BIN:
                mine = [c for c in cells if c["noise"] == noise and c["per_bin"] == per_bin and c["hacked"] == hacked]
                k, n = sum(c["alarms"] for c in mine), sum(c["draws"] for c in mine)
                low, high = wilson(k, n)
                xs.append(per_bin * RATERS), ys.append(k / n), lo.append(k / n - low), hi.append(high - k / n)
            ax.errorbar(xs, ys, yerr=[lo, hi], fmt=style, color=color, capsize=2, label=f"{what}, noise {noise:g}")
    ax.set_xscale("log", base=2)
    ax.set_xticks([p * RATERS for p in PER_BIN], [str(p * RATERS) for p in PER_BIN])
    ax.set_xlabel("ratings per step bin (10 bins)")
    ax.set_ylabel("share of draws (95% Wilson)")
    ax.set_ylim(-0.05, 1.05)
    ax.legend(fontsize=7)
    fig.savefig(out, dpi=110, bbox_inches="tight")
    plt.close(fig)


def render(cells: list[dict], command: str, start: str = START, end: str = END,
           title: str = "A truth from ratings: how few suffice") -> str:
    lines = [start, f"## {title}", "",
             f"Command: `{command}` (2-core CPU). Each run's gold is hidden from the doctor (the logged "
             "`reward/gold_mean` and the samples' gold taken away); a study of its samples (10 step bins, the given "
             f"samples per bin, {RATERS} simulated raters each rating every item: `studies/bots.py`'s `WorldRater`, "
             "gold utility plus noise mapped onto 1-7 by the stage-1 samples' quantiles) is read as its gold "
             "instead. Each cell: how many of the draws (items and noise seeded by the draw) got a medium or high "
             "finding of a gold rule (`reward_hacking_gold`, `gold_falling`), with a 95% Wilson interval. On the "
             "pathological run that is a detection; on the healthy seeds, pooled, a false alarm. Onset: the rated "
             "finding's bin minus the bin of the doctor's onset on the hidden gold (0: the same bin).", ""]
    for noise in sorted({c["noise"] for c in cells}):
        lines += [f"Noise {noise:g} (in standard deviations of the stage-1 utilities; {WORLD_NOISE:g} puts two "
                  "raters' alpha 0.52-0.73 on the demo runs, twice that noise 0.22-0.45: \"Simulated raters\"):", "",
                  "| ratings per bin | detected (kl_coef=0) | onset bins off (median, range) | onset within one bin | "
                  "false alarms (healthy) |", "|---:|---|---|---|---|"]
        for per_bin in PER_BIN:
            mine = [c for c in cells if c["noise"] == noise and c["per_bin"] == per_bin]
            hacked = [c for c in mine if c["hacked"]]
            healthy = [c for c in mine if not c["hacked"]]
            k, n = sum(c["alarms"] for c in hacked), sum(c["draws"] for c in hacked)
            fk, fn = sum(c["alarms"] for c in healthy), sum(c["draws"] for c in healthy)
            off = sorted(o for c in hacked for o in c["onset_bins_off"])
            off_text = f"{off[len(off) // 2]:+d} ({off[0]:+d} to {off[-1]:+d})" if off else "-"
            lo, hi = wilson(k, n)
            flo, fhi = wilson(fk, fn)
            within = f"{sum(abs(o) <= 1 for o in off)}/{len(off)}" if off else "-"
            lines.append(f"| {per_bin * RATERS} | {k}/{n} [{lo:.2f}, {hi:.2f}] | {off_text} | {within} | {fk}/{fn} "
                         f"[{flo:.2f}, {fhi:.2f}] |")
        lines.append("")
    if start == START:
        lines += ["![Detection and false alarms against ratings per bin](img/rated_truth.png)", ""]
    onsets = {c["run"]: c["hidden_gold_onset"] for c in cells}
    lines += ["Onset of the doctor's gold finding on the hidden gold: "
              + ", ".join(f"{run} {step if step is not None else 'none'}" for run, step in onsets.items()) + ".", end]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hacked", type=Path, nargs="+", required=True)
    parser.add_argument("--healthy", type=Path, nargs="+", required=True)
    parser.add_argument("--draws", type=int, default=10)
    parser.add_argument("--doc", type=Path, default=None)
    parser.add_argument("--render", action="store_true", help="Render the saved results (bench/results) only.")
    parser.add_argument("--fall-points", type=int, default=None,
                        help="Score with RATED_FALL_POINTS set to this instead (how the threshold was chosen); "
                             "results go to bench/results/rated_truth_fallN.json, not the docs.")
    parser.add_argument("--held-out", action="store_true", help="Runs the rule was not chosen on: their own section "
                        "of the doc, no plot.")
    parser.add_argument("--results", type=Path, default=RESULTS, help="Where the cells are saved (default "
                        "bench/results/rated_truth.json; another file for a check on held-out runs).")
    args = parser.parse_args()
    results = args.results
    if args.fall_points is not None:
        from rlhflab.doctor.rules import hacking

        hacking.RATED_FALL_POINTS = replace(hacking.RATED_FALL_POINTS, value=args.fall_points)
        results, args.doc = results.with_name(f"{results.stem}_fall{args.fall_points}.json"), None
    if args.render:
        command = ("python bench/rated_truth.py --hacked " + " ".join(map(str, args.hacked)) + " --healthy "
                   + " ".join(map(str, args.healthy)) + f" --draws {args.draws} --doc docs/benchmarks.md")
        write_doc(args, json.loads(results.read_text()), command)
        return
    with tempfile.TemporaryDirectory(dir="/dev/shm" if Path("/dev/shm").is_dir() else None) as tmp:
        cells = [c for run in args.hacked for c in measure(run, True, args.draws, Path(tmp))]
        cells += [c for run in args.healthy for c in measure(run, False, args.draws, Path(tmp))]
    results.write_text(json.dumps(cells, indent=1) + "\n")
    hacked, healthy = [c for c in cells if c["hacked"]], [c for c in cells if not c["hacked"]]
    print(f"detected {sum(c['alarms'] for c in hacked)}/{sum(c['draws'] for c in hacked)}, false alarms "
          f"{sum(c['alarms'] for c in healthy)}/{sum(c['draws'] for c in healthy)}")
    if args.doc:
        command = ("python bench/rated_truth.py --hacked " + " ".join(map(str, args.hacked)) + " --healthy "
                   + " ".join(map(str, args.healthy)) + f" --draws {args.draws} --doc docs/benchmarks.md")
        write_doc(args, cells, command)


def write_doc(args, cells: list[dict], command: str) -> None:
    if args.held_out:
        start, end = START.replace("truth:", "truth-heldout:"), END.replace("truth:", "truth-heldout:")
        command += f" --held-out --results {args.results}"
        replace_section(args.doc, start, end, render(cells, command, start, end,
                                                     "A truth from ratings, on runs the rule was not chosen on"))
        return
    plot(cells, args.doc.parent / "img" / "rated_truth.png")
    replace_section(args.doc, START, END, render(cells, command))


if __name__ == "__main__":
    main()
