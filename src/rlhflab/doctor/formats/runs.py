"""Console captures that hold more than one run: a script run twice into one file, a sweep
piped to one log. A later run starts only where a banner or a reprinted config stands
between two step lines and the step counter has started over (back at or before the first
step of the run so far). A counter that restarts by design with no banner between (each
epoch's, as DeepSpeed-Chat prints) is one run, and a reprint after which the counter goes
on from past the run's first step is that run resumed. The last run is diagnosed unless
the user names another (`rlhflab doctor --run N`); either way it is said."""

from __future__ import annotations

from dataclasses import replace
from typing import Sequence

from rlhflab.doctor.formats.spec import LogFormatError, RawLog


def run_starts(steps: Sequence[float], banner_before: set[int]) -> list[int]:
    """The record indices where a later run starts: `steps` are the records' step counters in
    the order printed, `banner_before` the indices of records with a banner or a printed
    config since the record before them."""
    starts: list[int] = []
    first = None
    for index, step in enumerate(steps):
        if first is not None and index in banner_before and step <= first:
            starts.append(index)
            first = step
        elif first is None:
            first = step
    return starts


def choose_run(raw: RawLog, run: int | None, source: str) -> RawLog:
    """`raw` cut to one of its runs (1-based `run`, the last by default), with a note; `raw`
    itself when it holds one run and none other is asked for."""
    bounds = [0, *raw.run_starts, len(raw.records)]
    count = len(bounds) - 1
    if run is not None and not 1 <= run <= count:
        raise LogFormatError(f"{source}: --run {run}: the log holds {count} run{'s' if count > 1 else ''}")
    if count == 1:
        return raw
    chosen = run or count
    records = raw.records[bounds[chosen - 1]:bounds[chosen]]
    settings = raw.run_settings[chosen - 1] if len(raw.run_settings) == count else raw.settings
    lengths = ", ".join(str(b - a) for a, b in zip(bounds, bounds[1:]))
    note = (f"the log holds {count} runs (a banner or a printed config before a step counter that started over; "
            f"{lengths} rows): diagnosing run {chosen} of {count}"
            + ("" if run else ", the last (--run N for another)"))
    return replace(raw, records=records, settings=settings, notes=[note, *raw.notes], run_starts=[], run_settings=[])
