"""Diversity of a batch of generated responses: distinct-n, self-BLEU, duplicates.

Mode collapse after PPO shows up as fewer distinct n-grams, higher self-BLEU and
identical responses to different prompts. Pure python; a text is either a string
(split on whitespace) or an already tokenised sequence of tokens (str or int ids).

- ``distinct_n``: Li et al. (2016), "A Diversity-Promoting Objective Function for
  Neural Conversation Models", sec. 4.3: unique n-grams / total n-grams, pooled over
  the batch (n-grams never cross text boundaries).
- ``self_bleu``: Zhu et al. (2018), "Texygen: A Benchmarking Platform for Text
  Generation Models", sec. 3.3: the mean over texts of the BLEU of each text against
  all the others as references. BLEU is Papineni et al. (2002): clipped n-gram
  precisions p_1..p_max_n, uniform-weight geometric mean, brevity penalty against the
  closest reference length (ties to the shorter). A zero count for n >= 2 is
  smoothed with "method 1" of Chen & Cherry (2014), p_n = epsilon / max(total_n, 1),
  epsilon = 0.1 (NLTK's ``SmoothingFunction().method1``, which Texygen uses), so a
  short text that shares words but no 4-gram with the others does not score 0.
  As in NLTK, no unigram match at all gives BLEU 0.
  Deviation: Texygen's default is max_n = 3; we default to the standard BLEU-4.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

__all__ = ["distinct_n", "self_bleu", "identical_fraction", "SMOOTHING_EPS"]

Text = str | Sequence[str] | Sequence[int]

SMOOTHING_EPS = 0.1
"""Numerator given to a zero n-gram match count (Chen & Cherry 2014, method 1)."""


def _tokens(text: Text) -> tuple:
    return tuple(text.split()) if isinstance(text, str) else tuple(text)


def _ngrams(tokens: tuple, n: int) -> list[tuple]:
    return [tokens[i : i + n] for i in range(len(tokens) - n + 1)]


def distinct_n(texts: Sequence[Text], n: int) -> float:
    """Distinct-n: unique n-grams over total n-grams in the batch (Li et al. 2016).

    Args:
        texts: the batch, strings (split on whitespace) or token sequences.
        n: n-gram order, >= 1.

    Returns:
        A float in [0, 1]; 0.0 when the batch has no n-gram (all texts shorter than n).
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    unique: set[tuple] = set()
    total = 0
    for text in texts:
        grams = _ngrams(_tokens(text), n)
        total += len(grams)
        unique.update(grams)
    return len(unique) / total if total else 0.0


def _closest_ref_length(hyp_len: int, ref_lens: list[int]) -> int:
    # Papineni et al.: the reference length closest to the hypothesis; ties -> shorter
    return min(ref_lens, key=lambda r: (abs(r - hyp_len), r))


def self_bleu(texts: Sequence[Text], max_n: int = 4) -> float:
    """Self-BLEU of a batch (Zhu et al. 2018): mean BLEU of each text vs. all others.

    For text i with length c, n-gram counts h_n(g) and references j != i:

        m_n = sum_g min(h_n(g), max_{j != i} count_j(g))      (clipped matches)
        p_n = m_n / d_n  if m_n > 0  else  eps / max(d_n, 1)   (d_n = c - n + 1)
        BP  = 1 if c > r else exp(1 - r / c)                   (r = closest ref length)
        BLEU_i = BP * exp(sum_n log(p_n) / max_n)              (0 if m_1 == 0)

    The clipping maxima over "all texts but i" come from each n-gram's two largest
    counts in the batch, so the cost is linear in the number of n-grams (64 texts of
    30 words take a few milliseconds).

    Args:
        texts: the batch, strings (split on whitespace) or token sequences.
        max_n: highest n-gram order (uniform weights 1 / max_n).

    Returns:
        A float in [0, 1] (higher = less diverse); nan for fewer than 2 texts, which
        leave no reference.
    """
    if max_n < 1:
        raise ValueError(f"max_n must be >= 1, got {max_n}")
    toks = [_tokens(t) for t in texts]
    if len(toks) < 2:
        return float("nan")
    lengths = [len(t) for t in toks]
    # counts[n - 1][i]: Counter of the n-grams of text i
    counts = [[Counter(_ngrams(t, n)) for t in toks] for n in range(1, max_n + 1)]
    # top2[n - 1][g] = (largest count, index of a text holding it, second-largest count)
    top2: list[dict[tuple, tuple[int, int, int]]] = []
    for per_text in counts:
        best: dict[tuple, tuple[int, int, int]] = {}
        for i, counter in enumerate(per_text):
            for g, c in counter.items():
                c1, i1, c2 = best.get(g, (0, -1, 0))
                if c > c1:
                    best[g] = (c, i, c1)
                elif c > c2:
                    best[g] = (c1, i1, c)
        top2.append(best)

    total = 0.0
    for i in range(len(toks)):
        c = lengths[i]
        if c == 0:
            continue  # an empty hypothesis has BLEU 0
        log_precision_sum = 0.0
        no_unigram_match = False
        for n in range(1, max_n + 1):
            best = top2[n - 1]
            matches = 0
            for g, h in counts[n - 1][i].items():
                c1, i1, c2 = best[g]
                max_ref = c2 if i1 == i else c1  # the largest count among texts j != i
                matches += min(h, max_ref)
            denom = max(c - n + 1, 0)
            if matches == 0:
                if n == 1:
                    no_unigram_match = True
                    break
                p_n = SMOOTHING_EPS / max(denom, 1)
            else:
                p_n = matches / denom
            log_precision_sum += math.log(p_n)
        if no_unigram_match:
            continue
        r = _closest_ref_length(c, lengths[:i] + lengths[i + 1 :])
        brevity_penalty = 1.0 if c > r else math.exp(1.0 - r / c)
        total += brevity_penalty * math.exp(log_precision_sum / max_n)
    return total / len(toks)


def identical_fraction(texts: Sequence[Text]) -> float:
    """Fraction of texts that have an exact duplicate elsewhere in the batch.

    Every member of a duplicate group counts, e.g. ["a", "a", "b"] gives 2/3.
    Texts are compared as token sequences, so whitespace differences don't matter.

    Args:
        texts: the batch, strings (split on whitespace) or token sequences.

    Returns:
        A float in [0, 1]; 0.0 for an empty batch.
    """
    if not texts:
        return 0.0
    counts = Counter(_tokens(t) for t in texts)
    duplicated = sum(c for c in counts.values() if c > 1)
    return duplicated / len(texts)
