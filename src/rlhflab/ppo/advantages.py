"""Reward shaping with a per-token KL penalty, and generalised advantage estimation.

- ``shape_rewards``: the KL-regularised reward of Ziegler et al. (2019) eq. 2 and
  Stiennon et al. (2020) eq. 2, R(x, y) = r(x, y) - beta * log(pi(y|x) / ref(y|x)),
  spread over tokens as in lm-human-preferences ``train_policy.py: compute_rewards``:
  every token pays -beta * kl_t and the reward-model score arrives at the last token.
  Deviation: lm-human-preferences adds the score at index -1 of fixed-length
  responses; we add it at the last *real* token of each row (TRL's PPOTrainer also
  places it at each response's own end), so padding carries no reward.
- ``gae``: Schulman et al. (2016), "High-Dimensional Continuous Control Using
  Generalized Advantage Estimation", eq. 16, in the backward-recursion form of
  lm-human-preferences ``PPOTrainer.loss``. Deviation: padded positions are skipped
  instead of being treated as steps, so a padded batch gives exactly the per-row
  result of an unpadded one.
- ``whiten``: the one masked whitening, re-exported from ``rlhflab.metrics.stats``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from rlhflab.metrics.stats import masked_whiten as whiten
from rlhflab.ppo.kl import KLEstimator, kl_estimate

__all__ = ["whiten", "shape_rewards", "gae"]


def _last_token_index(mask: Tensor) -> Tensor:
    """Index of the last real token of each row.

    Args:
        mask: (B, T) bool, True for a real response token; every row needs one.

    Returns:
        (B,) long tensor of column indices.
    """
    if mask.dtype != torch.bool:
        raise TypeError(f"mask must be a bool tensor (True = real token), got {mask.dtype}")
    if not bool(mask.any(dim=1).all()):
        empty = (~mask.any(dim=1)).nonzero().flatten().tolist()
        raise ValueError(f"rows {empty} have no real response token; the score has nowhere to go")
    T = mask.shape[1]
    positions = torch.arange(T, device=mask.device).expand_as(mask)  # (B, T)
    # the largest position that is real; padding maps to -1 so it never wins
    return torch.where(mask, positions, -1).amax(dim=1)


def shape_rewards(
    scores: Tensor,
    logprobs: Tensor,
    ref_logprobs: Tensor,
    mask: Tensor,
    kl_coef: float,
    kl_estimator: KLEstimator = "k1",
) -> tuple[Tensor, Tensor]:
    """Per-token rewards: KL penalty on every real token, score on the last one.

    Ziegler et al. (2019) sec. 2.2 eq. 2; Stiennon et al. (2020) eq. 2;
    lm-human-preferences ``compute_rewards``.

    Args:
        scores: (B,) reward-model score of each full response.
        logprobs: (B, T) log pi of the sampled tokens (recorded at rollout).
        ref_logprobs: (B, T) log ref of the same tokens.
        mask: (B, T) bool, True for a real response token; at least one per row.
        kl_coef: beta, the KL penalty weight (``KLController.value``).
        kl_estimator: per-token KL estimator, see ``kl.kl_estimate``.

    Returns:
        rewards: (B, T), -kl_coef * kl_t on real tokens, + scores[b] at the last
            real token of row b, 0 on padding.
        kl: (B, T), the per-token estimate on real tokens, 0 on padding.
    """
    if scores.shape != mask.shape[:1]:
        raise ValueError(f"scores shape {tuple(scores.shape)} != (B,) = {tuple(mask.shape[:1])}")
    last = _last_token_index(mask)  # (B,)
    zero = torch.zeros((), dtype=logprobs.dtype, device=logprobs.device)
    kl = torch.where(mask, kl_estimate(logprobs, ref_logprobs, kl_estimator), zero)  # (B, T)
    # r_t = -beta * kl_t                    for every real token t
    # r_T = -beta * kl_T + score(x, y)      for the last real token T
    rewards = -kl_coef * kl
    rewards = rewards.scatter_add(1, last.unsqueeze(1), scores.to(rewards.dtype).unsqueeze(1))
    return rewards, kl


def gae(
    rewards: Tensor,
    values: Tensor,
    mask: Tensor,
    gamma: float,
    lam: float,
) -> tuple[Tensor, Tensor]:
    """Generalised advantage estimates and lambda-returns.

    Schulman et al. (2016) eq. 16, computed backwards over real tokens only:

        delta_t = r_t + gamma * V_{t'} - V_t        (t' = next real token; V = 0 after the last)
        A_t     = delta_t + gamma * lam * A_{t'}
        R_t     = A_t + V_t                          (the value target)

    The episode ends after the last real token: nothing is bootstrapped past it
    (the response is complete, or truncated and scored as it stands, as in
    lm-human-preferences). Padded positions, trailing or in the middle of a row, are
    skipped, so they never leak into real ones. No whitening here: the trainer
    calls ``whiten`` on the advantages.

    Args:
        rewards: (B, T) per-token rewards (``shape_rewards``).
        values: (B, T) V(s_t) recorded at rollout.
        mask: (B, T) bool, True for a real response token.
        gamma: discount (1.0 in lm-human-preferences).
        lam: GAE lambda (0.95 in lm-human-preferences).

    Returns:
        advantages: (B, T), 0 on padding.
        returns: (B, T), advantages + values on real tokens, 0 on padding.
    """
    if mask.dtype != torch.bool:
        raise TypeError(f"mask must be a bool tensor (True = real token), got {mask.dtype}")
    if rewards.shape != mask.shape or values.shape != mask.shape:
        raise ValueError(
            f"rewards {tuple(rewards.shape)}, values {tuple(values.shape)} and mask "
            f"{tuple(mask.shape)} must have the same (B, T) shape"
        )
    B, T = mask.shape
    zero = torch.zeros((), dtype=values.dtype, device=values.device)
    next_value = torch.zeros(B, dtype=values.dtype, device=values.device)  # V_{t'}, (B,)
    next_adv = torch.zeros(B, dtype=values.dtype, device=values.device)  # A_{t'}, (B,)
    advantages_reversed: list[Tensor] = []
    for t in reversed(range(T)):
        real = mask[:, t]  # (B,)
        v_t = torch.where(real, values[:, t], zero)
        # delta_t = r_t + gamma * V(s_{t+1}) - V(s_t)
        delta = torch.where(real, rewards[:, t], zero) + gamma * next_value - v_t
        # A_t = delta_t + gamma * lam * A_{t+1}
        adv_t = delta + gamma * lam * next_adv
        advantages_reversed.append(torch.where(real, adv_t, zero))
        # a padded step carries its successor's value and advantage through unchanged
        next_value = torch.where(real, v_t, next_value)
        next_adv = torch.where(real, adv_t, next_adv)
    if T == 0:
        return torch.zeros_like(values), torch.zeros_like(values)
    advantages = torch.stack(advantages_reversed[::-1], dim=1)  # (B, T)
    # R_t = A_t + V_t
    returns = torch.where(mask, advantages + values, zero)
    return advantages, returns
