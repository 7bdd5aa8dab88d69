"""Small pure functions over metric series, shared by the rules."""

from __future__ import annotations

import statistics
from typing import Callable, Sequence


def window(n: int) -> int:
    """Smoothing/persistence window: 1/16 of the run, at least 3 points."""
    return max(3, n // 16)


def smooth(values: Sequence[float], width: int) -> list[float]:
    """Trailing moving average (causal, so an onset is never dated before its evidence)."""
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v
        if i >= width:
            total -= values[i - width]
        out.append(total / min(i + 1, width))
    return out


def rolling_median(values: Sequence[float], width: int) -> list[float]:
    """Trailing median over complete windows of `width` points (causal; the first
    width - 1 points have no value and are left out): robust to one outlier in a window,
    where a mean is not."""
    return [statistics.median(values[i - width + 1 : i + 1]) for i in range(width - 1, len(values))]


def baseline(values: Sequence[float], width: int) -> float:
    """Mean of the first `width` points: the run's starting level."""
    return statistics.fmean(values[:width])


def sustained(flags: Sequence[bool], length: int) -> int | None:
    """Index where the first run of at least `length` consecutive True flags starts."""
    run = 0
    for i, flag in enumerate(flags):
        run = run + 1 if flag else 0
        if run >= length:
            return i - length + 1
    return None


def first_where(values: Sequence[float], predicate: Callable[[float], bool], length: int) -> int | None:
    return sustained([predicate(v) for v in values], length)


def slope(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Least-squares slope of ys on xs (0 for fewer than 2 points)."""
    if len(xs) < 2:
        return 0.0
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    var = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / var if var else 0.0
