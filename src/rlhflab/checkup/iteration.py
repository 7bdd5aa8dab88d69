"""One real PPO iteration (rollout -> scoring -> reward shaping -> advantages -> every
minibatch of every epoch of the update), traced: what the trainer passes to its loss
components on each minibatch, and what those losses do with it. The probes read the trace;
the policy, optimiser and KL controller are restored afterwards."""

from __future__ import annotations

import copy
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Iterator

import torch
from torch import Tensor

from rlhflab.ppo.rollout import Rollout
from rlhflab.ppo.state import PPOState
from rlhflab.ppo.trainer import Advantages, compute_advantages, ppo_update
from rlhflab.seeding import torch_generator


@dataclass(frozen=True)
class MinibatchCall:
    """One call of the policy loss during the update, in the order the trainer made them."""

    old_logprobs: Tensor  # (b, T) what the trainer passed as the rollout's logprobs, detached
    advantages: Tensor  # (b, T) the advantages it passed, detached
    mask: Tensor  # (b, T)
    ratio_mean: float
    approxkl: float
    targets_require_grad: bool  # old logprobs or advantages passed with a gradient path
    target_gradient: float  # |d loss / d (old logprobs, advantages)| when both are made leaves


@dataclass(frozen=True)
class ValueCall:
    returns: Tensor  # (b, T) the returns the trainer passed, detached
    old_values: Tensor  # (b, T) the rollout's values it passed, detached
    targets_require_grad: bool  # returns or old values passed with a gradient path
    target_gradient: float  # |d loss / d (returns, old values)| when both are made leaves


@dataclass
class IterationTrace:
    rollout: Rollout
    advantages: Advantages
    policy_calls: list[MinibatchCall] = field(default_factory=list)
    value_calls: list[ValueCall] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)


@contextmanager
def preserved(state: PPOState) -> Iterator[None]:
    """The policy's weights, the optimiser's moments and the KL controller as they were (and
    the rollout sampler told the weights again)."""
    weights = copy.deepcopy(state.policy.state_dict())
    optimizer = copy.deepcopy(state.optimizer.state_dict())
    controller = copy.deepcopy(state.controller.state_dict())
    try:
        yield
    finally:
        state.policy.load_state_dict(weights)
        state.optimizer.load_state_dict(optimizer)
        state.controller.load_state_dict(controller)
        state.sampler.push(state.policy.lm)


def _target_gradient(loss_fn, current: Tensor, targets: tuple[Tensor, ...], *rest) -> float:
    """The loss's gradient reaching its target inputs (which must get none), with the
    current values and the targets as fresh leaves."""
    leaves = [t.detach().clone().requires_grad_(True) for t in targets]
    loss, _ = loss_fn(current.detach().clone().requires_grad_(True), *leaves, *rest)
    if not loss.requires_grad:  # nothing differentiable at all: no gradient reaches the targets either
        return 0.0
    grads = torch.autograd.grad(loss, leaves, allow_unused=True)
    return max((float(g.abs().max()) for g in grads if g is not None), default=0.0)


def _policy_recorder(loss_fn, calls: list[MinibatchCall]):
    def recorded(logprobs, old_logprobs, advantages, mask, clip_eps):
        loss, stats = loss_fn(logprobs, old_logprobs, advantages, mask, clip_eps)
        leak = _target_gradient(lambda cur, old, adv: loss_fn(cur, old, adv, mask, clip_eps),
                                logprobs, (old_logprobs, advantages))
        calls.append(MinibatchCall(old_logprobs.detach().clone(), advantages.detach().clone(), mask.clone(),
                                   float(stats.ratio_mean), float(stats.approxkl),
                                   old_logprobs.requires_grad or advantages.requires_grad, leak))
        return loss, stats
    return recorded


def _value_recorder(loss_fn, calls: list[ValueCall]):
    def recorded(values, old_values, returns, mask, clip_eps):
        # The leaf test keeps the order of the real call: (returns, old values) as targets.
        leak = _target_gradient(lambda cur, ret, old: loss_fn(cur, old, ret, mask, clip_eps),
                                values, (returns, old_values))
        calls.append(ValueCall(returns.detach().clone(), old_values.detach().clone(),
                               returns.requires_grad or old_values.requires_grad, leak))
        return loss_fn(values, old_values, returns, mask, clip_eps)
    return recorded


def run_update(state: PPOState, rollout: Rollout, seed: int) -> IterationTrace:
    """Advantages and the full update on `rollout` with the state's own components, traced.
    The state is changed: callers wrap it in `preserved`."""
    trace = IterationTrace(rollout, compute_advantages(state, rollout))
    components = state.components
    state.components = replace(components, policy_loss=_policy_recorder(components.policy_loss, trace.policy_calls),
                               value_loss=_value_recorder(components.value_loss, trace.value_calls))
    try:
        trace.metrics = ppo_update(state, rollout, trace.advantages, torch_generator(seed, "checkup", "update"))
    finally:
        state.components = components
    return trace


def trace_iteration(state: PPOState, rollout: Rollout, seed: int) -> IterationTrace:
    """One PPO update on `rollout`, traced; the state is as it was afterwards."""
    with preserved(state):
        return run_update(state, rollout, seed)
