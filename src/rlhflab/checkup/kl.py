"""Probes of KL control: the penalty lowers the reward of tokens the policy moved toward
(a penalty, not a bonus) and, once the policy has moved, is beta times the KL to the
starting model token by token (Ziegler et al. 2019 eq. 2); an adaptive controller raises
beta when the KL is above its target and lowers it when below (sec. 2.2)."""

from __future__ import annotations

from dataclasses import replace

import torch

from rlhflab.checkup.context import ProbeContext
from rlhflab.checkup.results import FORWARD_TOLERANCES, ProbeResult, ProbeSkipped, within
from rlhflab.ppo.kl import kl_estimate

PROBE_BETA = 0.1  # any positive beta: the sign of the reward's change is what is probed


def probe_kl_penalty_lowers_the_reward(ctx: ProbeContext) -> ProbeResult:
    """Shaped rewards where the policy's logprobs exceed the reference's by 0.5 on every
    token (a positive KL), against the same with no KL: every token must lose reward."""
    rollout, real, c = ctx.rollout(), ctx.response_mask(), ctx.state.components
    moved = rollout.ref_logprobs + 0.5 * real
    penalised, _ = c.shape_rewards(rollout.scores, moved, rollout.ref_logprobs, real, PROBE_BETA,
                                   ctx.config.ppo.kl_estimator)
    plain, _ = c.shape_rewards(rollout.scores, rollout.ref_logprobs, rollout.ref_logprobs, real, PROBE_BETA,
                               ctx.config.ppo.kl_estimator)
    change = (penalised - plain)[real]
    return within("kl_penalty_lowers_the_reward", "kl_control", float(change.max()), -1e-6,
                  f"largest change of a token's reward when the policy's logprob exceeds the reference's by 0.5 "
                  f"(beta = {PROBE_BETA:g}; must be negative on every token)")


def probe_kl_controller_moves_toward_target(ctx: ProbeContext) -> ProbeResult:
    """The configured controller factory, given a target (and a positive starting beta: a
    beta of 0 is a setting, which the settings check reports), after one iteration at twice
    the target and one at half of it: beta must rise, then fall."""
    config = ctx.config.ppo
    target = config.kl_target or 6.0
    adaptive = replace(config, kl_target=target, kl_coef=config.kl_coef or PROBE_BETA)
    moves = []
    for observed in (2.0 * target, 0.5 * target):
        controller = ctx.state.components.make_kl_controller(adaptive)
        before = controller.value
        controller.update(observed, config.batch_size)
        moves.append(controller.value - before)
    above, below = moves
    wrong = (above <= 0) + (below >= 0)
    return within("kl_controller_moves_toward_target", "kl_control", wrong, 0,
                  f"wrong-way moves of an adaptive beta (target {target:g}): at twice the target it moved by "
                  f"{above:+.3g}, at half by {below:+.3g}")


# Below this largest per-token KL the policy has not moved from the starting model, and a
# penalty of any size would read as 0.
MIN_MOVED_KL = 1e-3


def probe_kl_penalty_is_beta_times_the_kl(ctx: ProbeContext) -> ProbeResult:
    """In the moved state: the configured reward shaping, given the rollout's recorded
    logprobs and reference logprobs (and no score), charges each token -beta x the
    configured estimator of its KL to the starting model, loaded afresh (a second path to the
    reference). A penalty N times too large, a sequence's KL put on each of its tokens, or a
    reference that follows the policy shows here; at the start the KL is 0 and would hide them."""
    c, cfg = ctx.state.components, ctx.config.ppo
    mask = ctx.recorded_mask()
    rows = mask.any(1)  # a response the trainer's mask left empty has nothing to charge
    if not bool(rows.any()):
        raise ProbeSkipped("the trainer's mask leaves no response token to charge a penalty on")
    rollout, mask = ctx.rollout().select(rows.nonzero().flatten()), mask[rows]
    starting = ctx.starting_logprobs()[rows]
    expected_kl = torch.where(mask, kl_estimate(rollout.logprobs, starting, cfg.kl_estimator), 0.0)
    if float(expected_kl.abs().max()) < MIN_MOVED_KL:
        raise ProbeSkipped(f"the policy has not moved from the starting model (largest per-token KL "
                           f"{float(expected_kl.abs().max()):.2g} < {MIN_MOVED_KL:g})")
    beta = ctx.state.controller.value or PROBE_BETA  # beta = 0 is a setting: the shaping is still probed
    penalty, _ = c.shape_rewards(torch.zeros_like(rollout.scores), rollout.logprobs, rollout.ref_logprobs, mask,
                                 beta, cfg.kl_estimator)
    expected = -beta * expected_kl
    gap = float((penalty - expected)[mask].abs().max())
    ratio = float(penalty[mask].sum() / expected[mask].sum()) if float(expected[mask].sum()) else float("nan")
    limit = beta * FORWARD_TOLERANCES["kl_zero_before_update"][ctx.dtype] + 1e-6
    return within("kl_penalty_is_beta_times_the_kl", "kl_control", gap, limit,
                  f"max |per-token penalty - (-beta x {cfg.kl_estimator} KL to the starting model)| with beta = "
                  f"{beta:g} (the penalty is {ratio:.3g}x the KL's)")
