"""Probes of masking: every statistic of the update (whitening, KL, reward shaping, GAE,
policy and value losses, entropy) is unchanged when padding is added or its values
changed (NaN and Inf included), and the mask covers the response up to and including
its first EOS; and the entropy the update reports is that of the distributions it reads."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from rlhflab.checkup.context import ProbeContext
from rlhflab.checkup.results import ProbeResult, within

EXTRA_PADDING = 3  # columns of garbage appended after every response


def _garbage_padding(x: Tensor, mask: Tensor, generator: torch.Generator, non_finite: bool = False) -> Tensor:
    """`x` with its padded positions replaced by large random values and EXTRA_PADDING more
    such columns appended (along the token axis, dim 1); with `non_finite`, every other
    padded value NaN or Inf instead (what a masked slot may hold: a filtered token, a
    sentinel), which only a statistic that selects real tokens, rather than multiplying
    by the mask, leaves out."""
    def noise(shape) -> Tensor:
        values = 50.0 * torch.randn(shape, generator=generator)
        if non_finite:
            flat = values.view(-1)
            flat[0::4], flat[1::4] = float("nan"), float("inf")
        return values.to(x.device, x.dtype)

    padded = torch.where(mask.view(*mask.shape, *[1] * (x.dim() - 2)), x, noise(x.shape))
    return torch.cat([padded, noise((x.shape[0], EXTRA_PADDING, *x.shape[2:]))], 1)


def _statistics(ctx: ProbeContext, logprobs, ref_logprobs, old_logprobs, values, old_values, logits, mask):
    """The update's statistics, each by the configured component, as {name: tensor
    restricted to real tokens}."""
    c, cfg, scores = ctx.state.components, ctx.config.ppo, ctx.rollout().scores
    rewards, kl = c.shape_rewards(scores, logprobs, ref_logprobs, mask, ctx.state.controller.value, cfg.kl_estimator)
    advantages, returns = c.gae(rewards, values, mask, cfg.gamma, cfg.lam)
    whitened = c.whiten(advantages, mask)
    policy, _ = c.policy_loss(logprobs, old_logprobs, whitened, mask, cfg.clip_eps)
    value, _ = c.value_loss(values, old_values, returns, mask, cfg.value_clip_eps)
    entropy = c.entropy(logits, mask)
    return {"kl": kl[mask], "rewards": rewards[mask], "advantages": advantages[mask], "returns": returns[mask],
            "whitened advantages": whitened[mask], "policy loss": policy, "value loss": value, "entropy": entropy}


@torch.no_grad()
def probe_statistics_ignore_padding(ctx: ProbeContext) -> ProbeResult:
    rollout = ctx.rollout()
    mask = ctx.response_mask()
    g = torch.Generator().manual_seed(0)
    # A moved policy and value head, so that ratios, KL and value errors are all non-trivial.
    logprobs = rollout.logprobs + 0.1 * torch.randn(mask.shape, generator=g).to(mask.device) * mask
    values = rollout.values + 0.1 * torch.randn(mask.shape, generator=g).to(mask.device) * mask
    logits = torch.randn((*mask.shape, 8), generator=g).to(mask.device)
    tensors = (logprobs, rollout.ref_logprobs, rollout.logprobs, values, rollout.values, logits)
    clean = _statistics(ctx, *tensors, mask)
    padded_mask = torch.cat([mask, torch.zeros(mask.shape[0], EXTRA_PADDING, dtype=torch.bool, device=mask.device)], 1)
    gaps: dict[str, float] = {}
    for non_finite in (False, True):
        padded = _statistics(ctx, *(_garbage_padding(t, mask, g, non_finite) for t in tensors), padded_mask)
        for name in clean:
            gap = (clean[name] - padded[name]).abs().max()
            gaps[name] = max(gaps.get(name, 0.0), float(gap) if torch.isfinite(gap) else float("inf"))
    worst = max(gaps, key=gaps.get)
    return within("statistics_ignore_padding", "advantages_values", gaps[worst], 1e-5,
                  f"max change of a statistic when padding's values change (to large numbers, then to NaN and Inf) "
                  f"and {EXTRA_PADDING} padded columns are added (largest: {worst})")


def probe_mask_covers_response(ctx: ProbeContext) -> ProbeResult:
    wrong = int((ctx.response_mask() != ctx.rollout().mask).sum())
    return within("mask_covers_response_through_eos", "advantages_values", wrong, 0,
                  "response positions where the loss mask differs from 'up to and including the first EOS'")


@torch.no_grad()
def probe_entropy_of_known_distributions(ctx: ProbeContext) -> ProbeResult:
    """The update's entropy (the configured `entropy` component) on logits whose entropy is
    known: uniform over V tokens at real positions (ln V), one certain token at padding
    positions (0), so a mean that counts padding, or anything but the real tokens' mean
    entropy, is off by a share of ln V."""
    mask = ctx.response_mask().cpu()
    vocabulary = 16
    logits = torch.zeros((*mask.shape, vocabulary))
    logits[..., 0] = torch.where(mask, 0.0, 1e4)
    measured = float(ctx.state.components.entropy(logits, mask))
    expected = math.log(vocabulary)
    return within("entropy_of_known_distributions", "advantages_values", abs(measured - expected), 1e-4,
                  f"difference between the update's entropy of uniform distributions over {vocabulary} tokens at the "
                  f"real tokens and ln {vocabulary} = {expected:.4f} (measured {measured:.4f})")
