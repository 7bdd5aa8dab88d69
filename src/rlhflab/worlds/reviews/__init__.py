"""The embedded ``reviews`` world: grammar, gold utility, simulated labeler, tokenizer.

A seeded probabilistic grammar of short movie reviews whose sentiment words come from
VADER's lexicon, a gold utility (VADER compound minus grammar, repetition and length
penalties) that makes reward hacking measurable, as in Gao et al. (2022), "Scaling
Laws for Reward Model Overoptimization", a Bradley-Terry labeler on that utility, and
a word-level tokenizer over the grammar's vocabulary. See ``docs/world.md``.
"""

from rlhflab.worlds.reviews.config import WorldConfig
from rlhflab.worlds.reviews.gold import GoldBreakdown, gold_breakdown, gold_utility
from rlhflab.worlds.reviews.grammar import ReviewGrammar
from rlhflab.worlds.reviews.labeler import SimulatedLabeler, preference_probability
from rlhflab.worlds.reviews.tokenizer import build_tokenizer
from rlhflab.worlds.reviews.world import ReviewsWorld

__all__ = [
    "GoldBreakdown",
    "ReviewGrammar",
    "ReviewsWorld",
    "SimulatedLabeler",
    "WorldConfig",
    "build_tokenizer",
    "gold_breakdown",
    "gold_utility",
    "preference_probability",
]
