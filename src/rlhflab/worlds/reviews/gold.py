"""Gold utility of the reviews world (the "true" reward that the RM only approximates).

    u(prompt, response) = compound(text)
                          - ungrammatical_penalty * n_ungrammatical_sentences
                          - repeat_penalty * (n_duplicated_sentences + n_repeated_content_words)
                          - length_penalty * max(0, n_words - length_soft_limit)

where ``text = prompt + " " + response`` with whitespace normalised: the response is
read in the context of its prompt, so a response that finishes the prompt's sentence
is judged on the whole sentence (DESIGN.md says "of the response"; scoring the
response alone would count every continuation of "the plot was" as ungrammatical).
``compound`` is VADER's compound score in [-1, 1] (Hutto & Gilbert, 2014). Repeated
content words are occurrences beyond the first of any word outside the grammar's
function words; duplicated sentences are sentences equal to an earlier one.
"""

from __future__ import annotations

import functools
from collections import Counter
from dataclasses import dataclass

from vaderSentiment.vaderSentiment import SentimentIntensityAnalyzer

from rlhflab.worlds.reviews.config import WorldConfig
from rlhflab.worlds.reviews.grammar import ReviewGrammar


@functools.lru_cache(maxsize=1)
def sentiment_analyzer() -> SentimentIntensityAnalyzer:
    """The one shared VADER analyzer (loading its lexicon takes ~50 ms)."""
    return SentimentIntensityAnalyzer()


def review_text(prompt: str, response: str) -> str:
    """The full review scored by the gold utility: prompt, a space, response."""
    return " ".join(f"{prompt} {response}".split())


@dataclass(frozen=True)
class GoldBreakdown:
    """The gold utility of one review and its components, for logging."""

    sentiment: float
    """VADER compound of the full review, in [-1, 1]."""
    ungrammatical: int
    """Sentences (incl. an unterminated tail) matching no template."""
    repeats: int
    """Duplicated sentences plus repeated content-word occurrences."""
    excess_words: int
    """Words of the full review past ``length_soft_limit``."""
    utility: float
    """sentiment minus the weighted penalties."""


def count_repeats(grammar: ReviewGrammar, text: str) -> int:
    """Duplicated sentences + occurrences beyond the first of each content word."""
    sentences = grammar.split_sentences(text)
    duplicated = len(sentences) - len({tuple(s) for s in sentences})
    content = Counter(w for s in sentences for w in s if w not in grammar.function_words)
    repeated_words = sum(c - 1 for c in content.values())
    return duplicated + repeated_words


def gold_breakdown(
    grammar: ReviewGrammar, config: WorldConfig, prompt: str, response: str
) -> GoldBreakdown:
    """Gold utility of ``prompt + " " + response`` with its components."""
    text = review_text(prompt, response)
    sentiment = sentiment_analyzer().polarity_scores(text)["compound"]
    _, ungrammatical = grammar.count_ungrammatical(text)
    repeats = count_repeats(grammar, text)
    excess = max(0, len(text.split()) - config.length_soft_limit)
    utility = (
        sentiment
        - config.ungrammatical_penalty * ungrammatical
        - config.repeat_penalty * repeats
        - config.length_penalty * excess
    )
    return GoldBreakdown(sentiment, ungrammatical, repeats, excess, utility)


def gold_utility(grammar: ReviewGrammar, config: WorldConfig, prompt: str, response: str) -> float:
    """Gold utility u(prompt, response); see the module docstring."""
    return gold_breakdown(grammar, config, prompt, response).utility
