"""Log formats: containers (how a kind of file is recognised and read) and dialects (a
trainer's names, units, settings and vocabulary for fixes), each declared once
(`spec.py`). A container that knows its trainer reads in its dialect; the others
(TensorBoard, MLflow, W&B exports, trainer_state.json, plain tables) give their rows to
the dialect whose names they hold.

Adding a trainer is one module with its `Dialect` and a line in `DIALECTS`; adding a
kind of file is one module with its `LogFormat` and a line in `FORMATS`.
"""

from __future__ import annotations

import gc
from contextlib import contextmanager
from dataclasses import asdict, replace
from pathlib import Path

from rlhflab.doctor.findings import Change, Diagnosis, Finding, Fix
from rlhflab.doctor.formats import (
    areal,
    deepspeed_chat,
    hf_console,
    mlflow,
    nemo_rl,
    notebook,
    openrlhf,
    prime_rl,
    rlhflab,
    roll,
    sample_files,
    skyrl,
    slime,
    table,
    tensorboard,
    torchforge,
    trainer_state,
    trl,
    trlx,
    verl,
    wandb_csv,
    wandb_run,
)
from rlhflab.doctor.formats.build import build_table, choose_dialect
from rlhflab.doctor.formats.launch import Launcher
from rlhflab.doctor.formats.resolver import resolve
from rlhflab.doctor.formats.runs import choose_run
from rlhflab.doctor.formats.spec import (
    CANONICAL,
    Column,
    Dialect,
    LogFormat,
    LogFormatError,
    RawLog,
    UserMapping,
)
from rlhflab.doctor.sample_measures import attach_samples
from rlhflab.doctor.table import MetricTable

# Every trainer's vocabulary; containers that do not know their trainer choose among these.
DIALECTS: tuple[Dialect, ...] = (
    rlhflab.DIALECT, *trl.DIALECTS, verl.DIALECT, openrlhf.DIALECT, nemo_rl.DIALECT, trlx.DIALECT,
    deepspeed_chat.DIALECT, prime_rl.DIALECT, slime.DIALECT, areal.DIALECT, skyrl.DIALECT, roll.DIALECT,
    torchforge.DIALECT, CANONICAL,
)
DIALECTS_BY_NAME: dict[str, Dialect] = {d.name: d for d in DIALECTS}

# Tried in this order: the most specific recognisers first (a console capture can hold
# a printed dict and a veRL line; plain CSV/JSONL comes last).
FORMATS: tuple[LogFormat, ...] = (
    rlhflab.FORMAT, trainer_state.FORMAT, wandb_run.FORMAT, tensorboard.FORMAT, mlflow.FORMAT, verl.JSONL, wandb_csv.FORMAT,
    notebook.FORMAT, verl.CONSOLE, deepspeed_chat.FORMAT, hf_console.FORMAT, table.FORMAT,
)
BY_NAME: dict[str, LogFormat] = {f.name: f for f in FORMATS}

# How each trainer is launched, for an ablation plan for its log (doctor/plan.py).
LAUNCHERS: tuple[Launcher, ...] = (
    *trl.LAUNCHERS, verl.LAUNCHER, openrlhf.LAUNCHER, nemo_rl.LAUNCHER, prime_rl.LAUNCHER,
)

__all__ = ["BY_NAME", "Column", "DIALECTS", "DIALECTS_BY_NAME", "Dialect", "FORMATS", "LogFormat", "LogFormatError",
           "RawLog", "UserMapping", "detect_format", "get_format", "read_history", "read_log", "render_change", "render_fix",
           "verify_command"]


def get_format(name: str) -> LogFormat:
    if name not in BY_NAME:
        raise LogFormatError(f"unknown format {name!r}; known: {', '.join(BY_NAME)} (rlhflab doctor --list-formats)")
    return BY_NAME[name]


def detect_format(path: Path) -> LogFormat:
    """The first format that recognises `path` by its content."""
    path = Path(path)
    if not path.exists():
        raise LogFormatError(f"{path}: no such file or directory")
    for fmt in FORMATS:
        if fmt.recognise(path):
            return fmt
    raise LogFormatError(f"{path}: unknown log format; known formats: "
                         + "; ".join(f"{f.name} ({f.description})" for f in FORMATS)
                         + ". Force one with --format NAME")


