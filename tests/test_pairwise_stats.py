"""The statistics of side-by-side studies against independent references: Wilson's
interval by hand, Bradley-Terry strengths against choix's maximum-likelihood fit, bootstrap
intervals against studies simulated with known strengths, the comparisons needed against a
simulation of the test itself."""

import math

import numpy as np
import pytest

from rlhflab.studies.pairwise import (
    bootstrap_strengths,
    bradley_terry,
    comparisons_needed,
    simulated_power,
    strongly_connected,
    wilson_interval,
    win_matrix,
    win_rate,
)


def simulated_outcomes(strengths, comparisons: int, rng) -> list[tuple[int, int]]:
    """(winner, loser) of `comparisons` random pairs, drawn from the Bradley-Terry model."""
    out = []
    for _ in range(comparisons):
        i, j = rng.choice(len(strengths), 2, replace=False)
        p = 1 / (1 + math.exp(strengths[j] - strengths[i]))
        out.append((i, j) if rng.random() < p else (j, i))
    return out


def test_wilson_interval_by_hand():
    # 6 of 10, z = 1.959964: centre (0.6 + z^2/20) / (1 + z^2/10), half-width z sqrt(0.024 + z^2/400) / (1 + z^2/10)
    z = 1.959964
    centre, half = (0.6 + z * z / 20) / (1 + z * z / 10), z * math.sqrt(0.024 + z * z / 400) / (1 + z * z / 10)
    assert wilson_interval(6, 10) == pytest.approx((centre - half, centre + half), abs=1e-6)
    assert wilson_interval(6, 10) == pytest.approx((0.3127, 0.8318), abs=1e-4)
    rate = win_rate(60, 40, ties=7, both_bad=3)
    assert rate.rate == 0.6 and rate.decided == 100 and rate.total == 110 and not rate.no_preference
    assert win_rate(0, 0, ties=4).rate is None and win_rate(0, 0).no_preference


def test_bradley_terry_is_choix_maximum_likelihood_fit():
    choix = pytest.importorskip("choix")
    rng = np.random.default_rng(1)
    for systems in (2, 3, 5, 8):
        strengths = rng.normal(0, 1, systems)
        outcomes = simulated_outcomes(strengths, 60 * systems, rng)
        theirs = choix.ilsr_pairwise(systems, outcomes, alpha=0.0, tol=1e-12)
        mine = bradley_terry(win_matrix(outcomes, systems))
        assert np.abs(mine - (theirs - theirs.mean())).max() < 1e-6
        assert abs(mine.mean()) < 1e-12


def test_bradley_terry_refuses_a_system_that_never_loses():
    outcomes = [(0, 1), (0, 1), (1, 2), (2, 1), (0, 2)]
    assert not strongly_connected(win_matrix(outcomes, 3))
    with pytest.raises(ValueError, match="strongly connected"):
        bradley_terry(win_matrix(outcomes, 3))


def test_bootstrap_intervals_cover_known_strengths_90_to_99_percent_of_the_time():
    truth = np.array([0.0, 0.4, -0.3, 0.8])
    truth = truth - truth.mean()
    rng = np.random.default_rng(7)
    covered = total = 0
    for study in range(100):
        outcomes = simulated_outcomes(truth, 360, rng)
        _, low, high, used = bootstrap_strengths(outcomes, len(truth), draws=200, seed=study)
        assert used == 200
        covered += int(((low <= truth) & (truth <= high)).sum())
        total += len(truth)
    print(f"the 95% intervals held the truth {covered} of {total} times ({covered / total:.3f})")
    assert 0.90 <= covered / total <= 0.99, covered / total


def test_comparisons_needed_for_60_40_is_the_normal_approximation_and_a_simulation_agrees():
    # ((1.96 x 0.5 + 0.8416 x sqrt(0.24)) / 0.1)^2 = 193.9
    assert comparisons_needed(0.6) == 194
    assert simulated_power(0.6, 194) == pytest.approx(0.80, abs=0.03)
    assert simulated_power(0.6, 100) < 0.6 < simulated_power(0.6, 300)
