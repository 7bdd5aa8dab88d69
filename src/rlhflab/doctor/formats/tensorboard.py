"""TensorBoard event files (`events.out.tfevents.*`): any trainer's tags, told by their
names (TRL's PPO before 0.11 logged only through accelerate's trackers, so its names are
found here and in W&B exports; transformers' callback prefixes `train/` and `eval/`).

An event file is a TFRecord stream: per record a little-endian uint64 length, a uint32
CRC of it, the serialized `Event` protobuf, a uint32 CRC of the data. The records are
framed here and each `Event` parsed with TensorBoard's own protobuf class: a million
scalars in a few seconds, where `EventAccumulator` (which also samples, locks and keeps
every plugin's data) takes about 18 s (docs/benchmarks.md). Scalars are `simple_value`
(torch's and tensorboardX's writers) or a one-element float tensor (TF2 summaries). CRCs
are not checked: a truncated last record ends the file, and the notes say so.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

from rlhflab.doctor.formats.spec import LogFormat, LogFormatError, RawLog, UserMapping

PATTERN = "events.out.tfevents.*"
_HEADER = struct.Struct("<QI")  # length, its masked CRC
_FOOTER = 4  # the data's masked CRC


def _event_files(path: Path) -> list[Path]:
    return [path] if path.is_file() else sorted(path.rglob(PATTERN))


def _recognise(path: Path) -> bool:
    if path.is_file():
        return path.name.startswith("events.out.tfevents")
    return path.is_dir() and next(path.rglob(PATTERN), None) is not None


def _event_class():
    try:
        from tensorboard.compat.proto.event_pb2 import Event
    except ImportError:
        raise LogFormatError("reading TensorBoard event files needs the tensorboard package: "
                             "pip install 'rlhflab[tensorboard]'") from None
    return Event


def read_scalars(file: Path, event_class) -> tuple[list[tuple[int, str, float]], str | None]:
    """(step, tag, value) of every scalar in one event file, and a note when it ends in a
    truncated record. A record that is not an Event is an error naming the file and record."""
    data = file.read_bytes()
    scalars: list[tuple[int, str, float]] = []
    offset, record = 0, 0
    from_string = event_class.FromString
    while offset < len(data):
        if offset + _HEADER.size > len(data):
            return scalars, f"{file.name}: ends inside a record header (a file cut short): read up to record {record}"
        length, _ = _HEADER.unpack_from(data, offset)
        start = offset + _HEADER.size
        if start + length + _FOOTER > len(data):
            return scalars, f"{file.name}: its last record is cut short: read up to record {record}"
        try:
            event = from_string(data[start:start + length])
        except Exception as err:  # protobuf's DecodeError; its module path varies by protobuf version
            raise LogFormatError(f"{file}: record {record + 1} (byte {offset}) is not a TensorBoard event "
                                 f"({type(err).__name__})") from None
        offset, record = start + length + _FOOTER, record + 1
        if not event.HasField("summary"):
            continue
        for value in event.summary.value:
            kind = value.WhichOneof("value")
            if kind == "simple_value":
                scalars.append((event.step, value.tag, value.simple_value))
            elif kind == "tensor" and value.metadata.plugin_data.plugin_name in ("scalars", ""):
                tensor = value.tensor
                numbers = list(tensor.float_val) or list(tensor.double_val)
                if len(numbers) == 1:
                    scalars.append((event.step, value.tag, numbers[0]))
                elif tensor.tensor_content and len(tensor.tensor_content) in (4, 8):
                    fmt = "<f" if len(tensor.tensor_content) == 4 else "<d"
                    scalars.append((event.step, value.tag, struct.unpack(fmt, tensor.tensor_content)[0]))
    return scalars, None


def _read(path: Path, mapping: UserMapping) -> RawLog:
    event_class = _event_class()
    files = _event_files(Path(path))
    if not files:
        raise LogFormatError(f"{path}: no TensorBoard event files ({PATTERN}) found")
    records: dict[int, dict[str, Any]] = {}
    repeated: set[int] = set()
    notes: list[str] = []
    for file in files:  # in name order (their names start with the time they were opened): later writes win
        scalars, note = read_scalars(file, event_class)
        if note:
            notes.append(note)
        for step, tag, value in scalars:
            record = records.get(step)
            if record is None:
                record = records[step] = {"step": step}
            elif tag in record and record[tag] != value:  # the same value twice is no conflict
                repeated.add(step)
            record[tag] = value
    if repeated:
        notes.append(f"{len(repeated)} step(s) were logged more than once (a resumed run, or one file per process): "
                     "the last value of each metric was kept")
    return RawLog([records[s] for s in sorted(records)], notes=notes)


FORMAT = LogFormat(
    name="tensorboard",
    description="TensorBoard event files (a file or a directory searched recursively), any trainer's tags",
    reads=("event files, a file or a directory searched recursively (`rlhflab[tensorboard]`)"),
    recognise=_recognise,
    read=_read,
)
