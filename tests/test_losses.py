"""PPO losses: per-token loops, hand-worked cases, padding and batch-split invariance."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlhflab.ppo.losses import (
    PolicyLossStats,
    entropy_from_logits,
    logprobs_from_logits,
    policy_loss,
    value_loss,
)

GARBAGE = [1e6, -1e6, float("inf"), float("nan")]


def random_mask(gen: torch.Generator, B: int, T: int, holes: bool) -> torch.Tensor:
    """(B, T) bool with >= 1 True per row: right-padded, or any pattern when holes."""
    if holes:
        mask = torch.rand(B, T, generator=gen) < 0.6
        mask[torch.arange(B), torch.randint(T, (B,), generator=gen)] = True
        return mask
    lengths = torch.randint(1, T + 1, (B,), generator=gen)
    return torch.arange(T) < lengths[:, None]


def random_policy_batch(seed: int, B: int, T: int, holes: bool):
    gen = torch.Generator().manual_seed(seed)
    old_logprobs = -torch.rand(B, T, generator=gen, dtype=torch.float64) * 4
    # new logprobs within +-0.5 of old, so some ratios fall outside [0.8, 1.2]
    logprobs = old_logprobs + (torch.rand(B, T, generator=gen, dtype=torch.float64) - 0.5)
    advantages = torch.randn(B, T, generator=gen, dtype=torch.float64)
    return logprobs, old_logprobs, advantages, random_mask(gen, B, T, holes)


def random_value_batch(seed: int, B: int, T: int, holes: bool):
    gen = torch.Generator().manual_seed(seed)
    old_values = torch.randn(B, T, generator=gen, dtype=torch.float64)
    values = old_values + (torch.rand(B, T, generator=gen, dtype=torch.float64) - 0.5)
    returns = torch.randn(B, T, generator=gen, dtype=torch.float64)
    return values, old_values, returns, random_mask(gen, B, T, holes)


batches = st.tuples(st.integers(0, 2**31 - 1), st.integers(1, 6), st.integers(1, 10), st.booleans())
clip_eps_values = st.sampled_from([0.0, 0.1, 0.2, 0.3])


# ---------------------------------------------------------------- policy_loss


@settings(max_examples=40, deadline=None)
@given(batch=batches, clip_eps=clip_eps_values)
def test_policy_loss_matches_per_token_loop(batch, clip_eps):
    logprobs, old_logprobs, advantages, mask = random_policy_batch(*batch)
    loss, stats = policy_loss(logprobs, old_logprobs, advantages, mask, clip_eps)
    terms, clipped, kls, ratios = [], [], [], []
    B, T = mask.shape
    for b in range(B):
        for t in range(T):
            if not mask[b, t]:
                continue
            ratio = math.exp(float(logprobs[b, t]) - float(old_logprobs[b, t]))
            a = float(advantages[b, t])
            unclipped = -a * ratio
            clipped_term = -a * min(max(ratio, 1 - clip_eps), 1 + clip_eps)
            terms.append(max(unclipped, clipped_term))
            clipped.append(1.0 if clipped_term > unclipped else 0.0)
            kls.append(0.5 * (float(logprobs[b, t]) - float(old_logprobs[b, t])) ** 2)
            ratios.append(ratio)
    n = len(terms)
    assert float(loss) == pytest.approx(sum(terms) / n, rel=1e-9, abs=1e-12)
    assert float(stats.clipfrac) == pytest.approx(sum(clipped) / n)
    assert float(stats.approxkl) == pytest.approx(sum(kls) / n, rel=1e-9, abs=1e-15)
    assert float(stats.ratio_mean) == pytest.approx(sum(ratios) / n, rel=1e-9)
    assert float(stats.ratio_max) == pytest.approx(max(ratios), rel=1e-12)


def test_policy_loss_hand_worked():
    # eps = 0.2, two real tokens and one padded one:
    #   token 0: ratio = 1.5, A = +1: unclipped -1.5, clipped -1.2 -> max = -1.2 (clipped is active)
    #   token 1: ratio = 1.0, A = -2: unclipped  2.0, clipped  2.0 -> max =  2.0 (a tie: not clipped)
    #   loss = (-1.2 + 2.0) / 2 = 0.4; clipfrac = 1/2
    #   approxkl = 0.5 * ((ln 1.5)^2 + 0) / 2 = 0.25 * 0.164402 = 0.041101
    #   ratio_mean = (1.5 + 1) / 2 = 1.25; ratio_max = 1.5
    old = torch.tensor([[-1.0, -2.0, -3.0]], dtype=torch.float64)
    logprobs = (old + torch.tensor([[math.log(1.5), 0.0, 5.0]], dtype=torch.float64)).requires_grad_()
    advantages = torch.tensor([[1.0, -2.0, 100.0]], dtype=torch.float64)
    mask = torch.tensor([[True, True, False]])
    loss, stats = policy_loss(logprobs, old, advantages, mask, clip_eps=0.2)
    assert loss.item() == pytest.approx(0.4)
    assert float(stats.clipfrac) == 0.5
    assert float(stats.approxkl) == pytest.approx(0.041101, abs=1e-6)
    assert float(stats.ratio_mean) == pytest.approx(1.25)
    assert float(stats.ratio_max) == pytest.approx(1.5)
    # gradient: token 0 is clipped -> 0; token 1: d/dlogp [-A * exp(logp - old)] / 2 = 2 * 1 / 2 = 1
    loss.backward()
    assert logprobs.grad.tolist() == [[0.0, pytest.approx(1.0), 0.0]]


def test_policy_loss_stats_are_detached_scalars():
    logprobs, old, adv, mask = random_policy_batch(0, 3, 5, True)
    logprobs.requires_grad_()
    loss, stats = policy_loss(logprobs, old, adv, mask, 0.2)
    assert isinstance(stats, PolicyLossStats)
    assert loss.requires_grad and loss.shape == ()
    for value in (stats.clipfrac, stats.approxkl, stats.ratio_mean, stats.ratio_max):
        assert value.shape == () and not value.requires_grad
    with pytest.raises(AttributeError):
        stats.clipfrac = torch.tensor(0.0)  # frozen
    with pytest.raises(ValueError):
        policy_loss(logprobs, old, adv, mask, -0.1)


def test_policy_loss_at_ratio_one():
    # first minibatch of the first epoch: logprobs == old_logprobs
    _, old, adv, mask = random_policy_batch(1, 4, 6, False)
    loss, stats = policy_loss(old.clone(), old, adv, mask, 0.2)
    # ratio = 1 everywhere, so loss = -mean(A) over real tokens, nothing clipped, no KL
    assert float(loss) == pytest.approx(-float(adv[mask].mean()))
    assert float(stats.clipfrac) == 0.0 and float(stats.approxkl) == 0.0
    assert float(stats.ratio_mean) == 1.0 and float(stats.ratio_max) == 1.0


@pytest.mark.parametrize("garbage", GARBAGE)
@settings(max_examples=10, deadline=None)
@given(batch=batches)
def test_policy_loss_ignores_padded_values(garbage, batch):
    logprobs, old, adv, mask = random_policy_batch(*batch)
    clean_lp = logprobs.clone().requires_grad_()
    loss, stats = policy_loss(clean_lp, old, adv, mask, 0.2)
    loss.backward()
    dirty_lp = logprobs.masked_fill(~mask, garbage).requires_grad_()
    dirty_old = old.masked_fill(~mask, -garbage)
    loss_d, stats_d = policy_loss(dirty_lp, dirty_old, adv.masked_fill(~mask, garbage), mask, 0.2)
    loss_d.backward()
    assert torch.equal(loss_d, loss)
    for field in ("clipfrac", "approxkl", "ratio_mean", "ratio_max"):
        assert torch.equal(getattr(stats_d, field), getattr(stats, field)), field
    assert torch.equal(dirty_lp.grad, clean_lp.grad)
    assert torch.all(dirty_lp.grad[~mask] == 0)


@settings(max_examples=20, deadline=None)
@given(batch=batches, split=st.integers(1, 5), extra=st.integers(0, 3))
def test_policy_loss_batch_split_and_padding_columns(batch, split, extra):
    logprobs, old, adv, mask = random_policy_batch(*batch)
    B = mask.shape[0]
    if B < 2:
        return
    split = min(split, B - 1)
    loss, stats = policy_loss(logprobs, old, adv, mask, 0.2)
    # token-count weighted recombination of two halves gives the full-batch numbers
    parts = [slice(0, split), slice(split, B)]
    outs = [policy_loss(logprobs[s], old[s], adv[s], mask[s], 0.2) for s in parts]
    counts = [float(mask[s].sum()) for s in parts]
    combined = sum(n * float(l) for n, (l, _) in zip(counts, outs)) / sum(counts)
    assert float(loss) == pytest.approx(combined, rel=1e-9, abs=1e-12)
    for field in ("clipfrac", "approxkl", "ratio_mean"):
        combined = sum(n * float(getattr(s, field)) for n, (_, s) in zip(counts, outs)) / sum(counts)
        assert float(getattr(stats, field)) == pytest.approx(combined, rel=1e-9, abs=1e-12)
    assert float(stats.ratio_max) == max(float(s.ratio_max) for _, s in outs)
    # extra padding columns change nothing
    def wide(x, fill):
        return torch.cat([x, torch.full((B, extra), fill, dtype=x.dtype)], dim=1)

    loss_w, stats_w = policy_loss(
        wide(logprobs, 3.0), wide(old, -3.0), wide(adv, 9.0), wide(mask, False), 0.2
    )
    assert float(loss_w) == pytest.approx(float(loss), rel=1e-12)
    assert float(stats_w.clipfrac) == pytest.approx(float(stats.clipfrac), rel=1e-12)


# ---------------------------------------------------------------- value_loss


@settings(max_examples=40, deadline=None)
@given(batch=batches, clip_eps=clip_eps_values)
def test_value_loss_matches_per_token_loop(batch, clip_eps):
    values, old_values, returns, mask = random_value_batch(*batch)
    loss, stats = value_loss(values, old_values, returns, mask, clip_eps)
    terms, clipped = [], []
    B, T = mask.shape
    for b in range(B):
        for t in range(T):
            if not mask[b, t]:
                continue
            v, o, r = float(values[b, t]), float(old_values[b, t]), float(returns[b, t])
            v_clip = min(max(v, o - clip_eps), o + clip_eps)
            l1, l2 = (v - r) ** 2, (v_clip - r) ** 2
            terms.append(max(l1, l2))
            clipped.append(1.0 if l2 > l1 else 0.0)
    assert float(loss) == pytest.approx(0.5 * sum(terms) / len(terms), rel=1e-9, abs=1e-12)
    assert float(stats.clipfrac) == pytest.approx(sum(clipped) / len(clipped))


def test_value_loss_hand_worked():
    # eps = 0.2, V_old = [0, 0], R = [1, 1]:
    #   token 0: V = 0.5 -> V_clip = 0.2; (0.5-1)^2 = 0.25 < (0.2-1)^2 = 0.64 -> 0.64, clipped active
    #   token 1: V = 0.1 -> V_clip = 0.1; both (0.1-1)^2 = 0.81 -> 0.81, not clipped
    #   loss = 0.5 * (0.64 + 0.81) / 2 = 0.3625; clipfrac = 1/2
    values = torch.tensor([[0.5, 0.1, 4.0]], dtype=torch.float64, requires_grad=True)
    old_values = torch.tensor([[0.0, 0.0, -4.0]], dtype=torch.float64)
    returns = torch.tensor([[1.0, 1.0, 8.0]], dtype=torch.float64)
    mask = torch.tensor([[True, True, False]])
    loss, stats = value_loss(values, old_values, returns, mask, clip_eps=0.2)
    assert loss.item() == pytest.approx(0.3625)
    assert float(stats.clipfrac) == 0.5
    assert not stats.clipfrac.requires_grad
    # gradient: token 0 is clipped -> 0; token 1: 0.5 * 2 * (0.1 - 1) / 2 = -0.45
    loss.backward()
    assert values.grad.tolist() == [[0.0, pytest.approx(-0.45), 0.0]]


@pytest.mark.parametrize("garbage", GARBAGE)
@settings(max_examples=10, deadline=None)
@given(batch=batches)
def test_value_loss_ignores_padding_and_splits(garbage, batch):
    values, old_values, returns, mask = random_value_batch(*batch)
    v = values.clone().requires_grad_()
    loss, stats = value_loss(v, old_values, returns, mask, 0.2)
    loss.backward()
    v_d = values.masked_fill(~mask, garbage).requires_grad_()
    dirty_old, dirty_ret = old_values.masked_fill(~mask, garbage), returns.masked_fill(~mask, -garbage)
    loss_d, stats_d = value_loss(v_d, dirty_old, dirty_ret, mask, 0.2)
    loss_d.backward()
    assert torch.equal(loss_d, loss) and torch.equal(stats_d.clipfrac, stats.clipfrac)
    assert torch.equal(v_d.grad, v.grad) and torch.all(v_d.grad[~mask] == 0)
    B = mask.shape[0]
    if B >= 2:
        parts = [slice(0, B // 2), slice(B // 2, B)]
        counts = [float(mask[s].sum()) for s in parts]
        outs = [float(value_loss(values[s], old_values[s], returns[s], mask[s], 0.2)[0]) for s in parts]
        combined = sum(n * l for n, l in zip(counts, outs)) / sum(counts)
        assert loss.item() == pytest.approx(combined, rel=1e-9, abs=1e-12)


# ---------------------------------------------------------------- entropy and logprobs


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), B=st.integers(1, 3), T=st.integers(1, 5), V=st.integers(2, 12),
       scale=st.sampled_from([0.1, 1.0, 10.0]))
def test_entropy_matches_naive_and_categorical(seed, B, T, V, scale):
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(B, T, V, generator=gen, dtype=torch.float64) * scale
    ent = entropy_from_logits(logits)
    assert ent.shape == (B, T)
    categorical = torch.distributions.Categorical(logits=logits).entropy()
    torch.testing.assert_close(ent, categorical)
    for b in range(B):
        for t in range(T):
            z = [float(v) for v in logits[b, t]]
            m = max(z)
            total = sum(math.exp(v - m) for v in z)
            p = [math.exp(v - m) / total for v in z]
            naive = -sum(pi * math.log(pi) for pi in p if pi > 0)
            assert float(ent[b, t]) == pytest.approx(naive, rel=1e-9, abs=1e-12)


def test_entropy_hand_worked_and_extremes():
    # uniform over 4 -> ln 4; one-hot (huge logit gap) -> 0; p = [1/4, 3/4] -> 0.562335
    logits = torch.tensor([[
        [0.0, 0.0, 0.0, 0.0],
        [1e4, 0.0, 0.0, 0.0],
        [0.0, math.log(3), -math.inf, -math.inf],
    ]])
    ent = entropy_from_logits(logits)
    assert ent[0, 0] == pytest.approx(math.log(4), abs=1e-6)
    assert ent[0, 1] == pytest.approx(0.0, abs=1e-6)
    # -(1/4 ln 1/4 + 3/4 ln 3/4) = 0.346574 + 0.215762 = 0.562335; -inf logits contribute 0, not nan
    assert ent[0, 2] == pytest.approx(0.562335, abs=1e-5)
    # shift invariance, with huge offsets
    torch.testing.assert_close(entropy_from_logits(logits[:, :1] + 1e6), ent[:, :1])
    # gradient is finite even with -inf logits
    x = logits.clone().requires_grad_()
    entropy_from_logits(x).sum().backward()
    assert torch.isfinite(x.grad).all()


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), B=st.integers(1, 3), T=st.integers(1, 5), V=st.integers(2, 50),
       scale=st.sampled_from([0.1, 1.0, 30.0]))
def test_logprobs_from_logits_matches_log_softmax_gather(seed, B, T, V, scale):
    gen = torch.Generator().manual_seed(seed)
    logits = (torch.randn(B, T, V, generator=gen, dtype=torch.float64) * scale).requires_grad_()
    tokens = torch.randint(V, (B, T), generator=gen)
    out = logprobs_from_logits(logits, tokens)
    ref_logits = logits.detach().clone().requires_grad_()
    ref = torch.log_softmax(ref_logits, dim=-1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(out, ref)
    out.sum().backward()
    ref.sum().backward()
    torch.testing.assert_close(logits.grad, ref_logits.grad)


def test_logprobs_from_logits_hand_worked():
    # logits [0, ln 3]: softmax = [1/4, 3/4]
    logits = torch.tensor([[[0.0, math.log(3.0)], [0.0, math.log(3.0)]]]) + 500.0  # offset is harmless
    tokens = torch.tensor([[0, 1]])
    out = logprobs_from_logits(logits, tokens)
    assert out[0, 0] == pytest.approx(math.log(0.25), abs=1e-4)
    assert out[0, 1] == pytest.approx(math.log(0.75), abs=1e-4)
    # int32 token ids are accepted too
    torch.testing.assert_close(logprobs_from_logits(logits, tokens.int()), out)
