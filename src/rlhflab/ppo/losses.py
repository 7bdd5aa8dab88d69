"""PPO losses: clipped surrogate, clipped value loss, entropy and token log-probs.

- ``policy_loss``: Schulman et al. (2017), "Proximal Policy Optimization
  Algorithms", eq. 7 (L^CLIP), written as the max of the two negated surrogates,
  as in lm-human-preferences ``train_policy.py: PPOTrainer.loss`` (``pg_losses``,
  ``pg_losses2``) and TRL's PPOTrainer. Diagnostics ``clipfrac`` and ``approxkl``
  follow the same lines.
- ``value_loss``: the clipped value loss of OpenAI baselines ``ppo2`` and
  lm-human-preferences (``vf_losses1``, ``vf_losses2``), used by Stiennon et al.
  (2020); "The 37 Implementation Details of PPO" (Huang et al. 2022), detail 9.
- ``entropy_from_logits`` / ``logprobs_from_logits`` (from ``models/forward.py``):
  stable (logsumexp-based) reductions of (B, T, V) logits.

Aggregation: every loss is a mean over all real tokens of the (mini)batch
(lm-human-preferences ``reduce_mean`` over fixed-length responses, TRL
``masked_mean``), so splitting a batch and recombining with token-count weights gives
the same loss. Padded positions are neutralised *before* ``exp`` so garbage there
can neither appear in the loss nor produce nan gradients.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from rlhflab.metrics.stats import masked_mean
from rlhflab.models.forward import logprobs_from_logits  # a forward-pass reduction, shared with sampling

__all__ = [
    "PolicyLossStats",
    "ValueLossStats",
    "policy_loss",
    "value_loss",
    "entropy_from_logits",
    "logprobs_from_logits",
]


@dataclass(frozen=True)
class PolicyLossStats:
    """Diagnostics of one ``policy_loss`` call; each a detached 0-d tensor."""

    clipfrac: Tensor
    """Fraction of real tokens where the clipped surrogate was the active (larger) loss."""
    approxkl: Tensor
    """Masked mean of 0.5 * (logprobs - old_logprobs)^2: the k2 estimate of KL(old || new)."""
    ratio_mean: Tensor
    """Mean of pi/pi_old over real tokens; exactly 1 on the first minibatch of the first epoch."""
    ratio_max: Tensor
    """Max of pi/pi_old over real tokens; large values flag stale or mismatched logprobs."""


@dataclass(frozen=True)
class ValueLossStats:
    """Diagnostics of one ``value_loss`` call; each a detached 0-d tensor."""

    clipfrac: Tensor
    """Fraction of real tokens where the clipped value error was the active (larger) one."""


def _where_real(x: Tensor, mask: Tensor) -> Tensor:
    # x on real tokens, 0 on padding; keeps padded garbage out of exp() and out of
    # the backward pass (torch.where's gradient is nan if the unselected branch is inf).
    return torch.where(mask, x, torch.zeros((), dtype=x.dtype, device=x.device))


def policy_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    clip_eps: float,
) -> tuple[Tensor, PolicyLossStats]:
    """PPO clipped surrogate loss (to minimise).

    Schulman et al. (2017) eq. 7; lm-human-preferences ``PPOTrainer.loss``:

        ratio_t = exp(log pi(a_t|s_t) - log pi_old(a_t|s_t))
        L_t     = max(-A_t * ratio_t, -A_t * clip(ratio_t, 1 - eps, 1 + eps))
        L       = mean of L_t over real tokens

    Args:
        logprobs: (B, T) log pi of the taken tokens under the current policy (with grad).
        old_logprobs: (B, T) log pi_old recorded at rollout (no grad).
        advantages: (B, T) advantage estimates, usually whitened (no grad).
        mask: (B, T) bool, True for a real response token.
        clip_eps: epsilon of the clip range [1 - eps, 1 + eps] (0.2 in the paper).

    Returns:
        loss: 0-d tensor with grad w.r.t. ``logprobs`` only.
        stats: ``PolicyLossStats``.
    """
    if clip_eps < 0:
        raise ValueError(f"clip_eps must be >= 0, got {clip_eps}")
    # old_logprobs and advantages are targets: no gradient may flow into them
    log_ratio = _where_real(logprobs - old_logprobs.detach(), mask)  # (B, T), 0 on padding
    ratio = torch.exp(log_ratio)  # (B, T), 1 on padding
    adv = _where_real(advantages.detach(), mask)  # (B, T)
    pg_losses = -adv * ratio
    pg_losses2 = -adv * torch.clamp(ratio, 1.0 - clip_eps, 1.0 + clip_eps)
    loss = masked_mean(torch.maximum(pg_losses, pg_losses2), mask)
    with torch.no_grad():
        neg_inf = torch.tensor(float("-inf"), dtype=ratio.dtype, device=ratio.device)
        stats = PolicyLossStats(
            # strict >: when the ratio is inside the clip range the two terms tie
            clipfrac=masked_mean((pg_losses2 > pg_losses).to(ratio.dtype), mask),
            approxkl=masked_mean(0.5 * log_ratio.square(), mask),
            ratio_mean=masked_mean(ratio, mask),
            ratio_max=torch.where(mask, ratio, neg_inf).max(),
        )
    return loss, stats


def value_loss(
    values: Tensor,
    old_values: Tensor,
    returns: Tensor,
    mask: Tensor,
    clip_eps: float,
) -> tuple[Tensor, ValueLossStats]:
    """Clipped value-function loss (to minimise).

    OpenAI baselines ppo2 / lm-human-preferences ``PPOTrainer.loss``:

        V_clip = clip(V, V_old - eps, V_old + eps)
        L      = 0.5 * mean over real tokens of max((V - R)^2, (V_clip - R)^2)

    Args:
        values: (B, T) current value predictions (with grad).
        old_values: (B, T) value predictions recorded at rollout (no grad).
        returns: (B, T) value targets, e.g. ``gae`` returns (no grad).
        mask: (B, T) bool, True for a real response token.
        clip_eps: half-width of the trust region around ``old_values``, in reward
            units (lm-human-preferences ``cliprange_value`` = 0.2).

    Returns:
        loss: 0-d tensor with grad w.r.t. ``values`` only.
        stats: ``ValueLossStats``.
    """
    if clip_eps < 0:
        raise ValueError(f"clip_eps must be >= 0, got {clip_eps}")
    v = _where_real(values, mask)
    v_old = _where_real(old_values.detach(), mask)
    ret = _where_real(returns.detach(), mask)
    # V_clip = clip(V, V_old - eps, V_old + eps)
    v_clipped = torch.clamp(v, v_old - clip_eps, v_old + clip_eps)
    vf_losses1 = (v - ret).square()
    vf_losses2 = (v_clipped - ret).square()
    loss = 0.5 * masked_mean(torch.maximum(vf_losses1, vf_losses2), mask)
    with torch.no_grad():
        stats = ValueLossStats(
            clipfrac=masked_mean((vf_losses2 > vf_losses1).to(v.dtype), mask),
        )
    return loss, stats


def entropy_from_logits(logits: Tensor) -> Tensor:
    """Entropy of the categorical distribution at each position.

    H = -sum_v p_v log p_v with log p = logits - logsumexp(logits), which is stable for
    any logit scale; 0 * log 0 is taken as 0, so -inf logits (a masked vocabulary)
    are allowed (a row of only -inf logits gives nan).  Same value as TRL's
    ``logsumexp(logits) - sum(softmax(logits) * logits)``.

    Args:
        logits: (B, T, V) unnormalised log-probabilities (already divided by the
            sampling temperature, if any).

    Returns:
        (B, T) entropies in nats.
    """
    # shift by the max first so that large offsets cancel exactly (H is shift-invariant,
    # hence the detach: no gradient is lost)
    z = logits - logits.amax(dim=-1, keepdim=True).detach()  # (B, T, V), max 0
    logp = z - torch.logsumexp(z, dim=-1, keepdim=True)  # log p = z - log sum exp z
    p = logp.exp()
    # clamp turns log 0 = -inf into a finite number so that p * log p = 0 * finite = 0
    return -(p * logp.clamp_min(torch.finfo(logp.dtype).min)).sum(dim=-1)


def mean_entropy(logits: Tensor, mask: Tensor) -> Tensor:
    """The policy's entropy averaged over the response tokens in `mask` (padding is no
    token of any response). (B, T, V), (B, T) -> 0-d"""
    return masked_mean(entropy_from_logits(logits), mask)
