"""Log formats, one module per trainer family, each one declarative spec (`spec.py`):
how to recognise its logs, its names -> canonical names and their units, where its
settings are, and its trainer's vocabulary for fixes.

Adding a format is one file here and one line in `FORMATS`.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from rlhflab.doctor.findings import Change, Diagnosis, Finding, Fix
from rlhflab.doctor.formats import rlhflab, table, tensorboard, trl
from rlhflab.doctor.formats.spec import Column, LogFormat, LogFormatError, RawLog, UserMapping, build_table
from rlhflab.doctor.table import MetricTable

# Tried in this order: the most specific recognisers first.
FORMATS: tuple[LogFormat, ...] = (rlhflab.FORMAT, trl.FORMAT, tensorboard.FORMAT, table.FORMAT)
BY_NAME: dict[str, LogFormat] = {f.name: f for f in FORMATS}

__all__ = ["BY_NAME", "Column", "FORMATS", "LogFormat", "LogFormatError", "RawLog", "UserMapping", "detect_format",
           "get_format", "read_log", "render_change", "render_fix", "verify_command"]


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


def read_log(path: Path, mapping: UserMapping | None = None, format_name: str | None = None) -> MetricTable:
    """The metrics table of a log: its format detected by content, or forced by name."""
    path = Path(path)
    if not path.exists():
        raise LogFormatError(f"{path}: no such file or directory")
    fmt = get_format(format_name) if format_name else detect_format(path)
    mapping = mapping or UserMapping()
    return build_table(fmt.read(path, mapping), fmt, mapping, str(path))


def _value(value) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def render_change(trainer: str, change: Change) -> str:
    """One change in the vocabulary of the trainer that wrote the log (`ppo.kl_coef=0.4`,
    `PPOConfig.kl_coef=0.4`); a setting the trainer has no key for keeps its own name."""
    fmt = BY_NAME.get(trainer)
    key = fmt.vocabulary.get(change.setting, change.setting) if fmt else change.setting
    if change.direction == "set":
        return f"{key}={_value(change.value)}"
    return f"{change.direction} {key}"


def render_fix(trainer: str, fix: Fix | None) -> dict | None:
    if fix is None:
        return None
    return {"changes": [render_change(trainer, c) for c in fix.changes], "text": fix.text,
            "settings": [asdict(c) for c in fix.changes]}


def verify_command(diagnosis: Diagnosis, finding: Finding) -> str:
    """How to check the fix: `rlhflab verify` for runs it can rerun, else a rerun in the
    user's own trainer followed by the doctor."""
    fix = finding.fix
    fmt = BY_NAME.get(diagnosis.trainer)
    if fmt is not None and fmt.verify:
        if fix is None:
            return f"rlhflab checkup {diagnosis.source}"
        if all(c.direction == "set" for c in fix.changes):
            return f"rlhflab verify {diagnosis.source} " + " ".join(
                f"--fix {render_change(diagnosis.trainer, c)}" for c in fix.changes)
    if fix is None:
        return "fix the component, rerun with the same seed, then: rlhflab doctor NEW_LOG"
    changes = ", ".join(render_change(diagnosis.trainer, c) for c in fix.changes)
    return f"rerun with {changes} and the same seed, then: rlhflab doctor NEW_LOG"
