"""What a log format is: how to recognise its logs, how to read their rows, its names ->
canonical names with the unit of each, where the run's settings are, and how its trainer
spells each setting (so that fixes read in the user's own vocabulary).

A format is data plus two small functions; turning its rows into a `MetricTable`
(renaming, scaling, converting units, listing what it could not map) is done once, here,
for every format, and a user's `--map` applies on top of any of them.
"""

from __future__ import annotations

import math
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
    """Rename, scale and convert a format's rows into a `MetricTable`: the user's mapping
    first, then the format's columns, then canonical names as they are; every other name
    is listed as unknown, never guessed. A column the user maps is read even when the
    format ignores it."""
    columns = {**fmt.columns, **mapping.columns}
    step_key = mapping.step_key or raw.step_key
    ignored = (fmt.ignored | {raw.step_key}) - set(mapping.columns) - {step_key}
    rename: dict[str, str] = {}
    logged: dict[str, Unit] = {}  # canonical metric -> the unit its column is logged in
    fallback_units: dict[str, Unit] = {}
    unknown: set[str] = set()
    names = {name for record in raw.records for name in record} - {step_key} - ignored
    for name in names:
        column = columns.get(name)
        if column is not None:
            rename[name] = _FALLBACK + column.metric if column.fallback else column.metric
            if column.unit is not None:
                (fallback_units if column.fallback else logged)[column.metric] = column.unit
        elif name not in KNOWN:
            unknown.add(name)
    _check_steps(raw.records, step_key, source)
    scales = {name: columns[name].scale for name in rename if columns[name].scale != 1.0}
    rows = [{k: _scaled(v, scales.get(k)) for k, v in record.items() if k not in ignored} for record in raw.records]
    table = MetricTable.from_records(rows, source=source, rename=rename, step_key=step_key)
    # A fallback column fills its metric only when no other column did; its NaNs count then only.
    for metric in [m for m in table.series if m.startswith(_FALLBACK)]:
        series, target = table.series.pop(metric), metric.removeprefix(_FALLBACK)
        steps = table.non_finite.pop(metric, [])
        if table.get(target) is None and target not in table.non_finite:
            table.series[target] = series
            if steps:
                table.non_finite[target] = steps
            if target in fallback_units:
                logged[target] = fallback_units[target]
    for metric in [m for m in table.non_finite if m.startswith(_FALLBACK)]:  # a fallback column all NaN
        steps = table.non_finite.pop(metric)
        table.non_finite.setdefault(metric.removeprefix(_FALLBACK), steps)
    table.unknown = sorted(unknown)
    table.notes = list(raw.notes)
    unknown_settings = set(raw.settings) - set(SETTING_NAMES)
    if unknown_settings:
        raise ValueError(f"format {fmt.name}: unknown RunSettings field(s) {sorted(unknown_settings)}")
    table.settings = RunSettings(**{"trainer": fmt.name, **raw.settings,
                                    "has_gold": table.get("reward/gold_mean") is not None})
    convert_units(table, logged)
    return table


def _check_steps(records: list[dict[str, Any]], step_key: str, source: str) -> None:
    """Every row's step, when it has one, is a whole number (rows without one take their index)."""
    for number, record in enumerate(records, start=1):
        step = record.get(step_key)
        if step is None and step_key not in record:
            continue
        if isinstance(step, bool) or not isinstance(step, (int, float)) or not math.isfinite(step) or step != int(step):
            raise LogFormatError(f"{source}: row {number}: step {step!r} ('{step_key}') is not a whole number")


def _scaled(value: Any, scale: float | None) -> Any:
    if scale is None or isinstance(value, bool) or not isinstance(value, (int, float)):
        return value
    return value * scale
