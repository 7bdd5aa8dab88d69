"""A study read as a run's truth, whatever its kind: the doctor's `--truth STUDY[:SYSTEM]`
(and a rating study found in a run), and compare's `--truth STUDY`. The kind says how
(`StudyKind.rated_truth`, `StudyKind.truth_change`); a kind with no rated truth is refused
where a rated truth is asked for."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from rlhflab.doctor import MetricTable, RatedTruth, TruthChange
from rlhflab.studies.design import StudyError
from rlhflab.studies.kinds import KINDS, kind_of, open_study
from rlhflab.studies.store import DATABASE_FILE
from rlhflab.studies.truth import check_rates_run, match_system, parse_truth
from rlhflab.studies.whose import answered_by


def _rating_kinds() -> str:
    return ", ".join(f"rlhflab {k.command}" for k in KINDS.values() if k.rated_truth is not None)


def named_truth(log: Path, spec: str, table: MetricTable, answers: str | None = None) -> RatedTruth:
    """`--truth STUDY[:SYSTEM]` for `log` (read as `table`); a study that cannot be read, whose
    answers are no rating of a run's steps, or that rates another run (`check_rates_run`) is a
    StudyError."""
    directory, system = parse_truth(spec)
    try:
        study = open_study(directory)
        kind = kind_of(study.design)
        if kind.rated_truth is None:
            raise StudyError(f"{directory}: a {kind.name} study compares systems; the doctor's --truth reads a study "
                             f"that rates one run over its steps ({_rating_kinds()}); compare runs with it instead: "
                             f"rlhflab compare BEFORE -- AFTER --truth {directory}")
        matched = match_system(study, log, system)
        check_rates_run(study, matched, table)
        return kind.rated_truth(study, matched, answered_by(study, answers))
    except sqlite3.DatabaseError as err:
        raise StudyError(f"{directory}: not a readable study ({err})") from None


def found_truth(run: Path, table: MetricTable) -> RatedTruth | None:
    """For an rlhflab run with no gold of its own, the first study in `RUN/studies/` that
    rates it; one that cannot be read, or is not rated yet, is noted in `table` and left."""
    if table.get("reward/gold_mean") is not None:
        return None
    for directory in sorted(p.parent for p in (Path(run) / "studies").glob(f"*/{DATABASE_FILE}")):
        try:
            study = open_study(directory)
            kind = kind_of(study.design)
            if kind.rated_truth is not None:
                matched = match_system(study, run)
                check_rates_run(study, matched, table)
                return kind.rated_truth(study, matched, answered_by(study, None))
        except (StudyError, sqlite3.DatabaseError) as err:
            table.notes.append(f"the rating study {directory} was not read as the truth: {err}")
    return None


def study_truth_change(directory: Path, before_runs: list[str], after_runs: list[str],
                       before: list[MetricTable], after: list[MetricTable], answers: str | None = None) -> TruthChange:
    """`compare --truth STUDY`: each run matched to a system of the study, and the change
    measured as the study's kind measures it (a rating study's rated truth is also attached
    to each run's table). A run that matches no system, or runs before and after that match
    the same one, are a StudyError. `answers`: whose answers count (studies/whose.py; its default
    when None)."""
    study = open_study(directory)
    hint = "name each system as its run's directory or log file (rlhflab rate NAME=PATH, rlhflab pair NAME=PATH)"
    sides = [[match_system(study, Path(r), how_to_name=hint) for r in runs] for runs in (before_runs, after_runs)]
    if set(sides[0]) & set(sides[1]):
        raise StudyError(f"{directory}: the runs before and after match the same system "
                         f"({', '.join(sorted(set(sides[0]) & set(sides[1])))}); give runs that are systems of "
                         "their own (rlhflab rate NAME=RUN ... --add)")
    return kind_of(study.design).truth_change(study, sides[0], sides[1], before, after, answered_by(study, answers))
