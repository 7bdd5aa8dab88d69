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
