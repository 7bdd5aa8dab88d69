"""Simulated labeler: a Bradley-Terry chooser on the gold utility.

P(a preferred over b) = sigmoid((u(a) - u(b)) / tau), the Bradley-Terry model that the
reward model's loss assumes (Christiano et al., 2017; Ouyang et al., 2022), so a
perfectly trained RM recovers u / tau up to a constant.
"""

from __future__ import annotations

import math
import random

from rlhflab.worlds.reviews.config import WorldConfig
from rlhflab.worlds.reviews.gold import gold_utility
from rlhflab.worlds.reviews.grammar import ReviewGrammar


def preference_probability(u_a: float, u_b: float, tau: float) -> float:
    """P(a preferred over b) = sigmoid((u_a - u_b) / tau), computed without overflow."""
    z = (u_a - u_b) / tau
    if z >= 0:
        return 1.0 / (1.0 + math.exp(-z))
    e = math.exp(z)
    return e / (1.0 + e)


class SimulatedLabeler:
    """Compares two responses to one prompt by their gold utility, with noise tau."""

    def __init__(self, grammar: ReviewGrammar, config: WorldConfig) -> None:
        self.grammar = grammar
        self.config = config

    def probability_first(self, prompt: str, a: str, b: str) -> float:
        """P(the labeler prefers response a to response b)."""
        u_a = gold_utility(self.grammar, self.config, prompt, a)
        u_b = gold_utility(self.grammar, self.config, prompt, b)
        return preference_probability(u_a, u_b, self.config.labeler_tau)

    def prefers_first(self, prompt: str, a: str, b: str, rng: random.Random) -> bool:
        """One noisy label: True if a is preferred (one rng.random() draw)."""
        u_a = gold_utility(self.grammar, self.config, prompt, a)
        u_b = gold_utility(self.grammar, self.config, prompt, b)
        return self.prefers_higher(u_a, u_b, rng)

    def prefers_higher(self, u_a: float, u_b: float, rng: random.Random) -> bool:
        """`prefers_first` for responses whose utilities are known already (one draw)."""
        return rng.random() < preference_probability(u_a, u_b, self.config.labeler_tau)
