"""The command line's one error policy: what a user's input got wrong ends the command with one
line saying what was wrong and where, and exit code 2; a bug in rlhflab itself is no such error
and shows its traceback (exit 1)."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, NoReturn

import typer
from rich.markup import escape

from rlhflab.progress import console

BAD_INPUT = 2  # the exit code of every error a user's input causes


def fail(message: str, label: str = "error") -> NoReturn:
    """End the command: `label: message` on one line (the message shown as written), exit 2."""
    console.print(f"[red]{label}:[/red] {escape(message)}")
    raise typer.Exit(BAD_INPUT)


@contextmanager
def reported(*errors: type[BaseException], label: str = "error", prefix: str = "") -> Iterator[None]:
    """Within it, an error of these types (ones a user's input causes) ends the command by `fail`."""
    try:
        yield
    except errors as err:
        fail(prefix + str(err), label)
