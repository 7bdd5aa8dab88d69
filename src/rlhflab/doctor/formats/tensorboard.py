"""TensorBoard event files (`events.out.tfevents.*`): any trainer's tags, told by their
names (TRL's PPO before 0.11 logged only through accelerate's trackers, so its names are
found here and in W&B exports; transformers' callback prefixes `train/` and `eval/`)."""

from __future__ import annotations

from pathlib import Path

from rlhflab.doctor.formats.spec import LogFormat, LogFormatError, RawLog, UserMapping

PATTERN = "events.out.tfevents.*"


def _event_files(path: Path) -> list[Path]:
    return [path] if path.is_file() else sorted(path.rglob(PATTERN))


def _recognise(path: Path) -> bool:
    if path.is_file():
        return path.name.startswith("events.out.tfevents")
    return path.is_dir() and next(path.rglob(PATTERN), None) is not None


def _read(path: Path, mapping: UserMapping) -> RawLog:
    try:
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    except ImportError:
        raise LogFormatError("reading TensorBoard event files needs the tensorboard package: "
                             "pip install 'rlhflab[tensorboard]'") from None
    files = _event_files(Path(path))
    if not files:
        raise LogFormatError(f"{path}: no TensorBoard event files ({PATTERN}) found")
    records: dict[int, dict] = {}
    repeated: set[int] = set()
    for file in files:
        accumulator = EventAccumulator(str(file), size_guidance={"scalars": 0})
        try:
            accumulator.Reload()
        except Exception as err:  # the parser's own errors (DataLossError, DecodeError, ...) vary by version
            raise LogFormatError(f"{file}: not a readable TensorBoard event file ({type(err).__name__}: {err})") from None
        for tag in accumulator.Tags().get("scalars", []):
            for event in accumulator.Scalars(tag):
                record = records.setdefault(event.step, {"step": event.step})
                if tag in record and record[tag] != event.value:  # the same value twice is no conflict
                    repeated.add(event.step)
                record[tag] = event.value  # files in name order: the later write wins
    notes = [f"{len(repeated)} step(s) were logged more than once (a resumed run, or one file per process): the "
             "last value of each metric was kept"] if repeated else []
    return RawLog([records[s] for s in sorted(records)], notes=notes)


FORMAT = LogFormat(
    name="tensorboard",
    description="TensorBoard event files (a file or a directory searched recursively), any trainer's tags",
    recognise=_recognise,
    read=_read,
)
