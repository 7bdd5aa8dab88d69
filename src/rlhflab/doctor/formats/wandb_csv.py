"""A CSV exported from a W&B panel ("Download CSV"): a step column (`Step`, or the
panel's x-axis such as `train/global_step`), then `<run name> - <metric>` columns, each
with its `__MIN` and `__MAX` companions (the range W&B draws when it samples). The
means are read; the companions are not. A file with several runs is read for the first
and says so. The trainer is told by the metric names."""

from __future__ import annotations

import csv
import re
from pathlib import Path
from typing import Any

from rlhflab.doctor.formats.spec import LogFormat, LogFormatError, RawLog, UserMapping

_RUN_COLUMN = re.compile(r"^(?P<run>.+?) - (?P<metric>.+)$")
_COMPANION = ("__MIN", "__MAX")


def _header(path: Path) -> list[str] | None:
    try:
        with path.open(encoding="utf-8-sig", errors="strict", newline="") as handle:
            return next(csv.reader(handle), None)
    except (UnicodeDecodeError, csv.Error):
        return None


def _recognise(path: Path) -> bool:
    if not path.is_file() or path.suffix != ".csv":
        return False
    header = _header(path)
    return bool(header) and len(header) > 1 and " - " not in header[0] \
        and any(_RUN_COLUMN.match(h) for h in header[1:])


def _read(path: Path, mapping: UserMapping) -> RawLog:
    header = _header(path)
    if not header:
        raise LogFormatError(f"{path}:1: no header row")
    step_column = mapping.step_key or header[0]
    columns: dict[str, str] = {}  # header -> metric, for the first run
    runs: list[str] = []
    for name in header:
        match = _RUN_COLUMN.match(name)
        if match is None or name.endswith(_COMPANION):
            continue
        if match["run"] not in runs:
            runs.append(match["run"])
        if match["run"] == runs[0]:
            columns[name] = match["metric"]
    records: list[dict[str, Any]] = []
    with path.open(encoding="utf-8-sig", errors="replace", newline="") as handle:
        reader = csv.DictReader(handle)
        for number, row in enumerate(reader, start=2):
            step_text = row.get(step_column)
            if step_text in (None, ""):
                continue
            try:
                step = float(step_text)
            except ValueError:
                raise LogFormatError(f"{path}:{number}: step {step_text!r} ('{step_column}') is not a number") from None
            record: dict[str, Any] = {"step": int(step) if step == int(step) else step}
            for name, metric in columns.items():
                text = row.get(name)
                if text in (None, ""):
                    continue
                try:
                    record[metric] = float(text)
                except ValueError:
                    continue
            records.append(record)
    notes = [f"W&B export of run {runs[0]!r}"] if runs else []
    if len(runs) > 1:
        notes.append(f"the file holds {len(runs)} runs; read {runs[0]!r}, not: {', '.join(runs[1:])}")
    return RawLog(records, notes=notes)


FORMAT = LogFormat(
    name="wandb-csv",
    description="a CSV exported from a W&B panel (a Step column, '<run> - <metric>' columns, __MIN/__MAX)",
    reads=("a W&B panel export: a step column, `<run> - <metric>` columns, their `__MIN`/`__MAX` (not read); the first "
           "run of several"),
    recognise=_recognise,
    read=_read,
)
