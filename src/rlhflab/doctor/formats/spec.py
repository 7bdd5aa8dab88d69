"""What a log format is: how to recognise its logs, how to read their rows, its names ->
canonical names with the unit of each, where the run's settings are, and how its trainer
spells each setting (so that fixes read in the user's own vocabulary).

A format is data plus two small functions; turning its rows into a `MetricTable`
(renaming, scaling, converting units, listing what it could not map) is done once, here,
for every format, and a user's `--map` applies on top of any of them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from rlhflab.doctor.metrics import KNOWN
from rlhflab.doctor.settings import SETTING_NAMES, RunSettings
from rlhflab.doctor.table import MetricTable, convert_units
from rlhflab.doctor.units import Unit

_FALLBACK = "\0fallback:"  # a series name no log can use


class LogFormatError(ValueError):
    """A log is not in the format its reader expects, or no format recognises it."""


@dataclass(frozen=True)
class Column:
    """Where one of a trainer's names goes: a canonical metric, the unit the trainer logs
    it in (None: the canonical unit), a factor it was logged with (veRL's `lr(1e-4)`),
    and whether it only fills the metric when no other column does."""

    metric: str
    unit: Unit | None = None
    scale: float = 1.0
    fallback: bool = False


@dataclass(frozen=True)
class RawLog:
    """A log's rows as its trainer wrote them, and the settings it tells."""

    records: list[dict[str, Any]]  # one dict per logged row: {step_key: step, their_name: value, ...}
    settings: dict[str, Any] = field(default_factory=dict)  # RunSettings fields
    step_key: str = "step"
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class UserMapping:
    """`--map`: the user's columns -> canonical metrics (with units), and the step column."""

    columns: Mapping[str, Column] = field(default_factory=dict)
    step_key: str | None = None


@dataclass(frozen=True)
class LogFormat:
    name: str
    description: str  # the trainer and files it reads, for --list-formats
    recognise: Callable[[Path], bool]  # by content, cheaply
    read: Callable[[Path, UserMapping], RawLog]
    columns: Mapping[str, Column] = field(default_factory=dict)
    ignored: frozenset[str] = frozenset()  # bookkeeping columns with no training signal
    vocabulary: Mapping[str, str] = field(default_factory=dict)  # RunSettings field -> the trainer's key
    verify: bool = False  # `rlhflab verify` can rerun a run of this format


def build_table(raw: RawLog, fmt: LogFormat, mapping: UserMapping, source: str) -> MetricTable:
    """Rename, scale and convert a format's rows into a `MetricTable`: the format's columns,
    then the user's mapping on top, then canonical names as they are; every other name is
    listed as unknown, never guessed."""
    columns = {**fmt.columns, **mapping.columns}
    step_key = mapping.step_key or raw.step_key
    rename: dict[str, str] = {}
    logged: dict[str, Unit] = {}  # canonical metric -> the unit its column is logged in
    fallback_units: dict[str, Unit] = {}
    unknown: set[str] = set()
    names = {name for record in raw.records for name in record} - {step_key}
    for name in names:
        column = columns.get(name)
        if column is not None:
            rename[name] = _FALLBACK + column.metric if column.fallback else column.metric
            if column.unit is not None:
                (fallback_units if column.fallback else logged)[column.metric] = column.unit
        elif name not in KNOWN and name not in fmt.ignored:
            unknown.add(name)
    rows = [{k: v for k, v in record.items() if k not in fmt.ignored} for record in raw.records]
    table = MetricTable.from_records(rows, source=source, rename=rename, step_key=step_key)
    for name in names & columns.keys():
        column = columns[name]
        if column.scale != 1.0 and not column.fallback and table.get(column.metric) is not None:
            table.series[column.metric] = table.series[column.metric].scaled(column.scale)
    # A fallback column fills its metric only when no other column did.
    for metric in [m for m in table.series if m.startswith(_FALLBACK)]:
        series, target = table.series.pop(metric), metric.removeprefix(_FALLBACK)
        if table.get(target) is None:
            table.series[target] = series
            if target in fallback_units:
                logged[target] = fallback_units[target]
    table.non_finite = {m.removeprefix(_FALLBACK): steps for m, steps in table.non_finite.items()}
    table.unknown = sorted(unknown)
    table.notes = list(raw.notes)
    settings = {k: v for k, v in raw.settings.items() if k in SETTING_NAMES}
    table.settings = RunSettings(**{"trainer": fmt.name, **settings,
                                    "has_gold": table.get("reward/gold_mean") is not None})
    convert_units(table, logged)
    return table
