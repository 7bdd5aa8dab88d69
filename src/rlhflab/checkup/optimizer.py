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
