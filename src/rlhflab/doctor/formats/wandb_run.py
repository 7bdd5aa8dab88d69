"""A W&B run directory, offline (`wandb/offline-run-*`) or synced (`wandb/run-*`), read
from its transaction log `run-<id>.wandb` without network and without the wandb package.
Modern runs keep their history nowhere else: an offline run's `files/` holds no summary or
history (wandb-core writes the log only).

The log is LevelDB's log format behind a 7-byte W&B header (`:W&B`, 0xBEE1, version 0;
wandb/sdk/internal/datastore.py, wandb-core's transactionlog): blocks of 32 KiB, each
record in chunks (FULL, or FIRST, MIDDLE..., LAST) with a 7-byte header (CRC-32 of the type
byte and the data, length, type). Each record is a protobuf `Record`
(wandb/proto/wandb_internal.proto); its field 2 is a `HistoryRecord`: items (field 1) of
`key` (1, the legacy writer) or `nested_key` (2, wandb-core: a flat `train/kl` is one part,
a nested dict's parts are joined with `.` as wandb shows them) and `value_json` (16), and
the step (field 2). Only the wire format is decoded here.

A run still being written, or cut, ends in a partial block: read up to the last whole
record, and said. Given `wandb/`, the run `latest-run` points to is read, else the newest.
The trainer is told by the names (transformers' WandbCallback logs `train/<name>` with
`train/global_step` as the step).
"""

from __future__ import annotations

import json
import math
import struct
import zlib
from pathlib import Path
from typing import Any, Iterator

from rlhflab.doctor.formats.spec import LogFormat, LogFormatError, RawLog, UserMapping

HEADER = struct.pack("<4sHB", b":W&B", 0xBEE1, 0)
BLOCK = 32768
CHUNK_HEADER = 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4
HISTORY = 2  # Record.history
# Steps: transformers' WandbCallback sets `train/global_step` as every metric's step.
STEP_NAMES = ("train/global_step", "trainer/global_step", "global_step", "_step")
BOOKKEEPING = {"_runtime", "_timestamp", "_step"}


