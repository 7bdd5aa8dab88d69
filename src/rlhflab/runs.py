"""The run directory (layout in DESIGN.md) and the metrics writers.

Metrics go to `RUN/metrics/<stage>.jsonl`, one JSON object per logged step, flushed
line by line so a crash loses at most the line being written; the same scalars go to
TensorBoard event files under `RUN/tensorboard/<stage>` when tensorboard is importable.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Protocol


@dataclass(frozen=True)
class RunDir:
    """Paths of one run; creating the object creates nothing on disk."""

    root: Path

    @property
    def config(self) -> Path:
        return self.root / "config.toml"

    @property
    def world(self) -> Path:
        return self.root / "world"

    @property
    def stage1_lm(self) -> Path:
        return self.root / "stage1_lm"

    @property
    def stage2_rm(self) -> Path:
        return self.root / "stage2_rm"

    @property
    def stage3_policy(self) -> Path:
        return self.root / "stage3_policy"

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    @property
    def summary(self) -> Path:
        return self.root / "summary.json"

    @property
    def diagnosis(self) -> Path:
        return self.root / "diagnosis.json"

    @property
    def report(self) -> Path:
        return self.root / "report.html"

    @property
    def ablate(self) -> Path:
        """`RUN/ablate/ARM/seedK/`: an ablation's arms (`rlhflab ablate`)."""
        return self.root / "ablate"

    def metrics(self, stage: str) -> Path:
        return self.root / "metrics" / f"{stage}.jsonl"

    def samples(self, stage: str) -> Path:
        return self.root / "samples" / f"{stage}.jsonl"

    def tensorboard(self, stage: str) -> Path:
        return self.root / "tensorboard" / stage

    def create(self) -> "RunDir":
        for sub in ("metrics", "samples", "checkpoints"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        return self


class MetricsLogger(Protocol):
    def log(self, step: int, metrics: dict[str, float]) -> None: ...

    def close(self) -> None: ...


def _jsonable(value: Any) -> Any:
    # JSON has no NaN/Inf; write them as null so every line stays valid JSON.
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class JsonlLogger:
    """Writes `{"step": s, **metrics}` lines to a JSONL file, flushed per line.

    A new stage run starts the file afresh; `append=True` continues it (resume)."""

    def __init__(self, path: Path, append: bool = False) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = path.open("a" if append else "w", encoding="utf-8")

    def log(self, step: int, metrics: dict[str, float]) -> None:
        record = {"step": step, **{k: _jsonable(float(v)) for k, v in metrics.items()}}
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


class TensorBoardLogger:
    """The same scalars as TensorBoard events (optional dependency)."""

    def __init__(self, log_dir: Path) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self._writer = SummaryWriter(log_dir=str(log_dir))

    def log(self, step: int, metrics: dict[str, float]) -> None:
        for key, value in metrics.items():
            self._writer.add_scalar(key, float(value), global_step=step)

    def close(self) -> None:
        self._writer.close()


class MultiLogger:
    def __init__(self, *loggers: MetricsLogger) -> None:
        self._loggers = loggers

    def log(self, step: int, metrics: dict[str, float]) -> None:
        for logger in self._loggers:
            logger.log(step, metrics)

    def close(self) -> None:
        for logger in self._loggers:
            logger.close()


class NullLogger:
    """The logger of a process that writes nothing (every torchrun process but the first)."""

    def log(self, step: int, metrics: dict[str, float]) -> None:
        pass

    def close(self) -> None:
        pass


def stage_logger(run: RunDir, stage: str, tensorboard: bool = True, append: bool = False,
                 is_main: bool = True) -> MetricsLogger:
    """JSONL (always) plus TensorBoard (when importable) for one stage; `append` continues
    the stage's JSONL file (a resumed run); `is_main=False` (not the first process) logs nothing."""
    if not is_main:
        return NullLogger()
    loggers: list[MetricsLogger] = [JsonlLogger(run.metrics(stage), append)]
    if tensorboard:
        with suppress(ImportError):  # tensorboard is optional
            loggers.append(TensorBoardLogger(run.tensorboard(stage)))
    return MultiLogger(*loggers)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Read a JSONL file; a malformed line is an error naming the file and line."""
    records = []
    with Path(path).open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as err:
                raise ValueError(f"{path}:{number}: invalid JSON ({err.msg})") from None
    return records


def append_jsonl(path: Path, records: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as handle:
        for record in records:
            handle.write(json.dumps({k: _jsonable(v) for k, v in record.items()}) + "\n")


def read_json(path: Path) -> Any:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def write_json(path: Path, data: Any) -> None:
    """Write JSON atomically (temp file, then rename)."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)


def staging(path: Path) -> Path:
    """Where `path`'s next version is written before `swap_in`."""
    return Path(path).with_name(Path(path).name + ".tmp")


def fresh_dir(path: Path) -> Path:
    """`staging(path)`, emptied and created."""
    tmp = staging(path)
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    return tmp


def swap_in(tmp: Path, path: Path) -> None:
    """Put the filled `tmp` in place of `path`: a crash at any point leaves the old
    directory or the new one, never a half-written one."""
    path = Path(path)
    old = path.with_name(path.name + ".old")
    shutil.rmtree(old, ignore_errors=True)
    if path.exists():
        path.rename(old)
    tmp.rename(path)
    shutil.rmtree(old, ignore_errors=True)


@contextmanager
def atomic_dir(path: Path) -> Iterator[Path]:
    """Yield a temporary directory to fill, then swap it in under `path` (`swap_in`)."""
    tmp = fresh_dir(path)
    yield tmp
    swap_in(tmp, path)


def _link_or_copy(source: str, target: str) -> None:
    if os.path.lexists(target):
        if os.path.samefile(source, target):  # linked before (a resumed rerun)
            return
        os.unlink(target)
    try:
        os.link(source, target)
    except OSError:  # another filesystem, or one without hard links
        shutil.copy2(source, target)


def link_tree(source: Path, target: Path) -> None:
    """`source`'s files hard-linked under `target` (copied where links cannot be made): a
    rerun shares the stages it does not change without copying them. Every writer replaces
    files (atomic renames) or writes new ones, so a link is never written through."""
    shutil.copytree(source, target, copy_function=_link_or_copy, dirs_exist_ok=True)


def link_file(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    target.unlink(missing_ok=True)
    _link_or_copy(str(source), str(target))
