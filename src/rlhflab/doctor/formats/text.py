"""What the readers of console captures share: any bytes decoded, ANSI escapes removed."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TextIO

# CSI sequences (colours, cursor moves) that terminals interpret and captures keep.
ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")


def open_text(path: Path) -> TextIO:
    """A text log, any bytes decoded (a console capture is not always clean UTF-8)."""
    return Path(path).open(encoding="utf-8", errors="replace", newline=None)


def plain(line: str) -> str:
    """A console line without ANSI escapes or NUL bytes."""
    return ANSI.sub("", line.replace("\0", ""))
