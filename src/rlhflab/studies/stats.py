"""The statistics of a rating study, as pure functions over arrays.

- `krippendorff_alpha`: Krippendorff's alpha for ordinal (or interval, nominal) data with
  missing values, from the coincidence matrix (Krippendorff 2011, "Computing
  Krippendorff's Alpha-Reliability", sections C-E; its worked example gives nominal
  0.743, ordinal 0.815, interval 0.849, which the tests reproduce).
- `crossed_bootstrap`: an interval for a mean rating that resamples both the items and
  the raters (the "pigeonhole" bootstrap of Owen 2007, "The pigeonhole bootstrap",
  Ann. Appl. Stat. 1(2)): with few raters their leniency is part of the uncertainty,
  which resampling items alone would hide.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Sequence

import numpy as np

Level = Literal["nominal", "ordinal", "interval"]


def _distance(values: np.ndarray, counts: np.ndarray, level: Level) -> np.ndarray:
    """delta^2(c, k) between the sorted category `values` (Krippendorff 2011, section E).
    Ordinal: (sum of n_g for g from c to k, minus (n_c + n_k) / 2)^2, n_g the pairable values' counts."""
    if level == "nominal":
        return 1.0 - np.eye(len(values))
    if level == "interval":
        return (values[:, None] - values[None, :]) ** 2
    cumulative = np.concatenate([[0.0], np.cumsum(counts)])
    lo = np.minimum.outer(np.arange(len(values)), np.arange(len(values)))
    hi = np.maximum.outer(np.arange(len(values)), np.arange(len(values)))
    between = cumulative[hi + 1] - cumulative[lo]
    return (between - (counts[lo] + counts[hi]) / 2.0) ** 2


def krippendorff_alpha(unit: Sequence[int], value: Sequence[float], level: Level = "ordinal",
                       categories: Sequence[float] | None = None) -> float:
    """Alpha over ratings given as parallel arrays (the unit rated, the value given).

    Units with a single value are not pairable and are left out; `categories` are the
    scale's values (default: the values seen). NaN when no unit has two values or every
    value is the same (no expected disagreement)."""
    unit = np.asarray(unit)
    value = np.asarray(value, dtype=float)
    cats = np.unique(value) if categories is None else np.asarray(sorted(categories), dtype=float)
    index = np.searchsorted(cats, value)
    if np.any(index >= len(cats)) or np.any(cats[np.minimum(index, len(cats) - 1)] != value):
        raise ValueError("a value outside the categories")
    units, unit_index = np.unique(unit, return_inverse=True)
    counts_per_unit = np.zeros((len(units), len(cats)))
    np.add.at(counts_per_unit, (unit_index, index), 1.0)
    m = counts_per_unit.sum(axis=1)
    pairable = counts_per_unit[m >= 2]
    m = m[m >= 2]
    if len(m) == 0:
        return float("nan")
    # o_ck = sum over units of n_uc * (n_uk - [c == k]) / (m_u - 1)
    coincidence = np.einsum("uc,uk->ck", pairable / (m - 1)[:, None], pairable)
    coincidence -= np.diag((pairable / (m - 1)[:, None]).sum(axis=0))
    n_c = coincidence.sum(axis=1)
    n = n_c.sum()
    delta = _distance(cats, n_c, level)
    expected = (np.outer(n_c, n_c) * delta).sum()
    if expected == 0:
        return float("nan")
    return float(1.0 - (n - 1.0) * (coincidence * delta).sum() / expected)


@dataclass(frozen=True)
class Interval:
    mean: float
    low: float
    high: float
    method: str


