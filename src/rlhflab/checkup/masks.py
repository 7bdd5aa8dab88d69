"""Probes of masking: every statistic of the update (whitening, KL, reward shaping, GAE,
policy and value losses, entropy) is unchanged when padding is added or its values
changed, and the mask covers the response up to and including its first EOS."""

from __future__ import annotations

import torch
from torch import Tensor

from rlhflab.checkup.context import ProbeContext
from rlhflab.checkup.results import ProbeResult, within
from rlhflab.metrics.stats import masked_mean
from rlhflab.ppo import losses

EXTRA_PADDING = 3  # columns of garbage appended after every response


def _garbage_padding(x: Tensor, mask: Tensor, generator: torch.Generator) -> Tensor:
    """`x` with its padded positions replaced by large random values and EXTRA_PADDING more
    such columns appended (along the token axis, dim 1)."""
    noise = lambda shape: 50.0 * torch.randn(shape, generator=generator).to(x.device, x.dtype)  # noqa: E731
    padded = torch.where(mask.view(*mask.shape, *[1] * (x.dim() - 2)), x, noise(x.shape))
    return torch.cat([padded, noise((x.shape[0], EXTRA_PADDING, *x.shape[2:]))], 1)


def _statistics(ctx: ProbeContext, logprobs, ref_logprobs, old_logprobs, values, old_values, logits, mask):
    """The update's statistics, each by the configured component (entropy by the trainer's
    masked mean), as {name: tensor restricted to real tokens}."""
    c, cfg, scores = ctx.state.components, ctx.config.ppo, ctx.rollout().scores
    rewards, kl = c.shape_rewards(scores, logprobs, ref_logprobs, mask, ctx.state.controller.value, cfg.kl_estimator)
    advantages, returns = c.gae(rewards, values, mask, cfg.gamma, cfg.lam)
    whitened = c.whiten(advantages, mask)
    policy, _ = c.policy_loss(logprobs, old_logprobs, whitened, mask, cfg.clip_eps)
    value, _ = c.value_loss(values, old_values, returns, mask, cfg.value_clip_eps)
    entropy = masked_mean(losses.entropy_from_logits(logits), mask)
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
    padded = _statistics(ctx, *(_garbage_padding(t, mask, g) for t in tensors), padded_mask)
    gaps = {name: float((clean[name] - padded[name]).abs().max()) for name in clean}
    worst = max(gaps, key=gaps.get)
    return within("statistics_ignore_padding", "advantages_values", gaps[worst], 1e-5,
                  f"max change of a statistic when padding's values change and {EXTRA_PADDING} padded columns "
                  f"are added (largest: {worst})")


def probe_mask_covers_response(ctx: ProbeContext) -> ProbeResult:
    wrong = int((ctx.response_mask() != ctx.rollout().mask).sum())
    return within("mask_covers_response_through_eos", "advantages_values", wrong, 0,
                  "response positions where the loss mask differs from 'up to and including the first EOS'")
