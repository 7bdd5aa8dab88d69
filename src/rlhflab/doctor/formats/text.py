"""What the readers of text logs share: any bytes decoded, ANSI escapes removed, JSON lines
parsed with errors at their line."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Iterator, TextIO

from rlhflab.doctor.formats.spec import LogFormatError

# CSI sequences (colours, cursor moves) that terminals interpret and captures keep.
ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")


def open_text(path: Path) -> TextIO:
    """A text log, any bytes decoded (a console capture is not always clean UTF-8)."""
    return Path(path).open(encoding="utf-8", errors="replace", newline=None)


def plain(line: str) -> str:
    """A console line without ANSI escapes or NUL bytes."""
    return ANSI.sub("", line.replace("\0", ""))


def json_objects(path: Path, notes: list[str] | None = None) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) of each non-blank line of a JSONL file; anything but a JSON
    object on a line is an error naming the file and the line, except a last line cut
    before its end (a run still writing, or stopped mid-line), which is left out and said
    in `notes`."""
    try:
        with Path(path).open(encoding="utf-8") as handle:
            for number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as err:
                    if not line.endswith("\n") and notes is not None:
                        notes.append(f"line {number} is cut before its end (a run still writing, or stopped "
                                     "mid-line): not read")
                        return
                    raise LogFormatError(f"{path}:{number}: invalid JSON ({err.msg})") from None
                except RecursionError:
                    raise LogFormatError(f"{path}:{number}: JSON nested too deeply") from None
                if not isinstance(row, dict):
                    raise LogFormatError(f"{path}:{number}: expected a JSON object per line, got {type(row).__name__}")
                yield number, row
    except UnicodeDecodeError as err:
        raise LogFormatError(f"{path}: not UTF-8 text ({err.reason} at byte {err.start})") from None
