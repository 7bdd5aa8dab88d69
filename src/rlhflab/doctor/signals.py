"""Small pure functions over metric series, shared by the rules."""

from __future__ import annotations

import bisect
import heapq
import statistics
from collections import Counter
from typing import TYPE_CHECKING, Callable, Sequence

if TYPE_CHECKING:
    from rlhflab.doctor.table import MetricTable, Series


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
    if len(values) < width:
        return []
    window_sorted = sorted(values[:width])  # kept sorted as the window slides: O(n w) moves, in C
    middle = width // 2
    out = []
    for i in range(width - 1, len(values)):
        if i >= width:
            del window_sorted[bisect.bisect_left(window_sorted, values[i - width])]
            bisect.insort(window_sorted, values[i])
        out.append(window_sorted[middle] if width % 2 else (window_sorted[middle - 1] + window_sorted[middle]) / 2)
    return out


def running_medians(values: Sequence[float]) -> list[float]:
    """Entry i is the median of values[:i] (the upper one of an even count: sorted(values[:i])[i // 2]),
    for i from 1: two heaps, O(n log n), where sorting each prefix is O(n^2 log n)."""
    lower: list[float] = []  # the i // 2 smallest, negated (a max-heap)
    upper: list[float] = []  # the rest; its minimum is the median
    out = []
    for i, v in enumerate(values[:-1] if values else [], start=1):
        if lower and v < -lower[0]:
            heapq.heappush(lower, -v)
        else:
            heapq.heappush(upper, v)
        while len(lower) > i // 2:
            heapq.heappush(upper, -heapq.heappop(lower))
        while len(lower) < i // 2:
            heapq.heappush(lower, -heapq.heappop(upper))
        out.append(upper[0])
    return out


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


def noise_sigma(values: Sequence[float]) -> float:
    """Standard deviation of a series' step-to-step noise, free of its trend: the median
    absolute second difference over 0.6745 x sqrt(6) (a second difference of white noise
    has variance 6 sigma^2 and cancels any linear trend; the median, scaled by the normal's
    0.6745, ignores a few outliers: Hampel 1974). 0 for fewer than 3 points."""
    if len(values) < 3:
        return 0.0
    second = [abs(values[i + 1] - 2 * values[i] + values[i - 1]) for i in range(1, len(values) - 1)]
    return statistics.median(second) / (0.6745 * 6 ** 0.5)


def early_level(values: Sequence[float], width: int) -> float | None:
    """The run's early level of a series that starts at 0 by construction (a KL to the
    reference before the first update): its median over the second window of `width`
    points, after the first updates have moved it, or its noise sigma when that is higher (a
    series still within its noise of 0 has no level to grow from). None when the run is
    shorter than two windows."""
    if len(values) < 2 * width:
        return None
    return max(statistics.median(values[width:2 * width]), noise_sigma(values))


def resolution(values: Sequence[float]) -> float:
    """Half a unit of the last decimal the log kept for this series (a value printed as
    0.123 is known to 5e-4); 0 for a constant series, taken at its value, and for values
    written with every digit (a float written by `json`), whose rounding is float32's."""
    if len(set(values)) <= 1:
        return 0.0
    decimals = 0
    for value in values:
        mantissa, _, exponent = repr(float(value)).partition("e")
        digits = len(mantissa.partition(".")[2].rstrip("0"))
        decimals = max(decimals, digits - int(exponent or 0))
    return 0.0 if decimals >= 15 else 0.5 * 10.0 ** -decimals


def printed_resolution(table: MetricTable, series: Series) -> float:
    """Half a unit of the last decimal the log printed this series with: the way the log
    prints its non-integer series that vary (their most common resolution: a console
    writing `%.3f` everywhere, a JSON log writing every digit), or the series' own where it
    shows more digits. A series' own values alone do not tell it: a JSON log writes a
    learning rate of 3e-4 as `0.0003`, and a constant series (all 0.000) shows nothing."""
    own = resolution(series.values) if len(set(series.values)) > 1 else float("inf")
    printed = [resolution(s.values) for name, s in table.series.items()
               if name not in table.derived and len(set(s.values)) > 1 and any(v != int(v) for v in s.values)]
    usual = Counter(printed).most_common(1)[0][0] if printed else 0.0
    return min(own, usual)
