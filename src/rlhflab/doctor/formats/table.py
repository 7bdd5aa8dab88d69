"""Any CSV or JSONL file with one row per step: canonical names are read as they are, a
known trainer's names in its dialect (OpenRLHF, NeMo-RL, a custom GRPO loop logging
TRL's names...), others through the user's `--map`.

The step column is the mapping's (`--map iter=step`), else the first of `STEP_NAMES`
the file has; a file with none numbers its rows, and says so.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any

from rlhflab.doctor.formats.spec import LogFormat, LogFormatError, RawLog, UserMapping
from rlhflab.doctor.formats.text import json_objects

SUFFIXES = (".csv", ".jsonl")
STEP_NAMES = ("step", "Step", "_step", "global_step", "train/global_step", "iteration", "iter", "trainer/global_step",
              "update", "updates", "train/step")


def _recognise(path: Path) -> bool:
    return path.is_file() and path.suffix in SUFFIXES


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _read_csv(path: Path) -> list[dict[str, Any]]:
    try:
        with path.open(encoding="utf-8-sig", newline="") as handle:
            reader = csv.reader(handle)
            header = next(reader, None)
            if not header:
                raise LogFormatError(f"{path}: empty file: no header row")
            records = []
            for number, row in enumerate(reader, start=2):
                if len(row) > len(header):
                    raise LogFormatError(f"{path}:{number}: {len(row)} fields, the header has {len(header)}")
                record: dict[str, Any] = {}
                for key, text in zip(header, row):
                    if text == "":
                        continue
                    value = _number(text)
                    record[key] = value if value is not None else text
                records.append(record)
    except UnicodeDecodeError as err:
        raise LogFormatError(f"{path}: not UTF-8 text ({err.reason} at byte {err.start})") from None
    except csv.Error as err:
        raise LogFormatError(f"{path}: invalid CSV ({err})") from None
    return records


def _is_jsonl(path: Path) -> bool:
    """JSONL when the suffix says so, or (a forced format on another suffix) when the first
    non-blank character opens an object."""
    if path.suffix in SUFFIXES:
        return path.suffix == ".jsonl"
    with path.open(encoding="utf-8", errors="replace") as handle:
        return handle.read(4096).lstrip().startswith("{")


def _whole_steps(records: list[dict[str, Any]], step_key: str, path: Path) -> None:
    """A step that is a number in text (CSV) becomes one; anything else is an error at its row."""
    for number, record in enumerate(records, start=1):
        if step_key not in record:
            continue
        step = record[step_key]
        if isinstance(step, float) and math.isfinite(step) and step == int(step):
            record[step_key] = int(step)
        elif isinstance(step, bool) or not isinstance(step, int):
            raise LogFormatError(f"{path}: row {number}: step {step!r} ('{step_key}') is not a whole number")


def _read(path: Path, mapping: UserMapping) -> RawLog:
    notes: list[str] = []
    records = [row for _, row in json_objects(path, notes)] if _is_jsonl(path) else _read_csv(path)
    names = {k for r in records for k in r}
    step_key = mapping.step_key or next((n for n in STEP_NAMES if n in names), None)
    if step_key is None:
        step_key = "step"
        notes.append(f"no step column ({', '.join(STEP_NAMES[:4])}, ...; name one with --map THEIRS=step): "
                     "each row's step is its index")
    _whole_steps(records, step_key, path)
    return RawLog(records, step_key=step_key, notes=notes)


FORMAT = LogFormat(
    name="table",
    description="a CSV or JSONL file, one row per step: canonical names, a known trainer's names, or any with --map",
    reads=("any `.csv` or `.jsonl`, one row per step; the step column is `step`, `Step`, `_step`, `global_step`, "
           "`train/global_step`, `iteration`, `iter`, `update` or `updates`, else the row's index (said)"),
    recognise=_recognise,
    read=_read,
)
