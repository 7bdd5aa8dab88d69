"""Any CSV or JSONL file with one row per step: canonical column names are read as they
are, others through the user's `--map`. The step column is `step` unless the mapping
names another (`--map iter=step`)."""

from __future__ import annotations

import csv
from pathlib import Path

from rlhflab.doctor.formats.spec import LogFormat, LogFormatError, RawLog, UserMapping
from rlhflab.runs import read_jsonl

SUFFIXES = (".csv", ".jsonl")


def _recognise(path: Path) -> bool:
    return path.is_file() and path.suffix in SUFFIXES


def _read_csv(path: Path, step_key: str) -> list[dict]:
    try:
        with path.open(encoding="utf-8", newline="") as handle:
            rows = list(csv.DictReader(handle))
    except UnicodeDecodeError as err:
        raise LogFormatError(f"{path}: not UTF-8 text ({err.reason} at byte {err.start})") from None
    if not rows:
        raise LogFormatError(f"{path}: no rows")
    if step_key not in rows[0]:
        raise LogFormatError(f"{path}:1: no '{step_key}' column (columns: {', '.join(rows[0])}); "
                             "name the step column with --map THEIRS=step")
    records = []
    for number, row in enumerate(rows, start=2):
        record = {}
        for key, value in row.items():
            if value in ("", None):
                continue
            try:
                record[key] = float(value) if key != step_key else int(float(value))
            except ValueError:
                if key == step_key:
                    raise LogFormatError(f"{path}:{number}: step {value!r} is not a number") from None
        records.append(record)
    return records


def _is_jsonl(path: Path) -> bool:
    """JSONL when the suffix says so, or (a forced format on another suffix) when the first
    non-blank character opens an object."""
    if path.suffix in SUFFIXES:
        return path.suffix == ".jsonl"
    with path.open(encoding="utf-8", errors="replace") as handle:
        return handle.read(4096).lstrip().startswith("{")


def _read(path: Path, mapping: UserMapping) -> RawLog:
    step_key = mapping.step_key or "step"
    if not _is_jsonl(path):
        return RawLog(_read_csv(path, step_key), step_key=step_key)
    try:
        return RawLog(read_jsonl(path), step_key=step_key)
    except (ValueError, UnicodeDecodeError) as err:
        raise LogFormatError(str(err)) from None


FORMAT = LogFormat(
    name="table",
    description="a CSV or JSONL file, one row per step: canonical names, or any names with --map",
    recognise=_recognise,
    read=_read,
)

