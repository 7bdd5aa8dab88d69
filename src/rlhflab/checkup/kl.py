"""Probes of KL control: the penalty lowers the reward of tokens the policy moved toward
(a penalty, not a bonus), and an adaptive controller raises beta when the KL is above its
target and lowers it when below (Ziegler et al. 2019, sec. 2.2)."""

from __future__ import annotations

from dataclasses import replace

from rlhflab.checkup.context import ProbeContext
from rlhflab.checkup.results import ProbeResult, within

PROBE_BETA = 0.1  # any positive beta: the sign of the reward's change is what is probed


def probe_kl_penalty_lowers_the_reward(ctx: ProbeContext) -> ProbeResult:
    """Shaped rewards where the policy's logprobs exceed the reference's by 0.5 on every
    token (a positive KL), against the same with no KL: every token must lose reward."""
    rollout, c = ctx.rollout(), ctx.state.components
    moved = rollout.ref_logprobs + 0.5 * rollout.mask
    penalised, _ = c.shape_rewards(rollout.scores, moved, rollout.ref_logprobs, rollout.mask, PROBE_BETA,
                                   ctx.config.ppo.kl_estimator)
    plain, _ = c.shape_rewards(rollout.scores, rollout.ref_logprobs, rollout.ref_logprobs, rollout.mask, PROBE_BETA,
                               ctx.config.ppo.kl_estimator)
    change = (penalised - plain)[rollout.mask]
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
