"""A user's prompts drawn batch by batch: a seeded shuffle of the pool, a prompt repeated in a
batch only when the pool is smaller than the batch, the same batch for the same seed."""

from collections import Counter

import pytest

from rlhflab.data.prompt_pool import PromptPool

POOL = [f"prompt {i}" for i in range(10)]


@pytest.mark.parametrize("n", [1, 7, 10, 23])
def test_a_batch_repeats_a_prompt_only_when_the_pool_is_smaller(n):
    drawn = PromptPool(POOL).prompts(n, seed=3)
    assert len(drawn) == n and set(drawn) <= set(POOL)
    counts = Counter(drawn)
    assert max(counts.values()) - min(counts.get(p, 0) for p in POOL) <= 1 if n >= len(POOL) else max(counts.values()) == 1
    passes = [drawn[i:i + len(POOL)] for i in range(0, n, len(POOL))]
    assert all(len(set(p)) == len(p) for p in passes)  # every pass a permutation (its prefix)


def test_the_same_seed_draws_the_same_batch_and_another_seed_another_order():
    pool = PromptPool(POOL)
    assert pool.prompts(10, seed=1) == pool.prompts(10, seed=1)
    orders = {tuple(pool.prompts(10, seed=s)) for s in range(5)}
    assert len(orders) == 5 and all(sorted(o) == sorted(POOL) for o in orders)
    assert len(pool) == len(POOL)


def test_an_empty_pool_is_refused():
    with pytest.raises(ValueError, match="at least one prompt"):
        PromptPool([])
