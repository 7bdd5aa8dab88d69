"""MLflow's local file store: `mlruns/<experiment>/<run>/metrics/<name>`, one file per
metric (a name with `/` is a nested path), each line `timestamp value step` (before
MLflow 1.0: `timestamp value`, the line's index is the step). Given an experiment or
`mlruns/` directory that holds a single run, that run is read. The trainer is told by
the metric names; veRL's MLflow logger writes `@` as `_at_`."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from rlhflab.doctor.formats.spec import LogFormat, LogFormatError, RawLog, UserMapping


def _is_run(path: Path) -> bool:
    return (path / "meta.yaml").is_file() and (path / "metrics").is_dir()


def _runs(path: Path) -> list[Path]:
    if _is_run(path):
        return [path]
    found = []
    for meta in path.glob("*/meta.yaml"):
        if _is_run(meta.parent):
            found.append(meta.parent)
    for meta in path.glob("*/*/meta.yaml"):
        if _is_run(meta.parent):
            found.append(meta.parent)
    return sorted(set(found))


def _recognise(path: Path) -> bool:
    return path.is_dir() and bool(_runs(path))


def _read(path: Path, mapping: UserMapping) -> RawLog:
    runs = _runs(Path(path))
    if not runs:
        raise LogFormatError(f"{path}: no MLflow run (a directory with meta.yaml and metrics/) found")
    if len(runs) > 1:
        raise LogFormatError(f"{path}: {len(runs)} MLflow runs; give one run directory: "
                             + ", ".join(str(r) for r in runs[:10]))
    metrics = runs[0] / "metrics"
    by_step: dict[int, dict[str, Any]] = {}
    repeated: set[int] = set()
    for file in sorted(p for p in metrics.rglob("*") if p.is_file()):
        name = file.relative_to(metrics).as_posix().replace("_at_", "@")
        with file.open(encoding="utf-8", errors="replace") as handle:
            for number, line in enumerate(handle, start=1):
                parts = line.split()
                if not parts:
                    continue
                if len(parts) not in (2, 3):
                    raise LogFormatError(f"{file}:{number}: expected 'timestamp value step', got {line.strip()!r}")
                try:
                    value = float(parts[1])
                    step = int(parts[2]) if len(parts) == 3 else number - 1
                except ValueError:
                    raise LogFormatError(f"{file}:{number}: expected 'timestamp value step', "
                                         f"got {line.strip()!r}") from None
                record = by_step.setdefault(step, {"step": step})
                if name in record and record[name] != value:  # the same value twice is no conflict
                    repeated.add(step)
                record[name] = value if math.isfinite(value) else float("nan")  # the later line wins
    notes = [f"{len(repeated)} step(s) were logged more than once (a resumed run): the last value of each metric "
             "was kept"] if repeated else []
    return RawLog([by_step[s] for s in sorted(by_step)], notes=notes)


FORMAT = LogFormat(
    name="mlflow",
    description="an MLflow local run directory (mlruns/<experiment>/<run>/metrics/<name>), or a directory holding "
                "one run",
    reads=("an MLflow local run (`mlruns/<experiment>/<run>/metrics/<name>`: `timestamp value step` lines), or a "
           "directory holding one run"),
    recognise=_recognise,
    read=_read,
)
