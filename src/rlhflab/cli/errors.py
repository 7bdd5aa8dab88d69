"""The command line's one error policy: what a user's input got wrong ends the command with one
line saying what was wrong and where, and exit code 2; a bug in rlhflab itself is no such error
and shows its traceback (exit 1).

Every command runs `guarded`: an `InputError` (rlhflab/errors.py: config, data file, model
directory, log, study, sample file, plan, address, output path, missing extra) or an OS error
about a named path (a file the user named that cannot be read, a directory that cannot be
written) ends it that way. A command that must say more than the error itself (which option it
came from) uses `reported` with a prefix, or `fail` for a check of its own.
"""

from __future__ import annotations

import functools
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, NoReturn, TypeVar

import typer
from rich.markup import escape

from rlhflab.errors import InputError, writable_directory
from rlhflab.progress import console

BAD_INPUT = 2  # the exit code of every error a user's input causes
Command = TypeVar("Command", bound=Callable)


def fail(message: str, label: str = "error") -> NoReturn:
    """End the command: `label: message` on one line (the message shown as written), exit 2."""
    console.print(f"[red]{label}:[/red] {escape(message)}")
    raise typer.Exit(BAD_INPUT)


def _said(err: BaseException) -> tuple[str, str] | None:
    """(label, message) of an error the policy reports, or None for a bug."""
    if isinstance(err, InputError):
        return err.label, str(err)
    if isinstance(err, OSError) and err.filename is not None:
        return "error", f"{err.filename}: {err.strerror or err}"
    return None


@contextmanager
def reported(*errors: type[BaseException], label: str = "error", prefix: str = "") -> Iterator[None]:
    """Within it, an error of these types ends the command by `fail`, its message after `prefix`."""
    try:
        yield
    except errors as err:
        said = _said(err)
        fail(prefix + (said[1] if said else str(err)), said[0] if said and label == "error" else label)


def guarded(command: Command) -> Command:
    """`command` under the policy (module docstring); its name, signature and help unchanged."""
    @functools.wraps(command)
    def run(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except (InputError, OSError) as err:
            said = _said(err)
            if said is None:
                raise
            fail(said[1], said[0])

    return run


def writable_parent(path) -> None:
    """A file the command will write at its end, checked at its start: its directory can be
    made and written in (an OutputPathError otherwise)."""
    writable_directory(Path(path).parent)
