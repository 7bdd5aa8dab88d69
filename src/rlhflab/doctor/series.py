"""One metric over training as parallel tuples of steps and values, and the alignment of two."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Series:
    """One metric over training: parallel tuples of steps and finite values, sorted by step."""

    steps: tuple[int, ...]
    values: tuple[float, ...]

    def __len__(self) -> int:
        return len(self.values)

    @staticmethod
    def from_pairs(pairs: list[tuple[int, float]]) -> "Series":
        """Sorted by step; non-finite values are dropped (they are counted separately)."""
        clean = sorted((int(s), float(v)) for s, v in pairs if v is not None and math.isfinite(float(v)))
        return Series(tuple(s for s, _ in clean), tuple(v for _, v in clean))

    @staticmethod
    def from_lists(steps: list[int], values: list[float]) -> "Series":
        """From parallel lists of steps and finite values; sorted by step only if they are not."""
        if steps != sorted(steps):  # sorted() of a sorted list is one linear pass, in C
            order = sorted(range(len(steps)), key=steps.__getitem__)
            return Series(tuple(steps[i] for i in order), tuple(values[i] for i in order))
        return Series(tuple(steps), tuple(values))

    def scaled(self, factor: float) -> "Series":
        return Series(self.steps, tuple(v * factor for v in self.values))

    def squared(self) -> "Series":
        return Series(self.steps, tuple(v * v for v in self.values))


def aligned(a: Series, b: Series) -> tuple[Series, Series]:
    """The two series at the steps both have, so that value i of one pairs with value i of
    the other (a gold signal evaluated every few steps, a NaN dropped from one series)."""
    common = set(a.steps) & set(b.steps)

    def keep(s: Series) -> Series:
        pairs = [(step, v) for step, v in zip(s.steps, s.values) if step in common]
        return Series(tuple(step for step, _ in pairs), tuple(v for _, v in pairs))

    return keep(a), keep(b)
