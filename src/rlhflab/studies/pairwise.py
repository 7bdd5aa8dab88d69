"""The statistics of side-by-side comparisons, as pure functions.

- `win_rate`: wins / (wins + losses), with Wilson's score interval (Wilson 1927, JASA 22);
  ties and "both bad" are neither, and are reported as rates of their own.
- `bradley_terry`: strengths s_i with P(i beats j) = 1 / (1 + exp(s_j - s_i)) (Bradley and
  Terry 1952), fitted by maximum likelihood with the MM algorithm (Hunter 2004, "MM
  algorithms for generalized Bradley-Terry models", Ann. Stat. 32(1), eq. 3), centred to
  mean 0 on the log scale, as `choix` gives them.
- `bootstrap_strengths`: their intervals as Chatbot Arena gives them (Chiang et al. 2024,
  "Chatbot Arena", sec. 5 and its notebook): the comparisons resampled with replacement, the
  model refitted on each resample, percentile intervals.
- `comparisons_needed`: how many decisive comparisons tell a preference `p1` from `p0` with
  a two-sided test, by the normal approximation for one proportion.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist
from typing import Sequence

import numpy as np


def wilson_interval(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """Wilson's score interval for a proportion k / n (NaN, NaN for n = 0)."""
    if n == 0:
        return math.nan, math.nan
    z = NormalDist().inv_cdf(0.5 + level / 2)
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass(frozen=True)
class WinRate:
    wins: int
    losses: int
    ties: int
    both_bad: int
    rate: float | None  # wins / (wins + losses)
    low: float | None
    high: float | None

    @property
    def decided(self) -> int:
        return self.wins + self.losses

    @property
    def total(self) -> int:
        return self.wins + self.losses + self.ties + self.both_bad

    @property
    def no_preference(self) -> bool:
        """Its interval holds 1/2 (or nothing was decided)."""
        return self.low is None or self.low <= 0.5 <= self.high


def win_rate(wins: int, losses: int, ties: int = 0, both_bad: int = 0, level: float = 0.95) -> WinRate:
    decided = wins + losses
    if not decided:
        return WinRate(wins, losses, ties, both_bad, None, None, None)
    low, high = wilson_interval(wins, decided, level)
    return WinRate(wins, losses, ties, both_bad, wins / decided, low, high)


def win_matrix(outcomes: Sequence[tuple[int, int]], systems: int, weights: Sequence[float] | None = None) -> np.ndarray:
    """W[i, j] = (weighted) times i beat j, from (winner, loser) pairs."""
    wins = np.zeros((systems, systems))
    if len(outcomes):
        pairs = np.asarray(outcomes, dtype=int)
        np.add.at(wins, (pairs[:, 0], pairs[:, 1]), 1.0 if weights is None else np.asarray(weights, dtype=float))
    return wins


def strongly_connected(wins: np.ndarray) -> bool:
    """Whether every system can be reached from every other along "beat" edges: the
    condition for the maximum-likelihood strengths to exist and be unique (Hunter 2004,
    Assumption 1; Zermelo 1929)."""
    beats = wins > 0
    n = len(wins)

    def reach(adjacent: np.ndarray) -> int:
        seen, frontier = {0}, [0]
        while frontier:
            i = frontier.pop()
            for j in np.flatnonzero(adjacent[i]):
                if j not in seen:
                    seen.add(int(j))
                    frontier.append(int(j))
        return len(seen)

    return n <= 1 or (reach(beats) == n and reach(beats.T) == n)


def bradley_terry(wins: np.ndarray, tolerance: float = 1e-12, max_iterations: int = 100_000) -> np.ndarray:
    """Maximum-likelihood log-strengths from a win matrix, centred to mean 0 (module
    docstring). Needs a strongly connected comparison graph (`strongly_connected`); without
    one the strengths run off to infinity and ValueError says so."""
    if not strongly_connected(wins):
        raise ValueError("the comparisons are not strongly connected: some system never beats, or is never beaten "
                         "by, the others, so its maximum-likelihood strength is infinite")
    games = wins + wins.T  # n_ij
    total_wins = wins.sum(axis=1)
    gamma = np.ones(len(wins))
    for _ in range(max_iterations):
        with np.errstate(divide="ignore", invalid="ignore"):
            denominator = np.where(games > 0, games / (gamma[:, None] + gamma[None, :]), 0.0).sum(axis=1)
        updated = total_wins / denominator
        updated /= np.exp(np.log(updated).mean())  # the scale is free: fix the geometric mean at 1
        if np.max(np.abs(np.log(updated) - np.log(gamma))) < tolerance:
            gamma = updated
            break
        gamma = updated
    log_strength = np.log(gamma)
    return log_strength - log_strength.mean()


def bootstrap_strengths(outcomes: Sequence[tuple[int, int]], systems: int, draws: int = 1000, seed: int = 0,
                        level: float = 0.95) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """(strengths, low, high, draws used): the fit on all comparisons, and percentile
    intervals from refits on resamples of them. A resample whose comparisons are not
    strongly connected has no finite fit and is redrawn (at most `draws` more times);
    how many were used is returned."""
    strengths = bradley_terry(win_matrix(outcomes, systems))
    rng = np.random.default_rng(seed)
    pairs = np.asarray(outcomes, dtype=int)
    fits = []
    for _ in range(2 * draws):
        counts = rng.multinomial(len(pairs), np.full(len(pairs), 1.0 / len(pairs)))
        wins = win_matrix(pairs, systems, counts)
        if strongly_connected(wins):
            fits.append(bradley_terry(wins, tolerance=1e-9))
        if len(fits) == draws:
            break
    fitted = np.array(fits)
    tail = (1 - level) / 2
    low, high = np.quantile(fitted, [tail, 1 - tail], axis=0)
    return strengths, low, high, len(fits)


def comparisons_needed(p1: float, p0: float = 0.5, alpha: float = 0.05, power: float = 0.8) -> int:
    """Decisive comparisons for a two-sided test at `alpha` to tell a win rate `p1` from
    `p0` with `power`: n = ((z_{1-alpha/2} sqrt(p0 q0) + z_power sqrt(p1 q1)) / (p1 - p0))^2,
    the normal approximation for one proportion."""
    normal = NormalDist()
    z_alpha, z_power = normal.inv_cdf(1 - alpha / 2), normal.inv_cdf(power)
    n = ((z_alpha * math.sqrt(p0 * (1 - p0)) + z_power * math.sqrt(p1 * (1 - p1))) / (p1 - p0)) ** 2
    return math.ceil(n)


def simulated_power(p1: float, n: int, studies: int = 20_000, seed: int = 0, level: float = 0.95) -> float:
    """The share of simulated studies of `n` decisive comparisons at win rate `p1` whose
    Wilson interval leaves out 1/2."""
    rng = np.random.default_rng(seed)
    wins = rng.binomial(n, p1, size=studies)
    excluded = 0
    for k, count in zip(*np.unique(wins, return_counts=True)):
        low, high = wilson_interval(int(k), n, level)
        excluded += int(count) * (not low <= 0.5 <= high)
    return excluded / studies
