"""Named random streams derived from the run seed, so each consumer (corpus, init,
sampling, prompts) has its own stream and changing one does not shift the others.
torch is imported where a torch stream is made: the seeds alone serve light code too
(the rating studies)."""

from __future__ import annotations

import hashlib
import random
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


def derive_seed(seed: int, *names: str) -> int:
    digest = hashlib.sha256(":".join([str(seed), *names]).encode()).digest()
    return int.from_bytes(digest[:8], "little") & 0x7FFF_FFFF_FFFF_FFFF


def py_rng(seed: int, *names: str) -> random.Random:
    return random.Random(derive_seed(seed, *names))


def torch_generator(seed: int, *names: str) -> torch.Generator:
    import torch

    generator = torch.Generator()
    generator.manual_seed(derive_seed(seed, *names))
    return generator


class RowStreams:
    """One random stream per row of a batch, each seeded from the run seed, a name and
    the row's index in the whole batch (its prompt's place, not its place in a process's
    share). A row's draws therefore depend only on the seed, the names and that index,
    never on which process samples it or beside which other rows: the property that lets
    rollouts be sharded over any number of processes (`rlhflab.distributed`)."""

    def __init__(self, seed: int, names: tuple[str, ...], rows: list[int]) -> None:
        self.seed, self.names, self.rows = seed, tuple(names), list(rows)
        self._generators: list[torch.Generator] | None = None  # made at the first draw

    def __len__(self) -> int:
        return len(self.rows)

    def rand(self, shape: tuple[int, int], dtype: torch.dtype | None = None) -> torch.Tensor:
        """Uniforms (rows, columns) on the CPU, row i from stream i (float64 unless `dtype` says)."""
        import torch

        rows, columns = shape
        if rows != len(self.rows):
            raise ValueError(f"{rows} rows drawn from {len(self.rows)} streams")
        if self._generators is None:
            self._generators = [torch_generator(self.seed, *self.names, str(row)) for row in self.rows]
        return torch.stack([torch.rand(columns, generator=g, dtype=dtype or torch.float64) for g in self._generators])

    def subset(self, index: list[int]) -> "RowStreams":
        """Fresh streams of the rows at positions `index` (as they were when created)."""
        return RowStreams(self.seed, self.names, [self.rows[i] for i in index])


def uniforms(shape: tuple[int, int], source: "torch.Generator | RowStreams") -> torch.Tensor:
    """float64 uniforms on the CPU from one generator for the batch, or one stream per row."""
    import torch

    if isinstance(source, RowStreams):
        return source.rand(shape)
    return torch.rand(shape, generator=source, dtype=torch.float64)


def rows_of(source: "torch.Generator | RowStreams", rows: list[int]) -> "torch.Generator | RowStreams":
    """The streams of `rows` (positions in `source`'s batch); one generator is shared by any rows."""
    return source.subset(rows) if isinstance(source, RowStreams) else source
