"""Reward shaping and GAE: naive per-row loops, hand-worked cases, padding invariance."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlhflab.metrics import stats
from rlhflab.ppo import advantages as adv_module
from rlhflab.ppo.advantages import gae, shape_rewards

GARBAGE = [1e6, -1e6, float("inf"), float("nan")]


def random_mask(gen: torch.Generator, B: int, T: int, holes: bool) -> torch.Tensor:
    """(B, T) bool with >= 1 True per row: right-padded, or any pattern when holes."""
    if holes:
        mask = torch.rand(B, T, generator=gen) < 0.6
        mask[torch.arange(B), torch.randint(T, (B,), generator=gen)] = True
        return mask
    lengths = torch.randint(1, T + 1, (B,), generator=gen)
    return torch.arange(T) < lengths[:, None]


def random_rollout(seed: int, B: int, T: int, holes: bool):
    gen = torch.Generator().manual_seed(seed)
    rewards = torch.randn(B, T, generator=gen, dtype=torch.float64)
    values = torch.randn(B, T, generator=gen, dtype=torch.float64)
    return rewards, values, random_mask(gen, B, T, holes)


def naive_gae(rewards, values, mask, gamma, lam):
    """Per row, over the real positions only, with python floats."""
    B, T = mask.shape
    adv = [[0.0] * T for _ in range(B)]
    ret = [[0.0] * T for _ in range(B)]
    for b in range(B):
        real = [t for t in range(T) if mask[b, t]]
        last_adv = 0.0
        next_v = 0.0  # V after the last real token is 0: the episode has ended
        for t in reversed(real):
            r, v = float(rewards[b, t]), float(values[b, t])
            delta = r + gamma * next_v - v
            last_adv = delta + gamma * lam * last_adv
            adv[b][t] = last_adv
            ret[b][t] = last_adv + v
            next_v = v
    return adv, ret


rollouts = st.tuples(st.integers(0, 2**31 - 1), st.integers(1, 5), st.integers(1, 12), st.booleans())
coefs = st.tuples(st.floats(0.0, 1.0), st.floats(0.0, 1.0))


# ---------------------------------------------------------------- gae


@settings(max_examples=50, deadline=None)
@given(rollout=rollouts, coef=coefs)
def test_gae_matches_naive_loop(rollout, coef):
    rewards, values, mask = random_rollout(*rollout)
    gamma, lam = coef
    advantages, returns = gae(rewards, values, mask, gamma, lam)
    exp_adv, exp_ret = naive_gae(rewards, values, mask, gamma, lam)
    B, T = mask.shape
    for b in range(B):
        for t in range(T):
            assert float(advantages[b, t]) == pytest.approx(exp_adv[b][t], rel=1e-9, abs=1e-12)
            assert float(returns[b, t]) == pytest.approx(exp_ret[b][t], rel=1e-9, abs=1e-12)


def test_gae_hand_worked():
    # T = 3, gamma = 1, lam = 0.5, r = [1, 0, 2], V = [0.5, 1.0, 1.5]
    #   delta_2 = 2 + 1 * 0   - 1.5 = 0.5    A_2 = 0.5
    #   delta_1 = 0 + 1 * 1.5 - 1.0 = 0.5    A_1 = 0.5 + 0.5 * 0.5  = 0.75
    #   delta_0 = 1 + 1 * 1.0 - 0.5 = 1.5    A_0 = 1.5 + 0.5 * 0.75 = 1.875
    #   returns = A + V = [2.375, 1.75, 2.0]
    # Row 1 is the same episode right-padded with garbage, row 2 with a hole at t = 1.
    rewards = torch.tensor([[1.0, 0.0, 2.0, 0.0], [1.0, 0.0, 2.0, 9.0], [1.0, 9.0, 0.0, 2.0]])
    values = torch.tensor([[0.5, 1.0, 1.5, 0.0], [0.5, 1.0, 1.5, 1e6], [0.5, -1e6, 1.0, 1.5]])
    mask = torch.tensor([[True, True, True, False], [True, True, True, False], [True, False, True, True]])
    advantages, returns = gae(rewards, values, mask, gamma=1.0, lam=0.5)
    assert advantages[0].tolist() == [1.875, 0.75, 0.5, 0.0]
    assert returns[0].tolist() == [2.375, 1.75, 2.0, 0.0]
    assert torch.equal(advantages[1], advantages[0])
    assert torch.equal(returns[1], returns[0])
    assert advantages[2].tolist() == [1.875, 0.0, 0.75, 0.5]
    assert returns[2].tolist() == [2.375, 0.0, 1.75, 2.0]


@settings(max_examples=20, deadline=None)
@given(rollout=rollouts)
def test_gae_special_cases(rollout):
    rewards, values, mask = random_rollout(*rollout)
    # lam = 0: A_t = delta_t (one-step TD error)
    adv0, _ = gae(rewards, values, mask, gamma=0.9, lam=0.0)
    # gamma = lam = 1: A_t = (sum of the remaining rewards) - V_t (Monte Carlo)
    adv1, ret1 = gae(rewards, values, mask, gamma=1.0, lam=1.0)
    B, T = mask.shape
    for b in range(B):
        real = [t for t in range(T) if mask[b, t]]
        for k, t in enumerate(real):
            next_v = float(values[b, real[k + 1]]) if k + 1 < len(real) else 0.0
            delta = float(rewards[b, t]) + 0.9 * next_v - float(values[b, t])
            assert float(adv0[b, t]) == pytest.approx(delta, abs=1e-12)
            to_go = sum(float(rewards[b, u]) for u in real[k:])
            assert float(ret1[b, t]) == pytest.approx(to_go, abs=1e-9)
            assert float(adv1[b, t]) == pytest.approx(to_go - float(values[b, t]), abs=1e-9)


@pytest.mark.parametrize("garbage", GARBAGE)
@settings(max_examples=15, deadline=None)
@given(rollout=rollouts, coef=coefs)
def test_gae_ignores_padded_values(garbage, rollout, coef):
    rewards, values, mask = random_rollout(*rollout)
    clean = gae(rewards, values, mask, *coef)
    dirty = gae(rewards.masked_fill(~mask, garbage), values.masked_fill(~mask, garbage), mask, *coef)
    for c, d in zip(clean, dirty):
        assert torch.equal(c, d)
        assert torch.all(d[~mask] == 0)


@settings(max_examples=20, deadline=None)
@given(rollout=rollouts, coef=coefs, extra=st.integers(1, 4), where=st.integers(0, 12))
def test_gae_ignores_inserted_and_appended_padding(rollout, coef, extra, where):
    rewards, values, mask = random_rollout(*rollout)
    B, T = mask.shape
    advantages, returns = gae(rewards, values, mask, *coef)
    # padding columns inserted at any position (including the end) change nothing real
    where = min(where, T)
    pad_f = torch.full((B, extra), 7.0, dtype=rewards.dtype)
    pad_m = torch.zeros(B, extra, dtype=torch.bool)
    wide = [torch.cat([x[:, :where], p, x[:, where:]], dim=1) for x, p in
            ((rewards, pad_f), (values, pad_f), (mask, pad_m))]
    adv_w, ret_w = gae(*wide, *coef)
    keep = torch.cat([torch.arange(where), torch.arange(where + extra, T + extra)])
    torch.testing.assert_close(adv_w[:, keep], advantages, rtol=0, atol=0)
    torch.testing.assert_close(ret_w[:, keep], returns, rtol=0, atol=0)
    # and each row is independent of the rest of the batch
    for b in range(B):
        a_b, r_b = gae(rewards[b : b + 1], values[b : b + 1], mask[b : b + 1], *coef)
        assert torch.equal(a_b[0], advantages[b]) and torch.equal(r_b[0], returns[b])


def test_gae_rejects_non_bool_mask():
    with pytest.raises(TypeError):
        gae(torch.zeros(1, 2), torch.zeros(1, 2), torch.ones(1, 2), 1.0, 0.95)


# ---------------------------------------------------------------- shape_rewards


def naive_shape_rewards(scores, logprobs, ref_logprobs, mask, kl_coef, kind):
    B, T = mask.shape
    rewards = [[0.0] * T for _ in range(B)]
    kls = [[0.0] * T for _ in range(B)]
    for b in range(B):
        last = max(t for t in range(T) if mask[b, t])
        for t in range(T):
            if not mask[b, t]:
                continue
            x = float(logprobs[b, t]) - float(ref_logprobs[b, t])
            k = {"k1": x, "k2": 0.5 * x * x, "k3": math.exp(-x) - 1 + x}[kind]
            kls[b][t] = k
            rewards[b][t] = -kl_coef * k + (float(scores[b]) if t == last else 0.0)
    return rewards, kls


def random_logprobs(seed: int, B: int, T: int, holes: bool):
    gen = torch.Generator().manual_seed(seed)
    scores = torch.randn(B, generator=gen, dtype=torch.float64)
    logprobs = -torch.rand(B, T, generator=gen, dtype=torch.float64) * 4
    ref_logprobs = -torch.rand(B, T, generator=gen, dtype=torch.float64) * 4
    return scores, logprobs, ref_logprobs, random_mask(gen, B, T, holes)


@settings(max_examples=40, deadline=None)
@given(rollout=rollouts, kl_coef=st.floats(0.0, 1.0), kind=st.sampled_from(["k1", "k2", "k3"]))
def test_shape_rewards_matches_naive_loop(rollout, kl_coef, kind):
    scores, logprobs, ref_logprobs, mask = random_logprobs(*rollout)
    rewards, kl = shape_rewards(scores, logprobs, ref_logprobs, mask, kl_coef, kl_estimator=kind)
    exp_rewards, exp_kl = naive_shape_rewards(scores, logprobs, ref_logprobs, mask, kl_coef, kind)
    B, T = mask.shape
    for b in range(B):
        for t in range(T):
            assert float(rewards[b, t]) == pytest.approx(exp_rewards[b][t], rel=1e-9, abs=1e-12)
            assert float(kl[b, t]) == pytest.approx(exp_kl[b][t], rel=1e-9, abs=1e-12)
    # the episode return is the score minus beta times the sequence KL
    total = stats.masked_sum(rewards, mask, dim=1)
    torch.testing.assert_close(total, scores - kl_coef * stats.masked_sum(kl, mask, dim=1))


def test_shape_rewards_hand_worked():
    # row 0: log_ratio = [-1 - -1.5, -2 - -2, pad] = [0.5, 0, -]; last real token t = 1
    #   rewards = [-0.1 * 0.5, -0.1 * 0 + 2.0, 0] = [-0.05, 2.0, 0]
    # row 1: only t = 0 is real: log_ratio = -0.5 -> rewards = [0.05 + (-1.0), 0, 0]
    scores = torch.tensor([2.0, -1.0], dtype=torch.float64)
    logprobs = torch.tensor([[-1.0, -2.0, -3.0], [-2.0, -1.0, -1.0]], dtype=torch.float64)
    ref_logprobs = torch.tensor([[-1.5, -2.0, -2.0], [-1.5, -5.0, -5.0]], dtype=torch.float64)
    mask = torch.tensor([[True, True, False], [True, False, False]])
    rewards, kl = shape_rewards(scores, logprobs, ref_logprobs, mask, kl_coef=0.1)
    assert kl.tolist()[0] == [0.5, 0.0, 0.0] and kl.tolist()[1] == [-0.5, 0.0, 0.0]
    assert rewards[0].tolist() == pytest.approx([-0.05, 2.0, 0.0])
    assert rewards[1].tolist() == pytest.approx([-0.95, 0.0, 0.0])
    # kl_coef = 0: the reward is exactly the score at the last real token
    rewards0, _ = shape_rewards(scores, logprobs, ref_logprobs, mask, kl_coef=0.0)
    assert rewards0.abs().tolist() == [[0.0, 2.0, 0.0], [1.0, 0.0, 0.0]]


@pytest.mark.parametrize("garbage", GARBAGE)
@settings(max_examples=10, deadline=None)
@given(rollout=rollouts, extra=st.integers(0, 3))
def test_shape_rewards_ignores_padding(garbage, rollout, extra):
    scores, logprobs, ref_logprobs, mask = random_logprobs(*rollout)
    B = mask.shape[0]
    clean = shape_rewards(scores, logprobs, ref_logprobs, mask, 0.2, "k3")

    def dirty(x):
        x = x.masked_fill(~mask, garbage)
        return torch.cat([x, torch.full((B, extra), garbage, dtype=x.dtype)], dim=1)

    wide_mask = torch.cat([mask, torch.zeros(B, extra, dtype=torch.bool)], dim=1)
    out = shape_rewards(scores, dirty(logprobs), dirty(ref_logprobs), wide_mask, 0.2, "k3")
    for c, d in zip(clean, out):
        assert torch.equal(d[:, : mask.shape[1]], c)
        assert torch.all(d[~wide_mask] == 0)


def test_shape_rewards_rejects_rows_without_tokens():
    mask = torch.tensor([[True, False], [False, False]])
    with pytest.raises(ValueError, match="no real response token"):
        shape_rewards(torch.zeros(2), torch.zeros(2, 2), torch.zeros(2, 2), mask, 0.1)
    with pytest.raises(ValueError):
        shape_rewards(torch.zeros(3), torch.zeros(2, 2), torch.zeros(2, 2), mask | True, 0.1)


def test_float32_inputs_agree_with_float64():
    scores, logprobs, ref_logprobs, mask = random_logprobs(3, 4, 16, True)
    r64, _ = shape_rewards(scores, logprobs, ref_logprobs, mask, 0.05)
    r32, kl32 = shape_rewards(scores.float(), logprobs.float(), ref_logprobs.float(), mask, 0.05)
    assert r32.dtype == kl32.dtype == torch.float32
    values = torch.randn(4, 16, dtype=torch.float64)
    a64, ret64 = gae(r64, values, mask, 1.0, 0.95)
    a32, ret32 = gae(r32, values.float(), mask, 1.0, 0.95)
    assert a32.dtype == torch.float32
    torch.testing.assert_close(a32.double(), a64, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ret32.double(), ret64, atol=1e-5, rtol=1e-5)


def test_whiten_is_the_single_masked_whiten():
    assert adv_module.whiten is stats.masked_whiten
