"""Rich progress bars shared by the stages; a no-op bar when output is not wanted."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, Protocol

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

console = Console(stderr=True, soft_wrap=True)  # long messages stay on one line when piped


class Bar(Protocol):
    def advance(self, n: int = 1, **fields: str) -> None: ...


class _RichBar:
    def __init__(self, progress: Progress, task_id) -> None:
        self._progress, self._task = progress, task_id

    def advance(self, n: int = 1, **fields: str) -> None:
        self._progress.update(self._task, advance=n, **fields)


class _NullBar:
    def advance(self, n: int = 1, **fields: str) -> None:
        pass


@contextmanager
def progress_bar(description: str, total: int, enabled: bool = True, completed: int = 0) -> Iterator[Bar]:
    """A bar of `total` steps, `completed` of them already done (a resumed run)."""
    if not enabled:
        yield _NullBar()
        return
    progress = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[info]}"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=False,
    )
    with progress:
        task = progress.add_task(description, total=total, completed=completed, info="")
        yield _RichBar(progress, task)