def read_log(path: Path, mapping: UserMapping | None = None, format_name: str | None = None,
             samples: Path | None = None, find_samples: bool = True, run: int | None = None) -> MetricTable:
    """The metrics table of a log: its format detected by content, or forced by name; with
    the measures of its sample files (`samples`, else those found beside the log unless
    `find_samples` is off: doctor/samples.py). A console holding several runs gives its
    last, or run `run` (1-based; formats/runs.py)."""
    path = Path(path)
    if not path.exists():
        raise LogFormatError(f"{path}: no such file or directory")
    fmt = get_format(format_name) if format_name else detect_format(path)
    mapping = mapping or UserMapping()
    with _collector_paused():
        raw = choose_run(fmt.read(path, mapping), run, str(path))
        table = build_table(raw, fmt, mapping, str(path), DIALECTS_BY_NAME, guess=resolve)
    if samples is not None:
        sample_sets = [sample_files.read_samples(Path(samples), mapping.for_samples())]
    else:
        sample_sets = sample_files.find_samples(path) if find_samples else []
    attach_samples(table, sample_sets)
    return table


def read_history(rows: list[dict], arguments: object | None = None, mapping: UserMapping | None = None,
                 source: str = "live") -> MetricTable:
    """The metrics table of a running transformers/TRL trainer's `state.log_history`, read
    as its saved trainer_state.json would be, with the settings its arguments hold (e.g.
    `GRPOConfig.beta`) in the trainer's own names (`settings_from_arguments`)."""
    mapping = mapping or UserMapping()
    raw = trainer_state.raw_log_of_rows(rows, mapping, source)
    if arguments is not None:
        names = {name for record in raw.records for name in record}
        dialect = choose_dialect(names, trainer_state.FORMAT.dialects)
        raw = replace(raw, settings={**settings_from_arguments(arguments, dialect), **raw.settings})
    return build_table(raw, trainer_state.FORMAT, mapping, source, DIALECTS_BY_NAME)


def settings_from_arguments(arguments: object, dialect: Dialect) -> dict:
    """`RunSettings` fields read from a trainer's arguments object through the dialect's
    vocabulary (`kl_coef` -> `GRPOConfig.beta` -> `arguments.beta`). Only the names of the
    trainer's own config class are read: the class of the arguments, or the one most of
    the vocabulary names (RLOOConfig shares GRPOConfig's names); plain values only."""
    classes = [entry.split(".")[0] for entry in dialect.vocabulary.values() if "." in entry]
    own = {type(arguments).__name__, max(set(classes), key=classes.count)} if classes else set()
    settings = {}
    for setting, entry in dialect.vocabulary.items():
        cls, _, attribute = entry.partition(".")
        value = getattr(arguments, attribute, None) if cls in own and attribute.isidentifier() else None
        if isinstance(value, (bool, int, float, str)):
            settings[setting] = value
    return settings


@contextmanager
def _collector_paused():
    """Reading a long log allocates millions of small objects and no cycles: the cyclic
    garbage collector would traverse them again and again (2.5 s against 2.1 s, median of 5,
    to read and diagnose a 100,000-row log), so it waits until the table is built."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _value(value) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def render_change(vocabulary: dict[str, str], change: Change) -> str:
    """One change in the vocabulary of the trainer that wrote the log (`ppo.kl_coef=0.4`,
    `GRPOConfig.beta=0.04`); a setting the trainer has no key for keeps its own name. A
    vocabulary entry `KEY=VALUE` is how the trainer turns a switch on where its key takes
    a mode, not true (`rollout.correction=token_truncate`)."""
    key = vocabulary.get(change.setting, change.setting)
    if "=" in key and change.direction == "set" and change.value is True:
        return key
    key = key.split("=", 1)[0]
    if change.direction == "set":
        return f"{key}={_value(change.value)}"
    return f"{change.direction} {key}"


def render_fix(vocabulary: dict[str, str], fix: Fix | None) -> dict | None:
    if fix is None:
        return None
    return {"changes": [render_change(vocabulary, c) for c in fix.changes], "text": fix.text,
            "settings": [asdict(c) for c in fix.changes]}


def verify_command(diagnosis: Diagnosis, finding: Finding) -> str:
    """How to check the fix: `rlhflab verify` for rlhflab's own runs, which it can rerun;
    for any other trainer's log, a rerun in that trainer compared with this one
    (`rlhflab compare`)."""
    fix = finding.fix
    if diagnosis.verifiable:
        if fix is None:
            return f"rlhflab checkup {diagnosis.source}"
        if all(c.direction == "set" for c in fix.changes):
            return f"rlhflab verify {diagnosis.source} " + " ".join(
                f"--fix {render_change(diagnosis.vocabulary, c)}" for c in fix.changes)
    compare = f"rlhflab compare {diagnosis.source or 'OLD_LOG'} -- NEW_LOG"
    if fix is None:
        return f"fix the component, rerun with the same seed, then: {compare}"
    changes = ", ".join(render_change(diagnosis.vocabulary, c) for c in fix.changes)
    return f"rerun with {changes} and the same seed, then: {compare}"