def crossed_bootstrap_draws(item: Sequence[int], rater: Sequence[int], value: Sequence[float],
                            group: Sequence[int] | None = None, draws: int = 2000, seed: int = 0) -> np.ndarray:
    """Bootstrap means of `value` per group (draws, groups), resampling items and raters
    together: each draw weighs a rating by (times its item was drawn) x (times its rater was
    drawn). Items are drawn with replacement within their own group (a system's items stay
    its own); raters are drawn once per draw for every group, since the same people rate
    every system and their leniency moves all groups alike. NaN where a draw left a group
    no rating."""
    value = np.asarray(value, dtype=float)
    group = np.zeros(len(value), dtype=int) if group is None else np.asarray(group)
    groups = int(group.max()) + 1 if len(group) else 0
    items, item_index = np.unique(np.asarray(item), return_inverse=True)
    raters, rater_index = np.unique(np.asarray(rater), return_inverse=True)
    item_group = np.zeros(len(items), dtype=int)
    item_group[item_index] = group
    rng = np.random.default_rng(seed)
    item_weight = np.zeros((draws, len(items)))
    for g in range(groups):
        members = np.flatnonzero(item_group == g)
        if len(members):
            item_weight[:, members] = rng.multinomial(len(members), np.full(len(members), 1.0 / len(members)),
                                                      size=draws)
    rater_weight = rng.multinomial(len(raters), np.full(len(raters), 1.0 / len(raters)), size=draws)
    weight = item_weight[:, item_index] * rater_weight[:, rater_index]  # (draws, ratings)
    means = np.full((draws, groups), np.nan)
    for g in range(groups):
        mine = group == g
        total = weight[:, mine].sum(axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            means[:, g] = np.where(total > 0, weight[:, mine] @ value[mine] / np.where(total > 0, total, 1), np.nan)
    return means


def percentile_interval(draws: np.ndarray, level: float = 0.95) -> tuple[float, float]:
    kept = draws[np.isfinite(draws)]
    if not len(kept):
        return float("nan"), float("nan")
    tail = (1.0 - level) / 2.0
    low, high = np.quantile(kept, [tail, 1.0 - tail])
    return float(low), float(high)


def crossed_bootstrap(item: Sequence[int], rater: Sequence[int], value: Sequence[float], draws: int = 2000,
                      seed: int = 0, level: float = 0.95) -> Interval:
    """The mean of `value` with a percentile interval from resampling items and raters
    together (`crossed_bootstrap_draws` with one group). Draws where no drawn item was rated
    by a drawn rater are left out."""
    value = np.asarray(value, dtype=float)
    if len(value) == 0:
        return Interval(float("nan"), float("nan"), float("nan"), "no ratings")
    means = crossed_bootstrap_draws(item, rater, value, None, draws, seed)[:, 0]
    low, high = percentile_interval(means, level)
    return Interval(float(value.mean()), low, high,
                    f"bootstrap over {len(set(item))} items x {len(set(rater))} raters, {draws} draws, "
                    f"percentile {level:.0%}")


def average_ranks(values: Sequence[float]) -> np.ndarray:
    """Ranks from 1, ties given the mean of the ranks they span."""
    values = np.asarray(values, dtype=float)
    order = np.argsort(values, kind="stable")
    ranks = np.empty(len(values))
    ranks[order] = np.arange(1, len(values) + 1)
    for value in np.unique(values):
        tied = values == value
        ranks[tied] = ranks[tied].mean()
    return ranks


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rank correlation: Pearson's on average ranks (NaN when either is constant)."""
    rx, ry = average_ranks(x), average_ranks(y)
    if rx.std() == 0 or ry.std() == 0:
        return float("nan")
    return float(np.corrcoef(rx, ry)[0, 1])


def spearman_interval(x: Sequence[float], y: Sequence[float], draws: int = 2000, seed: int = 0,
                      level: float = 0.95) -> Interval:
    """Spearman's rho with a percentile interval from resampling the items (pairs)."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    rng = np.random.default_rng(seed)
    rhos = np.array([spearman(x[idx], y[idx]) for idx in rng.integers(0, len(x), size=(draws, len(x)))])
    low, high = percentile_interval(rhos, level)
    return Interval(spearman(x, y), low, high, f"bootstrap over {len(x)} items, {draws} draws, percentile {level:.0%}")
