"""Probes of where gradients go: the policy loss differentiates only the current
logprobs and the value loss only the current values (advantages, returns, old and
reference logprobs are targets), the value loss moves the values toward the returns, and
the KL penalty, which lives in the reward, reaches no parameter."""

from __future__ import annotations

import math

import torch

from rlhflab.checkup.context import ProbeContext
from rlhflab.checkup.iteration import preserved
from rlhflab.checkup.results import ProbeResult, within
from rlhflab.metrics.stats import masked_mean


def probe_losses_differentiate_current_outputs_only(ctx: ProbeContext) -> ProbeResult:
    trace = ctx.iteration()
    calls = trace.policy_calls + trace.value_calls
    passed_with_grad = sum(call.targets_require_grad for call in calls)
    leak = max(call.target_gradient for call in calls)
    measured = math.inf if passed_with_grad else leak
    return within("losses_differentiate_current_outputs_only", "advantages_values", measured, 0.0,
                  f"max |gradient of the policy and value losses reaching advantages, returns, old logprobs or "
                  f"old values| over {len(calls)} loss calls of a real update"
                  + (f"; {passed_with_grad} calls got those targets with a gradient path" if passed_with_grad else ""))


def probe_kl_penalty_reaches_no_parameter(ctx: ProbeContext) -> ProbeResult:
    """The shaped rewards (where the KL penalty lives), the advantages and returns built
    from them carry no gradient path into any parameter."""
    adv = ctx.iteration().advantages
    tensors = {"rewards": adv.rewards, "kl": adv.kl, "advantages": adv.advantages, "returns": adv.returns}
    with_path = [name for name, t in tensors.items() if t.requires_grad or t.grad_fn is not None]
    return within("kl_penalty_reaches_no_parameter", "kl_control", len(with_path), 0,
                  "tensors of the reward shaping with a gradient path: " + (", ".join(with_path) or "none"))


def probe_value_loss_moves_values_toward_returns(ctx: ProbeContext) -> ProbeResult:
    """One small step along the value loss's gradient (the configured value loss on the
    first minibatch of a real iteration) must bring the values closer to the returns."""
    trace, state, cfg = ctx.iteration(), ctx.state, ctx.config.ppo
    index = torch.arange(len(trace.rollout.prompts) // cfg.minibatches)
    mb, returns = trace.rollout.select(index), trace.advantages.returns[index]

    def values_and_error():
        _, values = state.policy(mb.input_ids, mb.attention_mask, mb.prompt_len, cfg.temperature,
                                 state.components.response_logits)
        return values, masked_mean((values - returns).square(), mb.mask)

    with preserved(state):
        values, before = values_and_error()
        loss, _ = state.components.value_loss(values, mb.values, returns, mb.mask, cfg.value_clip_eps)
        params = [p for p in state.policy.parameters() if p.requires_grad]
        grads = torch.autograd.grad(loss, params, allow_unused=True) if loss.requires_grad else [None] * len(params)
        head = {id(p) for p in state.policy.value_head.parameters()}
        head_grad = sum(float(g.square().sum()) for p, g in zip(params, grads) if g is not None and id(p) in head)
        norm = sum(float(g.square().sum()) for g in grads if g is not None)
        if norm > 0:
            step = 0.01 * abs(float(loss.detach())) / norm  # to first order, 1% off the loss
            with torch.no_grad():
                for p, g in zip(params, grads):
                    if g is not None:
                        p.sub_(step * g)
        with torch.no_grad():
            _, after = values_and_error()
    change = float(after - before.detach()) / max(float(before.detach()), 1e-12)
    measured = math.inf if head_grad == 0 else change
    return within("value_loss_moves_values_toward_returns", "advantages_values", measured, 0.0,
                  f"relative change of mean (value - return)^2 after a small step along the value loss "
                  f"(must fall; value-head gradient norm^2 = {head_grad:.3g})")


def probe_clip_bounds_the_update(ctx: ProbeContext) -> ProbeResult:
    """The clipped surrogate removes the incentive to move a ratio outside [1 - eps, 1 + eps]
    (Schulman et al. 2017, eq. 7): with the configured policy loss and clip range, a token
    whose ratio is already past the range in its advantage's direction gets no gradient,
    and one inside the range does. Measured on the rollout's tokens with unit advantages."""
    rollout, cfg = ctx.rollout(), ctx.config.ppo
    mask, eps = ctx.response_mask(), cfg.clip_eps
    old = rollout.logprobs
    # Even rows: A = +1 at ratio 1 + 2 eps; odd rows: A = -1 at ratio (1 - eps) / 2 (a range
    # of eps >= 1 has no lower side to pass: every row is then an even one).
    odd = (torch.arange(mask.shape[0], device=mask.device)[:, None] % 2 == 1) & (eps < 1)
    advantages = torch.where(odd, -1.0, 1.0).expand_as(old) * mask
    past = torch.where(odd, math.log(max(1 - eps, 1e-6) / 2), math.log1p(2 * eps))
    grads = []
    for shift in (past, torch.zeros_like(past)):
        logprobs = (old + shift * mask).detach().requires_grad_(True)
        loss, _ = ctx.state.components.policy_loss(logprobs, old, advantages, mask, eps)
        grads.append(torch.autograd.grad(loss, logprobs)[0][mask].abs().max() if loss.requires_grad else
                     torch.tensor(0.0))
    outside, inside = (float(g) for g in grads)
    measured = outside if inside > 0 else math.inf
    return within("clip_bounds_the_update", "advantages_values", measured, 0.0,
                  f"max |gradient| of the policy loss on tokens whose ratio is past the clip range in their "
                  f"advantage's direction (inside the range: {inside:.3g}, which must be > 0)")


def probe_value_loss_zero_at_returns(ctx: ProbeContext) -> ProbeResult:
    """The value loss is 0 when the values (and the rollout's values) equal the returns,
    and positive when they are off by 1: its targets are the returns."""
    trace, cfg = ctx.iteration(), ctx.config.ppo
    returns, mask = trace.advantages.returns, trace.rollout.mask
    at, _ = ctx.state.components.value_loss(returns, returns, returns, mask, cfg.value_clip_eps)
    off, _ = ctx.state.components.value_loss(returns + 1.0, returns, returns, mask, cfg.value_clip_eps)
    measured = float(at) if float(off) > 0 else math.inf
    return within("value_loss_zero_at_returns", "advantages_values", abs(measured), 1e-6,
                  f"the value loss with values = rollout values = returns (off by 1: {float(off):.3g}, which must "
                  "be > 0)")
