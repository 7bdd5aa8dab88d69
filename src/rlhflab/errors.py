"""The errors a user's input causes, as one family: a config key or value, a data file, a
model directory, a log, a study, a sample file, a plan, an address to serve on, an output
path, an optional extra that is not installed. Each module raises its own subclass with a
message that says what was wrong and where (file and line, key, value) and what was
expected; the command line ends any of them with that one line and exit code 2
(`cli/errors.py`). Any other exception is a bug in rlhflab and keeps its traceback.
"""

from __future__ import annotations

import os
from pathlib import Path


class InputError(ValueError):
    """Something the user gave is wrong; the message says what, where, and what was expected."""

    label = "error"
    """How the command line introduces the message ("config error: ...")."""


class MissingExtra(InputError):
    """An optional part of rlhflab that the input asks for is not installed; the message names
    what to install."""


class AddressError(InputError):
    """A host or port a server cannot listen on."""


class OutputPathError(InputError):
    """A path a command was told to write to cannot be written."""


def writable_directory(path: str | os.PathLike[str]) -> None:
    """`path` is a directory, or can be made one: its nearest existing ancestor is a directory
    this process may write in (an OutputPathError otherwise, before anything is written)."""
    path = Path(path)
    existing = next(p for p in (path, *path.parents) if p.exists())
    if not existing.is_dir():
        raise OutputPathError(f"{path}: cannot write there ({existing} is a file, not a directory)")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise OutputPathError(f"{path}: cannot write there ({existing} is not writable)")
