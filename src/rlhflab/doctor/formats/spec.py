"""What a log format is, in two parts:

- a **container** (`LogFormat`): how to recognise a kind of file by its content and read
  its rows (a `trainer_state.json`, TensorBoard events, a console log, a CSV...);
- a **dialect** (`Dialect`): a trainer's vocabulary, whatever container it was written
  to: its names -> canonical names with the unit of each, the bookkeeping names it logs,
  what its names tell of the run's settings, its known artefacts, and how it spells each
  setting (so that fixes read in the user's own vocabulary).

A container either knows its trainer (veRL's console lines are veRL's) or leaves the
dialect to the names its rows hold (TensorBoard events can be TRL's, OpenRLHF's, trlX's).
Turning rows into a `MetricTable` is done once for every format, in `build.py`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from rlhflab.doctor.errors import LogFormatError as LogFormatError  # every reader raises it
from rlhflab.doctor.table import MetricTable
from rlhflab.doctor.units import Unit


@dataclass(frozen=True)
class Column:
    """Where one of a trainer's names goes: a canonical metric, the unit the trainer logs
    it in (None: the canonical unit), a factor it was logged with (veRL's `lr(1e-4)`),
    the KL estimator it uses (k1, k2, k3: batch means of different estimators are not
    converted into one another), and whether it only fills the metric when no other
    column does."""

    metric: str
    unit: Unit | None = None
    scale: float = 1.0
    fallback: bool = False
    estimator: str | None = None


@dataclass(frozen=True)
class RawLog:
    """A log's rows as its trainer wrote them, and what the reader learnt beside them."""

    records: list[dict[str, Any]]  # one dict per logged row: {step_key: step, their_name: value, ...}
    settings: dict[str, Any] = field(default_factory=dict)  # RunSettings fields
    step_key: str = "step"
    notes: list[str] = field(default_factory=list)
    dialect: str | None = None  # the trainer, when the container tells it; else the names decide
    eval_records: list[dict[str, Any]] = field(default_factory=list)  # evaluation rows, kept apart
    # A console holding several runs (formats/runs.py): the record index where each later one
    # starts, and each run's settings when its config was printed.
    run_starts: list[int] = field(default_factory=list)
    run_settings: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class UserMapping:
    """`--map`: the user's columns -> canonical metrics (with units), and the step column."""

    columns: Mapping[str, Column] = field(default_factory=dict)
    step_key: str | None = None
    sample_columns: Mapping[str, str] = field(default_factory=dict)  # a sample file's column -> sample field

    def for_samples(self) -> dict[str, str]:
        """A sample file's columns -> sample fields: the log's step column names theirs too."""
        return {**({self.step_key: "step"} if self.step_key else {}), **self.sample_columns}


@dataclass(frozen=True)
class Dialect:
    """A trainer's vocabulary (module docstring). `markers` are names only this trainer
    logs: a container that does not know its trainer gives its rows to the dialect whose
    markers they hold most of. `interpret` reads what the names tell beyond their values
    (GRPO logs no `kl` when beta = 0) and removes known artefacts, with a note each."""

    name: str  # the trainer as diagnoses name it ("trl-ppo", "verl", ...)
    description: str
    handles: str = ""  # the units and artefacts of its names the reading handles (docs/doctor.md's trainer table)
    columns: Mapping[str, Column] = field(default_factory=dict)
    markers: frozenset[str] = frozenset()
    ignored: frozenset[str] = frozenset()  # bookkeeping names with no training signal (globs: `timing/*`)
    prefixes: tuple[str, ...] = ()  # prefixes a logger adds to the trainer's names (transformers' `train/`)
    eval_prefixes: tuple[str, ...] = ()  # names of evaluation metrics, kept apart from training ones
    vocabulary: Mapping[str, str] = field(default_factory=dict)  # RunSettings field -> the trainer's key
    # Columns (as read: evaluation ones under `eval/`) that hold a held-out score, in order of
    # preference: the first the log has becomes `reward/gold_mean`, the run's truth.
    held_out: tuple[re.Pattern[str], ...] = ()
    interpret: Callable[[MetricTable, frozenset[str]], None] | None = None
    verify: bool = False  # `rlhflab verify` can rerun a run of this trainer
    # Its writer logs each step once, across resumes too (one process writes; a resume drops
    # what was logged after its checkpoint): a step logged twice is then a broken resume.
    one_line_per_step: bool = False


# Logs in canonical names only (a CSV written for the doctor, rlhflab's own metrics files).
CANONICAL = Dialect("canonical", "canonical names (docs/metrics.md), or any names with --map",
                    "names it does not know read by the resolver (below), each guess said")


# Reads the names of a log no dialect claims (`resolver.resolve`): names, each name's numbers,
# and all the log's names (neighbours) -> guesses with `name`, `metric`, `why` and `column`.
Resolver = Callable[[set[str], Callable[[str], list[float]], set[str]], list[Any]]


@dataclass(frozen=True)
class LogFormat:
    """A container: how to recognise its files and read their rows, and the dialects its
    rows can be in (one: the container tells the trainer; several: the names decide;
    none: any trainer's, the names decide among all)."""

    name: str
    description: str  # the files it reads, for --list-formats
    recognise: Callable[[Path], bool]  # by content, cheaply
    read: Callable[[Path, UserMapping], RawLog]
    dialects: tuple[Dialect, ...] = ()
    reads: str = ""  # what it reads, in full (docs/doctor.md's file-kind table; the description when empty)
