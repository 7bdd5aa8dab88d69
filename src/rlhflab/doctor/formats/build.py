"""Rows into a `MetricTable`, once for every format: the dialect chosen by the names the
rows hold, names renamed and merged, repeated steps merged, scales applied, units
converted (or kept and said), per-token and per-sequence twins derived, evaluation rows
kept apart, what could not be mapped listed. A user's `--map` applies on top of any
format. What a format *is* (its container, its dialect) is declared in `spec.py`.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from fnmatch import fnmatchcase
from typing import Any, Mapping

from rlhflab.doctor.formats.spec import (
    CANONICAL,
    Column,
    Dialect,
    LogFormat,
    LogFormatError,
    RawLog,
    Resolver,
    UserMapping,
)
from rlhflab.doctor.metrics import EVAL_PREFIX, KNOWN, PRETRAIN_METRICS, REWARD_FUNCTION_PREFIX, REWARD_METRICS, canonical_unit
from rlhflab.doctor.settings import SETTING_NAMES, RunSettings
from rlhflab.doctor.table import MetricTable, Series
from rlhflab.doctor.units import Unit

_FALLBACK = "\0fallback:"  # a series name no log can use

# Marker names a file open to any trainer (a CSV, TensorBoard events) must hold before a
# trainer's dialect claims it: one name alone (`reward_std`, `policy_loss`, `accuracy`) is
# as likely a researcher's own loop using a common spelling, whose names the resolver then
# reads one by one. A file of one trainer family (a trainer_state.json is transformers') needs
# one to tell that family's trainers apart.
MIN_MARKERS = 2


def choose_dialect(names: set[str], candidates: tuple[Dialect, ...], min_markers: int = 1) -> Dialect:
    """The candidate whose markers the names hold most of, at least `min_markers` of them
    (ties: the first), else the first candidate when there is one only, else canonical
    names."""
    if len(candidates) == 1:
        return candidates[0]
    best, hits = CANONICAL, min_markers - 1
    for dialect in candidates:
        stripped = {_strip(n, dialect.prefixes) for n in names}
        count = len(dialect.markers & (names | stripped))
        if count > hits:
            best, hits = dialect, count
    return best


def _strip(name: str, prefixes: tuple[str, ...]) -> str:
    for prefix in prefixes:
        if name.startswith(prefix):
            return name[len(prefix):]
    return name


@dataclass
class _NamePlan:
    """What each name of a log becomes: its metric (a fallback column's under `_FALLBACK`),
    the unit and estimator each metric is logged in (a fallback's apart, used only if it
    fills its metric), and the names left unknown or kept as evaluation."""

    rename: dict[str, str] = field(default_factory=dict)
    units: dict[str, Unit] = field(default_factory=dict)
    estimators: dict[str, str] = field(default_factory=dict)
    fallback_units: dict[str, Unit] = field(default_factory=dict)
    fallback_estimators: dict[str, str] = field(default_factory=dict)
    unknown: set[str] = field(default_factory=set)
    evaluation: set[str] = field(default_factory=set)


def _plan_names(names: set[str], columns: Mapping[str, Column], dialect: Dialect) -> _NamePlan:
    """The user's mapping and the dialect's columns first, then canonical names as they
    are, then evaluation names; anything else is unknown, never guessed."""
    plan = _NamePlan()
    for name in sorted(names):
        key = name if name in columns else _strip(name, dialect.prefixes)
        column = columns.get(key)
        if column is not None:
            plan.rename[name] = _FALLBACK + column.metric if column.fallback else column.metric
            units = plan.fallback_units if column.fallback else plan.units
            estimators = plan.fallback_estimators if column.fallback else plan.estimators
            if column.unit is not None:
                units[column.metric] = column.unit
            if column.estimator is not None:
                estimators[column.metric] = column.estimator
        elif key in KNOWN:
            plan.rename[name] = key
        elif name.startswith(dialect.eval_prefixes):  # an empty tuple of prefixes matches nothing
            plan.rename[name] = EVAL_PREFIX + _strip(name, dialect.eval_prefixes)
            plan.evaluation.add(plan.rename[name])
        else:
            plan.unknown.add(name)
    return plan


def _resolve_fallbacks(table: MetricTable, plan: _NamePlan) -> None:
    """A fallback column fills its metric only when no other column did (with its unit and
    estimator); its NaNs count then only."""
    for metric in [m for m in table.series if m.startswith(_FALLBACK)]:
        series, target = table.series.pop(metric), metric.removeprefix(_FALLBACK)
        steps = table.non_finite.pop(metric, [])
        if table.get(target) is None and target not in table.non_finite:
            table.series[target] = series
            if steps:
                table.non_finite[target] = steps
            if target in plan.fallback_units:
                plan.units[target] = plan.fallback_units[target]
            if target in plan.fallback_estimators:
                plan.estimators[target] = plan.fallback_estimators[target]
    for metric in [m for m in table.non_finite if m.startswith(_FALLBACK)]:  # a fallback column all NaN
        steps = table.non_finite.pop(metric)
        table.non_finite.setdefault(metric.removeprefix(_FALLBACK), steps)


def build_table(raw: RawLog, fmt: LogFormat, mapping: UserMapping, source: str,
                dialects: Mapping[str, Dialect] | None = None, guess: Resolver | None = None) -> MetricTable:
    """Rename, merge, scale and convert a format's rows into a `MetricTable` in the
    dialect of the trainer that wrote them. A column the user maps is read even when the
    dialect ignores it. A step logged twice (a resumed run, one line per rank) keeps its
    last value of each metric, and the table says how many steps repeated. A log no
    dialect claims has its names read by `guess` (`resolver.resolve`), each guess kept on
    the table; the user's mapping overrides them."""
    step_key = mapping.step_key or raw.step_key
    names = {name for record in raw.records for name in record} - {step_key}
    dialects = dialects or {}
    if raw.dialect in dialects:
        dialect = dialects[raw.dialect]
    else:
        dialect = choose_dialect(names, fmt.dialects or tuple(dialects.values()) or (CANONICAL,),
                                 1 if fmt.dialects else MIN_MARKERS)
    guesses = []
    if guess is not None and dialect is CANONICAL:
        unclaimed = names - set(mapping.columns) - KNOWN
        guesses = guess(unclaimed, lambda name: _numbers(raw.records, name), names)
    guessed = {g.name: g.column for g in guesses if g.column is not None}
    columns = {**dialect.columns, **guessed, **mapping.columns}
    ignored = _ignored_names(names | {raw.step_key}, dialect, raw.step_key) - set(mapping.columns) - {step_key}
    plan = _plan_names(names - ignored, columns, dialect)
    plan.evaluation |= {metric for name, metric in plan.rename.items() if name in guessed
                        and metric.startswith(EVAL_PREFIX)}
    ignored = ignored | _drop_collisions(plan.rename, raw.records, set(mapping.columns), raw.notes,
                                         set(guessed) - set(mapping.columns))
    _check_steps(raw.records, step_key, source)
    scales = {name: columns[k].scale for name in plan.rename
              if (k := name if name in columns else _strip(name, dialect.prefixes)) in columns
              and columns[k].scale != 1.0}
    rows, repeated = _merge_repeated_steps(raw.records, step_key, ignored)
    table = MetricTable.from_records(rows, source=source, rename=plan.rename, step_key=step_key,
                                     names=names - ignored, scales=scales)
    _resolve_fallbacks(table, plan)
    if raw.eval_records:
        plan.evaluation |= _add_evaluation(table, raw.eval_records, step_key, columns, dialect)
    table.unknown = sorted(plan.unknown)
    table.notes = list(raw.notes)
    if repeated:
        table.notes.append(f"{repeated} step(s) were logged more than once (a resumed run, or one line per "
                           "process): the last value of each metric was kept")
    table.evaluation = sorted(plan.evaluation)
    table.guesses = [{"name": g.name, "taken_for": g.metric, "why": g.why} for g in guesses]
    table.estimators = plan.estimators
    table.format, table.vocabulary, table.verifiable = fmt.name, dict(dialect.vocabulary), dialect.verify
    table.repeated_steps, table.one_line_per_step = repeated, dialect.one_line_per_step
    unknown_settings = set(raw.settings) - set(SETTING_NAMES)
    if unknown_settings:
        raise ValueError(f"format {fmt.name}: unknown RunSettings field(s) {sorted(unknown_settings)}")
    table.settings = RunSettings(**{"trainer": dialect.name, **raw.settings,
                                    "has_gold": table.get("reward/gold_mean") is not None})
    convert_units(table, plan.units)
    adopt_held_out(table, dialect.held_out)
    if dialect.interpret is not None:
        dialect.interpret(table, frozenset(names))
    derive_equivalents(table)
    for metric, estimator in sorted(table.estimators.items()):
        if metric in table.series:
            table.notes.append(f"{metric} is the {estimator} estimator as logged (batch means of different "
                               "estimators are not converted into one another)")
    table.steps_read = _training_steps(table)
    return table


def adopt_held_out(table: MetricTable, patterns: tuple[re.Pattern[str], ...]) -> None:
    """The first column matching one of `patterns` (in their order, then by name) becomes
    `reward/gold_mean` when the log has no gold column of its own, with a note naming it."""
    if table.get("reward/gold_mean") is not None:
        return
    for pattern in patterns:
        matches = sorted(name for name in table.series if pattern.match(name))
        if not matches:
            continue
        table.series["reward/gold_mean"] = table.series.pop(matches[0])
        table.settings = replace(table.settings, has_gold=True)
        table.unknown = [n for n in table.unknown if n != matches[0]]
        table.evaluation = [n for n in table.evaluation if n != matches[0]]
        others = f"; not read: {', '.join(matches[1:])}" if matches[1:] else ""
        table.notes.append(f"reward/gold_mean is the held-out score {matches[0]}{others}")
        return


def _drop_collisions(rename: dict[str, str], records: list[dict[str, Any]], preferred: set[str],
                     notes: list[str], guessed: set[str] = frozenset()) -> set[str]:
    """Two names of one log mapped to the same metric (two validation sets, `lr` and
    `learning_rate`): a name logged as the metric (canonical, the trainer's, the user's)
    before one the resolver guessed, then the one with the most finite values (ties: the
    user's mapping, then the first by name); the others are not read and the notes say
    so, so that no series mixes two sources. Returns the names dropped."""
    by_metric: dict[str, list[str]] = {}
    for name, metric in rename.items():
        by_metric.setdefault(metric, []).append(name)
    dropped: set[str] = set()
    for metric, names in by_metric.items():
        if len(names) < 2:
            continue
        counts = {n: sum(1 for r in records if _finite(r.get(n))) for n in names}
        kept, *others = sorted(names, key=lambda n: (n in guessed, -counts[n], n not in preferred, n))
        for name in others:
            del rename[name]
            dropped.add(name)
        notes.append(f"{metric.removeprefix(_FALLBACK)} read from {kept}; also mapped to it and not read: "
                     f"{', '.join(others)}")
    return dropped


def _numbers(records: list[dict[str, Any]], name: str) -> list[float]:
    """The finite numbers a name holds, in row order."""
    return [float(v) for r in records if _finite(v := r.get(name))]


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _ignored_names(names: set[str], dialect: Dialect, step_key: str) -> set[str]:
    """The names (as logged, with or without a logger's prefix) the dialect ignores."""
    exact = {p for p in dialect.ignored if "*" not in p}
    globs = [p for p in dialect.ignored if "*" in p]
    ignored = {step_key}
    for name in names:
        bare = _strip(name, dialect.prefixes)
        if name in dialect.columns or bare in dialect.columns:
            continue
        if bare in exact or name in exact or any(fnmatchcase(bare, g) for g in globs):
            ignored.add(name)
    return ignored


def _merge_repeated_steps(records: list[dict[str, Any]], step_key: str,
                          ignored: set[str]) -> tuple[list[dict[str, Any]], int]:
    """The rows with a step's repeats merged into one (the last value of each name wins;
    rows without a step never merge). Returns the rows and how many steps repeated a name
    that is read."""
    rows: list[dict[str, Any]] = []
    position: dict[Any, int] = {}
    repeated: set[Any] = set()
    for record in records:
        step = record.get(step_key, position)  # a row without a step: a key no step can equal
        if step is position or step not in position:
            if step is not position:
                position[step] = len(rows)
            rows.append(record)
            continue
        earlier = rows[position[step]]
        if (earlier.keys() & record.keys()) - ignored - {step_key}:
            repeated.add(step)
        rows[position[step]] = {**earlier, **record}
    return rows, len(repeated)


def _add_evaluation(table: MetricTable, records: list[dict[str, Any]], step_key: str,
                    columns: Mapping[str, Column], dialect: Dialect) -> set[str]:
    """Evaluation rows (TRL's `eval_*`) as `eval/<name>` series, never mixed with training ones."""
    rows = []
    for index, record in enumerate(records):
        row = {step_key: record.get(step_key, index)}
        for name, value in record.items():
            if name == step_key or name in dialect.ignored:
                continue
            bare = _strip(name, dialect.eval_prefixes)
            column = columns.get(bare)
            row[EVAL_PREFIX + (column.metric if column else bare)] = value
        rows.append(row)
    evaluation = MetricTable.from_records(rows, step_key=step_key)
    table.series.update(evaluation.series)
    return set(evaluation.series)


# Metrics of the RL stage's steps: not evaluations (gold or held-out), not the reward
# model's or the stage-1 model's own training steps, not names nobody understood.
TRAINING_METRICS = frozenset(KNOWN - set(REWARD_METRICS) - set(PRETRAIN_METRICS) - {"reward/gold_mean"})


def _training_steps(table: MetricTable) -> int:
    """Distinct RL steps at which some understood training metric was logged."""
    distinct = {id(s.steps): s.steps for name, s in table.series.items()  # columns share their steps' tuple
                if name in TRAINING_METRICS or name.startswith(REWARD_FUNCTION_PREFIX)}
    return len(set().union(*distinct.values()))


def _check_steps(records: list[dict[str, Any]], step_key: str, source: str) -> None:
    """Every row's step, when it has one, is a whole number (rows without one take their index)."""
    if set(map(type, [record.get(step_key, 0) for record in records])) <= {int}:
        return  # the usual log, checked at C speed
    for number, record in enumerate(records, start=1):
        step = record.get(step_key)
        if step is None and step_key not in record:
            continue
        if isinstance(step, bool) or not isinstance(step, (int, float)) or not math.isfinite(step) or step != int(step):
            raise LogFormatError(f"{source}: row {number}: step {step!r} ('{step_key}') is not a whole number")


# --- units ---------------------------------------------------------------------------------
def per_step(numerator: Series, denominator: Series, operation) -> Series:
    """`operation(n, d)` at the steps both series have."""
    by_step = dict(zip(denominator.steps, denominator.values))
    pairs = [(s, operation(v, by_step[s])) for s, v in zip(numerator.steps, numerator.values)
             if s in by_step and by_step[s] != 0]
    return Series.from_pairs(pairs)


def convert_units(table: MetricTable, logged: dict[str, Unit]) -> None:
    """Convert each series whose logged unit differs from its canonical one, where the log
    holds what the conversion needs; otherwise keep it in the logged unit and say so."""
    for name, unit in logged.items():
        target = canonical_unit(name)
        series = table.get(name)
        if series is None or target is None or unit == target:
            continue
        converted, how = _convert(table, series, unit, target)
        if converted is None:
            table.units[name] = unit
            table.notes.append(f"{name} is in {unit}, not {target}: {how}; only rules that compare it with its own "
                               "start read it")
        else:
            table.series[name] = converted
            table.notes.append(f"{name} converted from {unit} to {target} ({how})")


def _convert(table: MetricTable, series: Series, unit: Unit, target: Unit) -> tuple[Series | None, str]:
    length = table.get("response/length_mean")
    batch = table.settings.batch_size
    if (unit, target) == ("percent", "fraction"):
        return series.scaled(0.01), "divided by 100"
    if (unit, target) == ("fraction", "percent"):
        return series.scaled(100.0), "multiplied by 100"
    if (unit, target) == ("nats/sequence", "nats/token"):
        if length is None:
            return None, "no response/length_mean to divide by"
        return per_step(series, length, lambda v, n: v / n), "divided by response/length_mean"
    if (unit, target) == ("nats/token", "nats/sequence"):
        if length is None:
            return None, "no response/length_mean to multiply by"
        return per_step(series, length, lambda v, n: v * n), "multiplied by response/length_mean"
    if (unit, target) == ("count", "fraction"):
        if not batch:
            return None, "the log does not tell the batch size"
        return series.scaled(1.0 / batch), f"divided by the batch size {batch}"
    return None, f"no conversion from {unit} to {target}"


# Pairs of canonical metrics that are the same quantity in two units: (per sequence, per token).
PER_SEQUENCE_AND_PER_TOKEN = (("kl/mean", "kl/token_mean"),)


def derive_equivalents(table: MetricTable) -> None:
    """Fill a per-sequence metric from its per-token twin (times the mean response length)
    or the reverse, where the log has one and the length, so that rules written in either
    unit read it; each derivation is noted and keeps its estimator."""
    length = table.get("response/length_mean")
    if length is None:
        return
    for per_sequence, per_token in PER_SEQUENCE_AND_PER_TOKEN:
        seq, tok = table.get(per_sequence), table.get(per_token)
        if seq is None and tok is not None:
            table.series[per_sequence] = per_step(tok, length, lambda v, n: v * n)
            source, target = per_token, per_sequence
            table.derived[per_sequence] = per_token
        elif tok is None and seq is not None:
            table.series[per_token] = per_step(seq, length, lambda v, n: v / n)
            source, target = per_sequence, per_token
            table.derived[per_token] = per_sequence
        else:
            continue
        if source in table.estimators:
            table.estimators[target] = table.estimators[source]
        table.notes.append(f"{target} derived from {source} and response/length_mean (the mean length stands in "
                           "for each response's own)")
