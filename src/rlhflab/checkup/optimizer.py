"""The probe of the optimiser across updates: in the moved state every trainable parameter
(the value head's too) is in the optimiser, and Adam's moments have been carried through
every step taken, not rebuilt or lost between iterations (Kingma and Ba 2015: the moments
are running averages over all steps; a reset makes every step a bias-corrected first one,
of full size whatever the gradient's history)."""

from __future__ import annotations

from rlhflab.checkup.context import ProbeContext
from rlhflab.checkup.results import ProbeResult, ProbeSkipped, within


def _step(slots: dict) -> int | None:
    step = slots.get("step")
    return None if step is None else int(step)


def probe_optimizer_state_carried(ctx: ProbeContext) -> ProbeResult:
    optimizer = ctx.state.optimizer
    in_optimizer = {id(p) for group in optimizer.param_groups for p in group["params"]}
    trainable = [p for p in ctx.state.policy.parameters() if p.requires_grad]
    outside = sum(id(p) not in in_optimizer for p in trainable)
    steps = [_step(optimizer.state.get(p, {})) for p in trainable if id(p) in in_optimizer]
    if not any(s is not None for s in steps):
        raise ProbeSkipped("the optimiser keeps no step count (not an Adam-family optimiser)")
    expected = ctx.where.optimizer_steps
    if expected is None:  # a checkpoint: the largest count, since every parameter takes every step
        expected = max(s for s in steps if s is not None)
    wrong = sum(s != expected for s in steps)
    return within("optimizer_state_carried", "ppo_hyperparameters", outside + wrong, 0,
                  f"trainable parameters outside the optimiser ({outside}) or whose Adam step count is not the "
                  f"{expected} optimiser steps taken ({wrong} of {len(steps)}), in {ctx.where.detail}")


def probe_gradient_step_applies_this_steps_gradient(ctx: ProbeContext) -> ProbeResult:
    """The update's optimiser step (`gradient_step`), through the configured component, on a
    parameter whose gradient is known: each step moves it by its own loss's gradient only
    (none left from an earlier step), scaled to `max_grad_norm` when larger, and a loss that
    is not finite moves nothing. Plain SGD at rate 1, so a step's move is its gradient."""
    import torch

    step, limit = ctx.state.components.gradient_step, ctx.config.ppo.max_grad_norm
    weight = torch.nn.Parameter(torch.zeros(2, dtype=torch.float64))
    optimizer = torch.optim.SGD([weight], lr=1.0)
    direction = torch.tensor([0.3, 0.4], dtype=torch.float64) * limit  # gradient norm limit / 2: no clipping
    errors = []
    for _ in range(3):  # a gradient left from the step before doubles the next move
        before = weight.detach().clone()
        step(optimizer, [weight], (weight * direction).sum(), limit)
        errors.append(float((before - weight.detach() - direction).abs().max()))
    before = weight.detach().clone()
    step(optimizer, [weight], (weight * direction * 20).sum(), limit)  # 10x the limit: clipped to it
    errors.append(float((before - weight.detach() - 2 * direction).abs().max()))
    before = weight.detach().clone()
    step(optimizer, [weight], (weight * direction).sum() * float("nan"), limit)
    moved = (weight.detach() - before).abs().max()
    errors.append(float(moved) if torch.isfinite(moved) else float("inf"))
    # clip_grad_norm_ scales by max_norm / (norm + 1e-6): a relative 1e-6 short of the limit
    return within("gradient_step_applies_this_steps_gradient", "ppo_hyperparameters", max(errors), 1e-5 * limit,
                  "largest difference between a parameter's move and its own step's clipped gradient, over three "
                  "steps, a 10x gradient and a NaN loss (which must move nothing)")
