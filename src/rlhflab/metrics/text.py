"""Word-level measures of a batch of generated texts, for any trainer's samples.

A trainer's logged scalars can stay healthy while its text degenerates: a policy that
locks every answer into one opening template keeps its per-response diversity near 1,
because the measure never looks across responses. These read the words themselves,
pooled over the batch (what several responses share) and within each response (what
one response repeats). Pure python; words are lower-cased runs of letters, digits and
apostrophes, so punctuation and spacing never make two texts differ.

- ``opening_counts`` / ``opening_share``: how many responses open with the same first
  words (the "lock-in on a single opening template" that readers of RLHF samples report).
- ``near_duplicate_fraction``: responses whose word-bigram sets resemble another
  response's (Jaccard resemblance, Broder 1997, "On the resemblance and containment of
  documents") at or above a threshold: paraphrase-level copies that exact-match counts miss.
- ``repetition``: seq-rep-n of Welleck et al. (2019), "Neural Text Generation with
  Unlikelihood Training", sec. 5: 1 - unique n-grams / n-grams of one text. Deviation:
  n = 2 by default (the paper uses 4 on 1,000-token continuations; responses here are
  often under 30 words, and a reward that likes one word gets "precious precious
  beautiful precious beautiful", which repeats bigrams long before trigrams).
- ``prompt_copy``: the share of a response's word n-grams found in its prompt.
- ``pearson``: the correlation of two lists (reward against length, against repetition).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence

__all__ = ["words", "opening_counts", "opening_share", "near_duplicate_fraction", "repetition", "prompt_copy",
           "pearson", "OPENING_WORDS", "NEAR_DUPLICATE_JACCARD", "REPETITION_N", "PROMPT_COPY_N"]

OPENING_WORDS = 3
"""Words that make an opening: enough to name a template ("as an ai", "the answer is")."""
NEAR_DUPLICATE_JACCARD = 0.8
"""Resemblance of word-bigram sets at which two responses count as near-duplicates."""
REPETITION_N = 2
"""n of seq-rep-n within a response."""
PROMPT_COPY_N = 3
"""n of the word n-grams a response shares with its prompt."""

_WORD = re.compile(r"[^\W_]+(?:'[^\W_]+)*")


def words(text: str) -> tuple[str, ...]:
    """The lower-cased words of `text` (letters and digits, inner apostrophes kept)."""
    return tuple(_WORD.findall(text.casefold()))


Text = str | tuple[str, ...]
"""A text, or its words already split by `words` (a batch is split once, then measured)."""


def _as_words(text: Text) -> tuple[str, ...]:
    return text if isinstance(text, tuple) else words(text)


def _ngrams(tokens: Sequence[str], n: int) -> list[tuple[str, ...]]:
    return [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]


def opening_counts(texts: Sequence[Text], n: int = OPENING_WORDS) -> Counter:
    """How many texts open with each first-`n`-words tuple (a shorter text is its own
    opening); texts without a word open with nothing and are not counted."""
    return Counter(w[:n] for w in map(_as_words, texts) if w)


def opening_share(texts: Sequence[Text], n: int = OPENING_WORDS) -> float:
    """The share of texts that open with the batch's most common opening: 1/len(texts)
    when every opening differs, 1 when all share one. Texts without a word share no
    opening (empty answers are a length collapse, not a template) but count in the
    denominator; 0.0 for a batch without words."""
    counts = opening_counts(texts, n)
    return max(counts.values()) / len(texts) if counts else 0.0


def near_duplicate_fraction(texts: Sequence[Text], threshold: float = NEAR_DUPLICATE_JACCARD) -> float:
    """The share of texts whose word-bigram set has Jaccard resemblance >= `threshold`
    with another text's (Broder 1997). Exact duplicates count; a text of fewer than two
    words is compared by its words, two texts without a word are the same text.

    Exact, and fast on varied batches: the prefix filter of AllPairs (Bayardo et al. 2007,
    "Scaling up all pairs similarity search", sec. 4). Sets are ordered rarest element
    first; a pair with J >= t shares at least ceil(t x |A|) elements of A, so the first
    shared element lies in A's first |A| - ceil(t x |A|) + 1 elements, and in B's likewise:
    only pairs whose prefixes meet are compared.

    Returns:
        A float in [0, 1]; 0.0 for fewer than two texts.
    """
    if len(texts) < 2:
        return 0.0
    shingles = []
    for text in texts:
        w = _as_words(text)
        shingles.append(frozenset(_ngrams(w, 2)) if len(w) >= 2 else frozenset((x,) for x in w))
    frequency = Counter(g for s in shingles for g in s)
    flagged = [False] * len(shingles)
    empty = [i for i, s in enumerate(shingles) if not s]
    if len(empty) >= 2:
        for i in empty:
            flagged[i] = True
    index: dict[tuple, list[int]] = {}
    for i, a in enumerate(shingles):
        if not a:
            continue
        ordered = sorted(a, key=lambda g: (frequency[g], g))
        prefix = ordered[:len(a) - math.ceil(threshold * len(a) - 1e-9) + 1]
        candidates = {j for g in prefix for j in index.get(g, ())}
        for j in candidates:
            b = shingles[j]
            if flagged[i] and flagged[j]:
                continue
            if len(a & b) >= threshold * len(a | b) - 1e-12:
                flagged[i] = flagged[j] = True
        for g in prefix:
            index.setdefault(g, []).append(i)
    return sum(flagged) / len(texts)


def repetition(text: Text, n: int = REPETITION_N) -> float:
    """seq-rep-n (Welleck et al. 2019): 1 - unique n-grams / n-grams of the text's words;
    0.0 for a text of fewer than n words."""
    grams = _ngrams(_as_words(text), n)
    return 1.0 - len(set(grams)) / len(grams) if grams else 0.0


def prompt_copy(prompt: Text, response: Text, n: int = PROMPT_COPY_N) -> float:
    """The share of the response's word n-grams that also occur in the prompt; 0.0 for a
    response of fewer than n words."""
    grams = _ngrams(_as_words(response), n)
    if not grams:
        return 0.0
    in_prompt = set(_ngrams(_as_words(prompt), n))
    return sum(g in in_prompt for g in grams) / len(grams)


def pearson(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Pearson correlation of two equal-length lists; nan when either is constant or
    fewer than 3 pairs are given."""
    if len(xs) != len(ys):
        raise ValueError(f"pearson: {len(xs)} values against {len(ys)}")
    if len(xs) < 3:
        return math.nan
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys))
    sxx = sum((x - mx) ** 2 for x in xs)
    syy = sum((y - my) ** 2 for y in ys)
    return sxy / math.sqrt(sxx * syy) if sxx > 0 and syy > 0 else math.nan
