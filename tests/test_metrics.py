"""Masked statistics and diversity metrics: naive loop, hand-worked case, invariance."""

from __future__ import annotations

import math
import random
from collections import Counter

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlhflab.metrics.diversity import SMOOTHING_EPS, distinct_n, identical_fraction, self_bleu
from rlhflab.metrics.stats import (
    explained_variance,
    masked_mean,
    masked_sum,
    masked_var,
    masked_whiten,
)

GARBAGE = [1e6, -1e6, float("inf"), float("nan")]


def random_batch(seed: int, B: int, T: int, holes: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, T) float64 values and a bool mask with >= 1 real token per row.

    holes=False: right padding (a prefix of True); holes=True: any pattern.
    """
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(B, T, generator=gen, dtype=torch.float64) * 3 + 1
    if holes:
        mask = torch.rand(B, T, generator=gen) < 0.6
        mask[torch.arange(B), torch.randint(T, (B,), generator=gen)] = True
    else:
        lengths = torch.randint(1, T + 1, (B,), generator=gen)
        mask = torch.arange(T) < lengths[:, None]
    return x, mask


def real_elements(x: torch.Tensor, mask: torch.Tensor) -> list[list[float]]:
    """Per row, the python floats at real positions."""
    B, T = mask.shape
    return [[float(x[b, t]) for t in range(T) if mask[b, t]] for b in range(B)]


batches = st.tuples(
    st.integers(0, 2**31 - 1), st.integers(1, 6), st.integers(1, 12), st.booleans()
)


# ---------------------------------------------------------------- 1. naive loops


@settings(max_examples=40, deadline=None)
@given(batches)
def test_masked_stats_match_python_loop(batch):
    x, mask = random_batch(*batch)
    rows = real_elements(x, mask)
    flat = [v for row in rows for v in row]
    n = len(flat)

    mean = sum(flat) / n
    assert float(masked_sum(x, mask)) == pytest.approx(sum(flat), rel=1e-12, abs=1e-12)
    assert float(masked_mean(x, mask)) == pytest.approx(mean, rel=1e-12, abs=1e-12)
    for b, row in enumerate(rows):
        assert float(masked_sum(x, mask, dim=1)[b]) == pytest.approx(sum(row), abs=1e-12)
        assert float(masked_mean(x, mask, dim=1)[b]) == pytest.approx(sum(row) / len(row), abs=1e-12)

    sq = sum((v - mean) ** 2 for v in flat)
    assert float(masked_var(x, mask, unbiased=False)) == pytest.approx(sq / n, rel=1e-10, abs=1e-12)
    if n >= 2:
        var = sq / (n - 1)
        assert float(masked_var(x, mask)) == pytest.approx(var, rel=1e-10, abs=1e-12)
        for shift_mean in (True, False):
            w = masked_whiten(x, mask, shift_mean=shift_mean)
            for b in range(mask.shape[0]):
                for t in range(mask.shape[1]):
                    if mask[b, t]:
                        expected = (float(x[b, t]) - mean) / math.sqrt(var + 1e-8)
                        if not shift_mean:
                            expected += mean
                        assert float(w[b, t]) == pytest.approx(expected, rel=1e-9, abs=1e-9)
                    else:
                        assert float(w[b, t]) == 0.0


@settings(max_examples=30, deadline=None)
@given(batches)
def test_explained_variance_matches_python_loop(batch):
    seed, B, T, holes = batch
    returns, mask = random_batch(seed, B, T, holes)
    noise = torch.randn(B, T, generator=torch.Generator().manual_seed(seed + 1), dtype=torch.float64)
    values = returns + noise
    r = [v for row in real_elements(returns, mask) for v in row]
    v = [u for row in real_elements(values, mask) for u in row]
    n = len(r)
    if n < 2:
        return
    mr = sum(r) / n
    var_r = sum((a - mr) ** 2 for a in r) / n
    res = [a - b for a, b in zip(r, v)]
    mres = sum(res) / n
    var_res = sum((a - mres) ** 2 for a in res) / n
    expected = 1 - var_res / var_r
    assert explained_variance(values, returns, mask) == pytest.approx(expected, rel=1e-9, abs=1e-12)


# ---------------------------------------------------------------- 2. hand-worked


def test_masked_stats_hand_worked():
    x = torch.tensor([[1.0, 2.0, 100.0], [3.0, -7.0, 50.0]], dtype=torch.float64)
    mask = torch.tensor([[True, True, False], [True, False, False]])
    # real tokens: 1, 2, 3 -> sum 6, mean 2
    assert float(masked_sum(x, mask)) == 6.0
    assert float(masked_mean(x, mask)) == 2.0
    # per row: (1 + 2) / 2 = 1.5 and 3 / 1 = 3
    assert masked_mean(x, mask, dim=1).tolist() == [1.5, 3.0]
    # squared deviations 1, 0, 1 -> unbiased 2 / 2 = 1, biased 2 / 3
    assert float(masked_var(x, mask)) == 1.0
    assert float(masked_var(x, mask, unbiased=False)) == pytest.approx(2 / 3)
    # whiten: (x - 2) / sqrt(1 + 1e-8) -> -1, 0, 1 on real tokens, 0 on padding
    w = masked_whiten(x, mask)
    assert w.flatten().tolist() == pytest.approx([-1.0, 0.0, 0.0, 1.0, 0.0, 0.0], abs=1e-7)
    # shift_mean=False adds the mean 2 back: 1, 2, 3 (spread already 1)
    w = masked_whiten(x, mask, shift_mean=False)
    assert w.flatten().tolist() == pytest.approx([1.0, 2.0, 0.0, 3.0, 0.0, 0.0], abs=1e-7)


def test_explained_variance_hand_worked():
    returns = torch.tensor([[1.0, 2.0, 3.0, 99.0]])
    mask = torch.tensor([[True, True, True, False]])
    # perfect critic: residual 0 -> ev = 1
    assert explained_variance(returns.clone(), returns, mask) == 1.0
    # constant critic: residual variance = Var[returns] -> ev = 0
    assert explained_variance(torch.full_like(returns, 2.0), returns, mask) == pytest.approx(0.0)
    # values = [2, 2, 2]: residuals -1, 0, 1 -> Var 2/3, Var[returns] 2/3 -> 0
    # values = [1, 1, 1]: residuals 0, 1, 2 -> Var 2/3 as well: ev ignores a constant offset
    assert explained_variance(torch.ones_like(returns), returns, mask) == pytest.approx(0.0)
    # values = [1, 2, 2]: residuals 0, 0, 1 -> Var = 1/3 - 1/9 = 2/9 -> ev = 1 - (2/9)/(2/3) = 2/3
    values = torch.tensor([[1.0, 2.0, 2.0, -5.0]])
    assert explained_variance(values, returns, mask) == pytest.approx(2 / 3)
    # constant returns -> Var = 0 -> nan
    assert math.isnan(explained_variance(values, torch.ones_like(returns), mask))


def test_masked_var_needs_enough_tokens():
    x = torch.tensor([[1.0, 2.0]])
    one = torch.tensor([[True, False]])
    with pytest.raises(ValueError):
        masked_var(x, one)  # unbiased variance of a single token is undefined
    assert float(masked_var(x, one, unbiased=False)) == 0.0
    with pytest.raises(ValueError):
        masked_var(x, torch.zeros_like(one), unbiased=False)
    with pytest.raises(ValueError):
        masked_whiten(x, one)


def test_masked_mean_of_empty_row_is_nan():
    x = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    mask = torch.tensor([[True, False], [False, False]])
    per_row = masked_mean(x, mask, dim=1)
    assert per_row[0] == 1.0 and torch.isnan(per_row[1])


def test_mask_must_be_bool_and_same_shape():
    x = torch.ones(2, 3)
    with pytest.raises(TypeError):
        masked_mean(x, torch.ones(2, 3))  # a float 0/1 mask is the other convention's habit
    with pytest.raises(ValueError):
        masked_mean(x, torch.ones(2, 2, dtype=torch.bool))


# ---------------------------------------------------------------- 3. invariance


@pytest.mark.parametrize("garbage", GARBAGE)
@settings(max_examples=15, deadline=None)
@given(batch=batches)
def test_masked_stats_ignore_padded_values(garbage, batch):
    x, mask = random_batch(*batch)
    dirty = x.masked_fill(~mask, garbage)
    assert torch.equal(masked_sum(dirty, mask), masked_sum(x, mask))
    assert torch.equal(masked_mean(dirty, mask, dim=1), masked_mean(x, mask, dim=1))
    assert torch.equal(masked_var(dirty, mask, unbiased=False), masked_var(x, mask, unbiased=False))
    if int(mask.sum()) >= 2:
        assert torch.equal(masked_whiten(dirty, mask), masked_whiten(x, mask))
        values = x * 0.5
        ev = explained_variance(values.masked_fill(~mask, garbage), dirty, mask)
        ev_clean = explained_variance(values, x, mask)
        assert ev == ev_clean or (math.isnan(ev) and math.isnan(ev_clean))


@settings(max_examples=20, deadline=None)
@given(batch=batches, extra=st.integers(1, 5))
def test_masked_stats_ignore_extra_padding_columns(batch, extra):
    x, mask = random_batch(*batch)
    B = x.shape[0]
    x_wide = torch.cat([x, torch.full((B, extra), 123.0, dtype=x.dtype)], dim=1)
    mask_wide = torch.cat([mask, torch.zeros(B, extra, dtype=torch.bool)], dim=1)
    assert float(masked_mean(x_wide, mask_wide)) == pytest.approx(float(masked_mean(x, mask)), rel=1e-12)
    assert masked_sum(x_wide, mask_wide, dim=1).tolist() == pytest.approx(masked_sum(x, mask, dim=1).tolist())
    if int(mask.sum()) >= 2:
        w = masked_whiten(x_wide, mask_wide)
        assert torch.allclose(w[:, : x.shape[1]], masked_whiten(x, mask))
        assert torch.all(w[:, x.shape[1] :] == 0)


# ================================================================ diversity

VOCAB = ["a", "b", "c", "d"]
small_texts = st.lists(
    st.lists(st.sampled_from(VOCAB), min_size=0, max_size=8).map(" ".join), min_size=2, max_size=6
)


def brute_ngrams(tokens: list[str], n: int) -> list[tuple[str, ...]]:
    # zip of shifted copies: an independent way to list the n-grams
    return list(zip(*[tokens[k:] for k in range(n)])) if n <= len(tokens) else []


def brute_bleu(hyp: list[str], refs: list[list[str]], max_n: int) -> float:
    """Sentence BLEU written out literally, with method-1 smoothing."""
    if not hyp:
        return 0.0
    log_p = 0.0
    for n in range(1, max_n + 1):
        grams = brute_ngrams(hyp, n)
        matches = 0
        for g in set(grams):
            in_hyp = grams.count(g)
            in_refs = max(brute_ngrams(ref, n).count(g) for ref in refs)
            matches += min(in_hyp, in_refs)
        if matches == 0:
            if n == 1:
                return 0.0
            p = SMOOTHING_EPS / max(len(grams), 1)
        else:
            p = matches / len(grams)
        log_p += math.log(p) / max_n
    c = len(hyp)
    r = sorted((abs(len(ref) - c), len(ref)) for ref in refs)[0][1]
    bp = 1.0 if c > r else math.exp(1 - r / c)
    return bp * math.exp(log_p)


@settings(max_examples=60, deadline=None)
@given(texts=small_texts, max_n=st.integers(1, 4))
def test_self_bleu_matches_brute_force(texts, max_n):
    toks = [t.split() for t in texts]
    expected = sum(brute_bleu(toks[i], toks[:i] + toks[i + 1 :], max_n) for i in range(len(toks))) / len(toks)
    assert self_bleu(texts, max_n=max_n) == pytest.approx(expected, rel=1e-12, abs=1e-12)


@settings(max_examples=60, deadline=None)
@given(texts=small_texts, n=st.integers(1, 4))
def test_distinct_n_and_identical_fraction_match_brute_force(texts, n):
    all_grams = [g for t in texts for g in brute_ngrams(t.split(), n)]
    expected = len(set(all_grams)) / len(all_grams) if all_grams else 0.0
    assert distinct_n(texts, n) == expected
    dup = sum(
        1 for i, t in enumerate(texts)
        if any(t.split() == u.split() for j, u in enumerate(texts) if j != i)
    )
    assert identical_fraction(texts) == dup / len(texts)


def test_distinct_n_hand_worked():
    texts = ["a b a", "a b"]
    # unigrams a b a a b -> 2 unique / 5
    assert distinct_n(texts, 1) == pytest.approx(2 / 5)
    # bigrams "a b" "b a" "a b" -> 2 unique / 3 (none across the text boundary)
    assert distinct_n(texts, 2) == pytest.approx(2 / 3)
    assert distinct_n(texts, 4) == 0.0  # no 4-gram at all
    assert distinct_n([], 1) == 0.0
    # token lists are accepted as well
    assert distinct_n([[1, 2, 1], [1, 2]], 1) == pytest.approx(2 / 5)
    with pytest.raises(ValueError):
        distinct_n(texts, 0)


def test_self_bleu_hand_worked():
    # hyp "a b c d" vs ref "a b c e" (and symmetrically):
    #   p1 = 3/4, p2 = 2/3 (ab bc), p3 = 1/2 (abc), p4 = 0 -> smoothed 0.1 / 1
    #   BP = 1 (equal lengths); BLEU = (3/4 * 2/3 * 1/2 * 0.1) ** (1/4) = 0.025 ** 0.25
    assert self_bleu(["a b c d", "a b c e"]) == pytest.approx(0.025**0.25)
    # "a b" vs "a b c d":
    #   hyp "a b": p1 = p2 = 1, p3 = p4 = 0.1 / max(0, 1) = 0.1, BP = exp(1 - 4/2) = e^-1
    #     -> e^-1 * (0.01) ** 0.25
    #   hyp "a b c d": p1 = 2/4, p2 = 1/3, p3 = 0.1 / 2, p4 = 0.1 / 1, BP = 1 (4 > 2)
    #     -> (1/2 * 1/3 * 0.05 * 0.1) ** 0.25
    short = math.exp(-1) * 0.01**0.25
    long = (0.5 / 3 * 0.05 * 0.1) ** 0.25
    assert self_bleu(["a b", "a b c d"]) == pytest.approx((short + long) / 2)
    # identical texts: every precision 1, BP 1
    assert self_bleu(["x y z w v", "x y z w v", "x y z w v"]) == pytest.approx(1.0)
    # no shared word at all -> 0 (no smoothing of unigrams)
    assert self_bleu(["a b c", "d e f"]) == 0.0
    assert math.isnan(self_bleu(["only one"]))


def test_identical_fraction_hand_worked():
    # both copies of "a" count: 2 of 3 texts duplicate another one
    assert identical_fraction(["a", "a", "b"]) == pytest.approx(2 / 3)
    # compared as token sequences: "a  b" == "a b"
    assert identical_fraction(["a  b", "a b", "c", "c", "d"]) == pytest.approx(4 / 5)
    assert identical_fraction(["a", "b"]) == 0.0
    assert identical_fraction([]) == 0.0


@settings(max_examples=20, deadline=None)
@given(texts=small_texts, seed=st.integers(0, 1000))
def test_diversity_is_order_invariant(texts, seed):
    shuffled = texts[:]
    random.Random(seed).shuffle(shuffled)
    assert self_bleu(shuffled) == pytest.approx(self_bleu(texts), rel=1e-12, abs=1e-15)
    assert distinct_n(shuffled, 2) == distinct_n(texts, 2)
    assert identical_fraction(shuffled) == identical_fraction(texts)


def test_brute_force_helpers_agree_with_counter():
    # guard the test oracle itself
    toks = ["a", "b", "a", "b", "c"]
    assert Counter(brute_ngrams(toks, 2)) == Counter({("a", "b"): 2, ("b", "a"): 1, ("b", "c"): 1})
    assert brute_ngrams(toks, 5) == [tuple(toks)]
    assert brute_ngrams(toks, 6) == []
