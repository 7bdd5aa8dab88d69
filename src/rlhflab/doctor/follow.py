"""`rlhflab doctor --follow`: the doctor on a log that is still being written, for trainers
without callbacks (veRL, OpenRLHF, custom loops). The log (a console capture, JSONL, CSV,
a TensorBoard directory, a trainer_state.json rewritten at each save, ...) is read again
whenever it changes, by the format registry as any log is; each finding is told when it
first appears, and a finding of a rule the user stops on ends the following, so that a
wrapper script can stop the run."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from rlhflab.doctor.formats import LogFormatError, UserMapping, read_log
from rlhflab.doctor.live import Watch, finding_line
from rlhflab.doctor.table import MetricTable


def signature(path: Path) -> tuple[int, int, int] | None:
    """What changes when a log grows: (files, bytes, newest modification) of the file or of
    every file under the directory; None while it does not exist."""
    if not path.exists():
        return None
    files = [p for p in path.rglob("*") if p.is_file()] if path.is_dir() else [path]
    stats = [p.stat() for p in files]
    return len(stats), sum(s.st_size for s in stats), max((s.st_mtime_ns for s in stats), default=0)


@dataclass
class Followed:
    watch: Watch
    table: MetricTable | None  # the last table read
    reason: str  # "stop" (a stop rule fired) or "idle" (the log stopped changing)


def follow(path: Path, watch: Watch, mapping: UserMapping | None = None, format_name: str | None = None,
           interval: float = 2.0, idle_exit: float | None = None, emit: Callable[[str], None] = print,
           clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> Followed:
    """Read `path` again each time it changes (polled every `interval` seconds) and tell
    each new finding through `emit`. Returns when a rule of `watch.stop_on` fires, or when
    the log has not changed for `idle_exit` seconds (None: never). A log that cannot be
    read yet (not written, or a format that cannot read a half-written end) is read again
    at its next change; if it stops changing while unreadable, its error is raised. JSONL
    logs are read up to their last whole line meanwhile (said in the notes)."""
    path = Path(path)
    last, changed, table, error = None, clock(), None, None
    while True:
        current = signature(path)
        if current != last:
            last, changed = current, clock()
            if current is not None:
                try:
                    table = read_log(path, mapping, format_name)
                    error = None
                except LogFormatError as err:
                    error = err
                else:
                    for finding in watch.check(table):
                        emit(finding_line(finding))
                    if watch.stopped_by is not None:
                        return Followed(watch, table, "stop")
        elif idle_exit is not None and clock() - changed >= idle_exit:
            if error is not None:
                raise error
            if table is None:
                raise LogFormatError(f"{path}: no such file or directory")
            return Followed(watch, table, "idle")
        sleep(interval)
