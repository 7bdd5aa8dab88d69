"""Correcting the policy loss for a sampler that is not the trainer: importance weights
from the trainer's old logprobs over the sampler's (the inference engine's) for the same
sampled tokens, and what the sampler/trainer mismatch measures.

Samples drawn from pi_sampler but trained on as if from pi_old make the update off-policy;
weighting each token's loss by w = pi_old / pi_sampler restores the expectation (Yao et
al. 2025, "Your efficient RL framework secretly brings you off-policy RL training": the
weight truncated at C, TIS). Masking instead drops the tokens or sequences whose ratio is
out of bounds (Liu et al. 2025, "When speed kills stability", masked IS). The mode names
are TRL's (`GRPOConfig.vllm_importance_sampling_mode`); as TRL does, a masked token keeps
its place in the loss's token mean with weight 0, and a sequence's ratio is the product
of its tokens' (exp of the summed log-ratios).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from rlhflab.metrics.stats import masked_mean
from rlhflab.ppo.kl import kl_estimate


@dataclass(frozen=True)
class Correction:
    """Per-token weights of the policy loss, and how much they changed."""

    weights: Tensor  # (B, T) detached, 0 on padding
    changed_frac: float  # share of real tokens whose weight is not their raw ratio (truncated or masked)


def log_ratios(trainer_logprobs: Tensor, sampler_logprobs: Tensor, mask: Tensor, level: str) -> Tensor:
    """log(pi_trainer / pi_sampler) per token ("token") or per sequence ("sequence": the
    sum over its real tokens, given to each of them). (B, T), 0 on padding."""
    per_token = (trainer_logprobs - sampler_logprobs).masked_fill(~mask, 0.0)
    if level == "token":
        return per_token
    return per_token.sum(dim=1, keepdim=True).expand_as(per_token).masked_fill(~mask, 0.0)


def importance_weights(trainer_logprobs: Tensor, sampler_logprobs: Tensor, mask: Tensor, mode: str,
                       low: float | None, high: float) -> Correction | None:
    """The weights of `mode` (token_truncate, sequence_truncate: the ratio clamped to
    [low, high], as TRL clamps; token_mask, sequence_mask: the ratio where low <= ratio <=
    high, else 0; `low` None: no lower bound), or None for "none"."""
    if mode == "none":
        return None
    level, _, kind = mode.partition("_")
    log_ratio = log_ratios(trainer_logprobs, sampler_logprobs, mask, level)
    # Clamped in log space before exp: a sequence's summed log-ratio can overflow (veRL clamps at +-20).
    ratio = log_ratio.clamp(-20.0, 20.0).exp()
    if kind == "truncate":
        weights = ratio.clamp(min=low, max=high)
    else:
        inside = ratio <= high
        if low is not None:
            inside &= ratio >= low
        weights = torch.where(inside, ratio, 0.0)
    weights = weights.masked_fill(~mask, 0.0).detach()
    changed = (weights != ratio) & mask
    return Correction(weights, float(changed.sum()) / max(float(mask.sum()), 1.0))


def mismatch_metrics(trainer_logprobs: Tensor, sampler_logprobs: Tensor, mask: Tensor) -> dict[str, float]:
    """The sampler/trainer mismatch of one rollout, per real token, in the canonical names:
    mean |logp_trainer - logp_sampler|; the k3 KL of the sampler to the trainer (tokens are
    the sampler's draws: Schulman 2020's k3 with r = pi_trainer / pi_sampler, NeMo-RL's
    gen_kl_error); the mean importance ratio pi_trainer / pi_sampler (1 is a perfect match)."""
    diff = trainer_logprobs - sampler_logprobs
    # The ratio's log clamped at 20 (e^20): a stale sampler's gap must not log an infinity.
    bounded = diff.clamp(max=20.0)
    return {
        "mismatch/logp_abs_diff": float(masked_mean(diff.abs(), mask)),
        "mismatch/kl": float(masked_mean(kl_estimate(sampler_logprobs, sampler_logprobs + bounded, "k3"), mask)),
        "mismatch/is_ratio_mean": float(masked_mean(bounded.exp(), mask)),
    }


def correction_metrics(correction: Correction | None, mask: Tensor) -> dict[str, float]:
    """The weights' mean over real tokens and the share they changed (nothing without a correction)."""
    if correction is None:
        return {}
    mean = float(masked_mean(correction.weights, mask))
    return {"correction/weight_mean": mean if math.isfinite(mean) else math.nan,
            "correction/changed_frac": correction.changed_frac}
