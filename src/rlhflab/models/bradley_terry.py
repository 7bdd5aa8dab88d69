"""Bradley-Terry pairwise loss for training a scalar reward model.

Bradley & Terry (1952), "Rank Analysis of Incomplete Block Designs"; as a reward-model
loss, Stiennon et al. (2020) eq. 1 and Ouyang et al. (2022) eq. 1:

    P(chosen > rejected) = sigmoid(r(chosen) - r(rejected))
    loss = -E[log sigmoid(r(chosen) - r(rejected))]

Deviation from Ouyang et al.: they average over the K-choose-2 pairs of each prompt
as one batch element; we take a plain mean over the pairs given.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["bt_loss", "pair_scores"]


def bt_loss(chosen_scores: Tensor, rejected_scores: Tensor) -> tuple[Tensor, Tensor]:
    """Negative log-likelihood of the preferences under the Bradley-Terry model.

    Args:
        chosen_scores: (N,) reward-model scores of the preferred responses.
        rejected_scores: (N,) scores of the other response of each pair.

    Returns:
        loss: 0-d tensor, -mean(log sigmoid(chosen - rejected)), with grad.
        accuracy: 0-d detached float tensor, the fraction of pairs with
            chosen > rejected (a tie counts as wrong).
    """
    if chosen_scores.shape != rejected_scores.shape:
        raise ValueError(
            f"chosen {tuple(chosen_scores.shape)} and rejected {tuple(rejected_scores.shape)} "
            "scores must have the same shape"
        )
    margin = chosen_scores - rejected_scores  # (N,)
    # loss = -mean(log sigmoid(r_c - r_r)); logsigmoid is stable for large |margin|
    loss = -F.logsigmoid(margin).mean()
    accuracy = (margin.detach() > 0).to(margin.dtype).mean()
    return loss, accuracy


def pair_scores(scores: Tensor, pairs: Tensor, first_preferred: Tensor) -> tuple[Tensor, Tensor]:
    """Scores of the chosen and rejected response of every pair. (N, K) -> (N*C,), (N*C,)

    `pairs` (C, 2) holds the response indices (i, j) of each pair, the same for every prompt;
    `first_preferred` (N, C) whether the labeler preferred response i."""
    first, second = scores[:, pairs[:, 0]], scores[:, pairs[:, 1]]  # (N, C)
    chosen = torch.where(first_preferred, first, second)
    rejected = torch.where(first_preferred, second, first)
    return chosen.flatten(), rejected.flatten()
