"""A rating study read as a run's truth (studies/as_truth.py reads any kind).

`rated_truth` turns one system's ratings into the doctor's `RatedTruth` (per step bin,
the mean rating with its crossed-bootstrap interval, and the bin's best and worst rated
items); `match_system` finds the system a log belongs to; `truth_change` measures the
change between two sides of a comparison from the study itself, its interval from
resampling the study's items and raters (not a block bootstrap of a curve).
"""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path
from typing import Sequence

import numpy as np

from rlhflab.doctor import CONFIDENCE, MetricTable, RatedExample, RatedPoint, RatedTruth, TruthChange, attach_truth
from rlhflab.studies.design import StudyError
from rlhflab.studies.results import study_results
from rlhflab.studies.stats import crossed_bootstrap_draws, percentile_interval
from rlhflab.studies.store import Study
from rlhflab.studies.whose import PEOPLE, Whose

EXAMPLES_PER_END = 2  # rated items shown at a bin's best and worst end


def parse_truth(text: str) -> tuple[Path, str | None]:
    """`STUDY[:SYSTEM]`: a study directory, and the system to read (None: matched to the log)."""
    path = Path(text)
    if Study.exists(path) or ":" not in text:
        return path, None
    directory, _, system = text.rpartition(":")
    return Path(directory), system or None


def _systems_text(study: Study) -> str:
    return "; ".join(f"{s.name} ({s.source})" for s in study.systems())


def match_system(study: Study, log: Path, system: str | None = None,
                 how_to_name: str = "name one as STUDY:SYSTEM") -> str:
    """The system of `study` that `log` is: named, the only one, or the one whose samples
    came from the log's run (its source lies in the log's directory or up to two above, where
    trainers put their samples beside their logs: TRL's checkpoint-N/ holds the log and its
    parent the completions) or whose name is that directory's; where several runs share a
    directory, the system named as the log's file is."""
    names = [s.name for s in study.systems()]
    if system is not None:
        if system not in names:
            raise StudyError(f"{study.directory}: no system {system!r}; the study holds {_systems_text(study)}")
        return system
    if len(names) == 1:
        return names[0]
    base = Path(log).resolve()
    base = base if base.is_dir() else base.parent
    found: list[str] = []
    for home in (base, base.parent, base.parent.parent):  # the nearest directory that holds a system's samples
        found = [s.name for s in study.systems() if _within(Path(s.source), home) or s.name == home.name]
        if found:
            break
    if len(found) > 1:  # several runs' samples in one directory: the log's own name decides
        found = [name for name in found if name in (Path(log).stem, Path(log).name)] or found
    if len(found) != 1:
        which = "several systems" if found else "no system"
        raise StudyError(f"{log}: {which} of {study.directory} match this log; {how_to_name}. The study holds "
                         f"{_systems_text(study)}")
    return found[0]


def _within(path: Path, directory: Path) -> bool:
    return path == directory or directory in path.parents


FINAL_SHARE = 0.75
"""A study reaches a run's end when its last rated step is past this share of the run's sampled steps."""


def check_rates_run(study: Study, system: str, table: MetricTable) -> None:
    """A rating study's `system` is the truth of the run `table` is read from only if it rates
    that run: each of its items (step, prompt, response) is one of the run's own samples, and
    its steps reach the run's last quarter. A StudyError saying what the study holds otherwise
    (doctor, compare and the truth found in a run all check here, where the truth is read)."""
    items = [i for i in study.items() if i["system"] == system]
    if not items:
        raise StudyError(f"{study.directory}: system {system!r} has no items")
    steps = [int(i["step"]) for i in items]
    held = f"{study.directory} rates {system}: {len(items)} items, steps {min(steps)}-{max(steps)}"
    samples = {(s.step, s.prompt, s.response) for sample_set in table.samples for s in sample_set.samples}
    if not samples:
        raise StudyError(f"{held}; {table.source} has no samples beside it to check them against (give them with "
                         "--samples)")
    run_steps = sorted({step for step, _, _ in samples})
    where = f"{table.source}'s samples (steps {run_steps[0]}-{run_steps[-1]})"
    foreign = sum(1 for i in items if (int(i["step"]), i["prompt"], i["response"]) not in samples)
    if foreign:
        raise StudyError(f"{held}; {foreign} of them are not among {where}: it rates another run")
    end = run_steps[0] + FINAL_SHARE * (run_steps[-1] - run_steps[0])
    if max(steps) < end:
        raise StudyError(f"{held}; {where} go on to step {run_steps[-1]}: the study stops before the run's last "
                         "quarter, where a fall would show (rate its later samples with rlhflab rate ... --add)")


