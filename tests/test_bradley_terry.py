"""Bradley-Terry reward-model loss: python loop, hand-worked case, invariances."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlhflab.models.bradley_terry import bt_loss

pairs = st.tuples(st.integers(0, 2**31 - 1), st.integers(1, 32), st.sampled_from([0.1, 1.0, 10.0]))


def random_pairs(seed: int, N: int, scale: float):
    gen = torch.Generator().manual_seed(seed)
    chosen = torch.randn(N, generator=gen, dtype=torch.float64) * scale
    rejected = torch.randn(N, generator=gen, dtype=torch.float64) * scale
    return chosen, rejected


@settings(max_examples=40, deadline=None)
@given(batch=pairs)
def test_bt_loss_matches_python_loop(batch):
    chosen, rejected = random_pairs(*batch)
    loss, accuracy = bt_loss(chosen, rejected)
    nll, correct = 0.0, 0
    for c, r in zip(chosen.tolist(), rejected.tolist()):
        m = c - r
        # -log sigmoid(m) = log(1 + exp(-m)), written stably for either sign of m
        nll += math.log1p(math.exp(-m)) if m > 0 else -m + math.log1p(math.exp(m))
        correct += c > r
    n = len(chosen)
    assert float(loss) == pytest.approx(nll / n, rel=1e-9, abs=1e-12)
    assert float(accuracy) == correct / n


def test_bt_loss_hand_worked():
    # margins [2, 0, -1]:
    #   -log sigmoid(2)  = log(1 + e^-2) = 0.126928
    #   -log sigmoid(0)  = log 2         = 0.693147
    #   -log sigmoid(-1) = log(1 + e)    = 1.313262
    #   loss = (0.126928 + 0.693147 + 1.313262) / 3 = 0.711112
    #   accuracy = 1/3 (the tie at margin 0 counts as wrong)
    chosen = torch.tensor([2.0, 0.5, 0.0], requires_grad=True)
    rejected = torch.tensor([0.0, 0.5, 1.0])
    loss, accuracy = bt_loss(chosen, rejected)
    assert loss.item() == pytest.approx(0.711112, abs=1e-6)
    assert accuracy.item() == pytest.approx(1 / 3)
    assert not accuracy.requires_grad and accuracy.dtype == torch.float32
    # d loss / d chosen_i = -(1 - sigmoid(m_i)) / N: [-0.119203, -0.5, -0.731059] / 3
    loss.backward()
    torch.testing.assert_close(chosen.grad, torch.tensor([-0.119203, -0.5, -0.731059]) / 3, atol=1e-6, rtol=0)


@settings(max_examples=20, deadline=None)
@given(batch=pairs, shift=st.floats(-100.0, 100.0))
def test_bt_loss_invariances(batch, shift):
    chosen, rejected = random_pairs(*batch)
    loss, accuracy = bt_loss(chosen, rejected)
    # only the margin matters: a common shift of both scores changes nothing
    loss_s, acc_s = bt_loss(chosen + shift, rejected + shift)
    assert float(loss_s) == pytest.approx(float(loss), rel=1e-6, abs=1e-9)
    # splitting the pairs and recombining with pair-count weights gives the batch loss
    N = len(chosen)
    if N >= 2:
        k = N // 2
        l1, a1 = bt_loss(chosen[:k], rejected[:k])
        l2, a2 = bt_loss(chosen[k:], rejected[k:])
        assert float(loss) == pytest.approx((k * float(l1) + (N - k) * float(l2)) / N, rel=1e-12)
        assert float(accuracy) == pytest.approx((k * float(a1) + (N - k) * float(a2)) / N, rel=1e-12)
    # swapping the roles flips the accuracy (no ties in continuous random scores)
    _, swapped = bt_loss(rejected, chosen)
    assert float(swapped) == pytest.approx(1 - float(accuracy))


def test_bt_loss_is_stable_for_large_margins():
    loss, _ = bt_loss(torch.tensor([1e4, -1e4]), torch.tensor([0.0, 0.0]))
    # margin +1e4 costs ~0, margin -1e4 costs ~1e4: mean 5e3, finite (no log(0))
    assert loss.item() == pytest.approx(5e3)
    with pytest.raises(ValueError):
        bt_loss(torch.zeros(3), torch.zeros(2))