def _varint(data: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if i >= len(data):
            raise ValueError("varint past the end")
        byte = data[i]
        value |= (byte & 0x7F) << shift
        i += 1
        if not byte & 0x80:
            return value, i
        shift += 7


def fields(data: bytes) -> Iterator[tuple[int, int | bytes]]:
    """(field number, value) of a protobuf message: varints as ints, length-delimited
    fields as bytes (fixed 32/64-bit ones as their bytes)."""
    i = 0
    while i < len(data):
        key, i = _varint(data, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _varint(data, i)
            yield number, value
        elif wire == 2:
            size, i = _varint(data, i)
            if i + size > len(data):
                raise ValueError("field past the end")
            yield number, data[i : i + size]
            i += size
        elif wire in (1, 5):
            width = 8 if wire == 1 else 4
            yield number, data[i : i + width]
            i += width
        else:
            raise ValueError(f"wire type {wire}")


def records(data: bytes) -> tuple[list[bytes], str | None]:
    """The records of a transaction log, and why reading stopped early (None: at its end)."""
    if not data.startswith(HEADER[:4]):
        raise ValueError("no W&B header")
    out, pending, offset = [], b"", len(HEADER)
    while offset < len(data):
        left = BLOCK - offset % BLOCK
        if left < CHUNK_HEADER:  # padding to the next block
            offset += left
            continue
        head = data[offset : offset + CHUNK_HEADER]
        if len(head) < CHUNK_HEADER:
            return out, "the log ends in a partial record (a run still writing, or cut)"
        checksum, length, kind = struct.unpack("<IHB", head)
        if checksum == 0 and length == 0 and kind == 0:  # zero padding written ahead
            offset += left
            continue
        body = data[offset + CHUNK_HEADER : offset + CHUNK_HEADER + length]
        if len(body) < length:
            return out, "the log ends in a partial record (a run still writing, or cut)"
        if zlib.crc32(body, zlib.crc32(bytes([kind]))) & 0xFFFFFFFF != checksum:
            return out, f"a record at byte {offset} fails its checksum: the rest is not read"
        offset += CHUNK_HEADER + length
        if kind == FULL:
            out.append(body)
        elif kind == FIRST:
            pending = body
        elif kind in (MIDDLE, LAST):
            pending += body
            if kind == LAST:
                out.append(pending)
                pending = b""
    return out, "the log ends inside a record (a run still writing, or cut)" if pending else None


def history_row(message: bytes) -> dict[str, Any]:
    """One `HistoryRecord` as {name: number}; a nested key's parts joined with `.`, as
    wandb's own readers show them (a flat `train/kl` is one part)."""
    row: dict[str, Any] = {}
    step = None
    for number, value in fields(message):
        if number == 1 and isinstance(value, bytes):
            key, nested, raw = None, [], None
            for item_number, item in fields(value):
                if item_number == 1:
                    key = item.decode("utf-8", errors="replace")
                elif item_number == 2:
                    nested.append(item.decode("utf-8", errors="replace"))
                elif item_number == 16:
                    raw = item.decode("utf-8", errors="replace")
            name = key if key else ".".join(nested)
            try:
                parsed = json.loads(raw) if raw is not None else None
            except json.JSONDecodeError:
                continue
            if isinstance(parsed, (int, float)) and not isinstance(parsed, bool) and name:
                row[name] = parsed
        elif number == 2 and isinstance(value, bytes):
            step = next((v for n, v in fields(value) if n == 1 and isinstance(v, int)), None)
    if "_step" not in row and step is not None:
        row["_step"] = step
    return row


def run_log(path: Path) -> Path:
    """The transaction log of a run directory, a `.wandb` file, or the run of a `wandb/`
    directory (`latest-run`, else the newest run)."""
    path = Path(path)
    if path.is_file():
        return path
    logs = sorted(path.glob("run-*.wandb"))
    if logs:
        return logs[-1]
    latest = (path / "latest-run").resolve()  # a symlink to the run wandb wrote last
    if latest.is_dir():
        found = sorted(latest.glob("run-*.wandb"))
        if found:
            return found[-1]
    runs = sorted(path.glob("*run-*/run-*.wandb"), key=lambda p: p.parent.name.removeprefix("offline-"))
    if runs:
        return runs[-1]
    raise LogFormatError(f"{path}: no W&B run (run-<id>.wandb) in it")


def _recognise(path: Path) -> bool:
    try:
        log = run_log(path)
    except LogFormatError:
        return False
    if log.suffix != ".wandb":
        return False
    with log.open("rb") as handle:
        return handle.read(4) == HEADER[:4]


def _read(path: Path, mapping: UserMapping) -> RawLog:
    log = run_log(path)
    try:
        found, stopped = records(log.read_bytes())
    except ValueError as err:
        raise LogFormatError(f"{log}: not a W&B transaction log ({err})") from None
    rows = []
    for number, body in enumerate(found, start=1):
        try:
            for field_number, value in fields(body):
                if field_number == HISTORY and isinstance(value, bytes):
                    rows.append(history_row(value))
        except ValueError as err:
            raise LogFormatError(f"{log}: record {number} is not a protobuf Record ({err})") from None
    names = {name for row in rows for name in row}
    step_key = mapping.step_key or next((name for name in STEP_NAMES if name in names), "_step")
    for row in rows:
        for name in BOOKKEEPING - {step_key}:
            row.pop(name, None)
        for name, value in list(row.items()):
            if name == step_key and isinstance(value, float) and math.isfinite(value) and value == int(value):
                row[name] = int(value)
    notes = [f"read from {log.name}"] + ([stopped] if stopped else [])
    if not rows:
        notes.append("the run logged no history")
    return RawLog(rows, step_key=step_key, notes=notes)


FORMAT = LogFormat(
    name="wandb-run",
    description="a W&B run directory, offline or synced (wandb/offline-run-*, wandb/run-*, or wandb/ itself), read "
                "from its run-<id>.wandb transaction log without network",
    reads=("a W&B run directory, offline (`wandb/offline-run-*`) or synced (`wandb/run-*`), its `run-<id>.wandb` file, "
           "or `wandb/` itself (the run `latest-run` points to): the history read from the transaction log (LevelDB log"
           " blocks, protobuf `Record`s decoded from their wire format) without network or the wandb package; a log cut"
           " mid-record is read up to its last whole record (said); `train/global_step` is the step when logged "
           "(transformers' WandbCallback)"),
    recognise=_recognise,
    read=_read,
)