def rated_truth(study: Study, system: str, whose: Whose = PEOPLE) -> RatedTruth:
    """`system`'s ratings by the raters `whose` counts as the doctor's rated truth (module docstring)."""
    results = study_results(study, whose)
    items = {i["id"]: i for i in study.items() if i["system"] == system}
    ratings: dict[int, list[float]] = defaultdict(list)
    human = {r.id for r in study.raters() if whose.counts(r)}
    for row in study.ratings():
        if row.item_id in items and not row.repeat and row.rating is not None and row.rater_id in human:
            ratings[row.item_id].append(row.rating)
    points = []
    for b in results.bins:
        if b.system != system or b.mean is None:
            continue
        rated = sorted((sum(v) / len(v), item_id) for item_id, v in ratings.items() if items[item_id]["bin"] == b.bin)
        best = rated[::-1][:EXAMPLES_PER_END]
        ends = best + [r for r in rated[:EXAMPLES_PER_END] if r not in best]
        examples = tuple(RatedExample(items[i]["prompt"], items[i]["response"], mean, items[i]["step"])
                         for mean, i in ends)
        points.append(RatedPoint(round(b.mean_step), b.first_step, b.last_step, b.mean, b.low, b.high, b.n, examples))
    if not points:
        raise StudyError(f"{study.directory}: system {system!r} has no readable ratings yet")
    unrated = sum(1 for b in results.bins if b.system == system and b.mean is None)
    notes = (f"{unrated} step bin(s) of {system} have no rating yet",) if unrated else ()
    return RatedTruth(f"{study.directory}:{system}", results.scale, tuple(points), results.method, notes)


def _end_bins(study: Study, system: str) -> set[int]:
    """The bins of the last quarter of a system's run (at least one): where its end level is read."""
    bins = sorted(index for (name, index) in study.bins() if name == system)
    return set(bins[-max(1, math.ceil(len(bins) / 4)):])


def truth_change(study: Study, before: Sequence[str], after: Sequence[str], seed: int = 0,
                 draws: int = 2000, whose: Whose = PEOPLE) -> TruthChange:
    """The change of the mean rating over the last quarter of each side's bins, after minus
    before, its interval from resampling the study's items (within each side) and raters
    (shared): the same people rate both sides, so their leniency cancels in the change."""
    human = {r.id for r in study.raters() if whose.counts(r)}
    ends = {name: _end_bins(study, name) for name in (*before, *after)}
    item, rater, value, group = [], [], [], []
    for row in study.ratings():
        if row.repeat or row.rating is None or row.rater_id not in human or row.bin not in ends.get(row.system, ()):
            continue
        side = 0 if row.system in before else 1
        item.append(row.item_id), rater.append(row.rater_id), value.append(row.rating), group.append(side)
    if 0 not in group or 1 not in group:
        missing = ", ".join(before if 0 not in group else after)
        raise StudyError(f"{study.directory}: no readable ratings at the end of {missing}: rate more before comparing")
    means = crossed_bootstrap_draws(item, rater, value, group, draws, seed)
    low, high = percentile_interval(means[:, 1] - means[:, 0], CONFIDENCE)
    v, g = np.asarray(value, dtype=float), np.asarray(group)
    b_end, a_end = float(v[g == 0].mean()), float(v[g == 1].mean())
    method = (f"{CONFIDENCE:.0%} bootstrap of {study.directory}'s ratings over the last quarter of each side's step "
              f"bins, items (within each side) and raters (shared) resampled together, {draws} draws; "
              f"{int((g == 0).sum())} ratings before ({', '.join(before)}), {int((g == 1).sum())} after "
              f"({', '.join(after)}); {whose.describe()}")
    return TruthChange("reward/gold_mean", f"mean rating of {study.directory}", None, b_end, a_end, a_end - b_end,
                       low, high, bool(low > 0 or high < 0), method)


def rated_truth_change(study: Study, before: list[str], after: list[str], before_tables: list[MetricTable],
                       after_tables: list[MetricTable], whose: Whose = PEOPLE) -> TruthChange:
    """`compare --truth` on a rating study: each run's rated truth attached to its table (the
    gold rules read it) and the change of the mean rating measured (`truth_change`)."""
    for tables, systems in ((before_tables, before), (after_tables, after)):
        for table, system in zip(tables, systems):
            check_rates_run(study, system, table)
            attach_truth(table, rated_truth(study, system, whose))
    return truth_change(study, before, after, whose=whose)
