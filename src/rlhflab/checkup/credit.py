"""Probes of credit assignment with the configured reward shaping and GAE: the score sits
at the last real response token, a sequence's score moves that sequence's advantages only,
GAE equals a naive per-token loop, and every response token gets some credit for the score."""

from __future__ import annotations

import torch
from torch import Tensor

from rlhflab.checkup.context import ProbeContext
from rlhflab.checkup.results import ProbeResult, within

# Credit the first token of a response must get for a unit of score: GAE passes the score
# back by (gamma * lam) per token, so over l tokens it reaches the first one at
# (gamma * lam)^(l - 1). Below 1e-3 the policy gradient of early tokens is left to the
# critic alone (Yuan et al. 2025, VAPO, sec. 3.2: length-adaptive GAE sets
# lam = 1 - 1 / (0.05 l) for this reason). rlhflab's 32 tokens at 0.95: 0.2.
MIN_CREDIT = 1e-3
# Rows of a minibatch and of the rollout are the same sample when their old logprobs and
# values agree to this: both are copies of the rollout's tensors, so they match exactly.
SAME_ROW = 1e-6


def raw_advantages(ctx: ProbeContext, scores: Tensor) -> Tensor:
    """Advantages before whitening for the rollout with `scores`, by the configured
    reward shaping and GAE (whitening mixes every row by design, so it is left out)."""
    rollout, real, c, cfg = ctx.rollout(), ctx.response_mask(), ctx.state.components, ctx.config.ppo
    rewards, _ = c.shape_rewards(scores, rollout.logprobs, rollout.ref_logprobs, real, ctx.state.controller.value,
                                 cfg.kl_estimator)
    advantages, _ = c.gae(rewards, rollout.values, real, cfg.gamma, cfg.lam)
    return advantages


def score_response(ctx: ProbeContext) -> tuple[int, Tensor]:
    """The longest response's row, and how every advantage changes when that row's score
    rises by 1: d advantage / d score, since shaping and GAE are linear in the score."""
    def measure() -> tuple[int, Tensor]:
        row = int(ctx.response_mask().sum(1).argmax())
        scores = ctx.rollout().scores
        bumped = scores.clone()
        bumped[row] += 1.0
        return row, raw_advantages(ctx, bumped) - raw_advantages(ctx, scores)

    return ctx.shared("score_response", measure)


def probe_score_at_last_token(ctx: ProbeContext) -> ProbeResult:
    """With the KL at 0 (the reference's logprobs for both), the shaped reward is the
    score at each response's last real token and 0 everywhere else."""
    rollout, real, c = ctx.rollout(), ctx.response_mask(), ctx.state.components
    rewards, _ = c.shape_rewards(rollout.scores, rollout.ref_logprobs, rollout.ref_logprobs, real,
                                 ctx.state.controller.value, ctx.config.ppo.kl_estimator)
    last = real.long().cumsum(1).argmax(1)  # the first position holding the last count
    expected = torch.zeros_like(rewards).scatter(1, last[:, None], rollout.scores[:, None].to(rewards.dtype))
    gap = float((rewards - expected).abs().max())
    return within("score_at_last_token", "advantages_values", gap, 1e-6,
                  "max |shaped reward - (the score at the last real response token, 0 elsewhere)| with KL = 0")


def probe_score_moves_own_advantages_only(ctx: ProbeContext) -> ProbeResult:
    row, delta = score_response(ctx)
    delta = delta.abs()
    others = torch.cat([delta[:row], delta[row + 1:]])
    leak, own = float(others.max()), float(delta[row].max())
    measured = leak if own > 0 else float("inf")
    return within("score_moves_own_advantages_only", "advantages_values", measured, 1e-6,
                  f"max |change of other sequences' advantages| when one sequence's score rises by 1 "
                  f"(its own changed by up to {own:.3g})")


def probe_every_token_gets_credit(ctx: ProbeContext) -> ProbeResult:
    """The score's credit reaching each real token of the longest response, under the
    configured gamma and lam (d advantage_t / d score)."""
    row, delta = score_response(ctx)
    credit = delta[row][ctx.response_mask()[row]]
    cfg = ctx.config.ppo
    return within("every_token_gets_credit", "advantages_values", float(credit.min()), MIN_CREDIT,
                  f"least d advantage / d score over the {len(credit)} tokens of the longest response "
                  f"(gamma = {cfg.gamma:g}, lam = {cfg.lam:g})", below=False)


def probe_gae_matches_naive_loop(ctx: ProbeContext) -> ProbeResult:
    mask = ctx.response_mask()
    g = torch.Generator().manual_seed(0)
    rewards = torch.randn(mask.shape, generator=g).to(mask.device) * mask
    values = torch.randn(mask.shape, generator=g).to(mask.device) * mask
    gamma, lam = ctx.config.ppo.gamma, ctx.config.ppo.lam
    advantages, _ = ctx.state.components.gae(rewards, values, mask, gamma, lam)
    worst = 0.0
    for b in range(rewards.shape[0]):
        real = mask[b].nonzero().flatten().tolist()
        running = 0.0
        for k in reversed(range(len(real))):
            t = real[k]
            next_value = float(values[b, real[k + 1]]) if k + 1 < len(real) else 0.0
            delta = float(rewards[b, t]) + gamma * next_value - float(values[b, t])
            running = delta + gamma * lam * running
            worst = max(worst, abs(running - float(advantages[b, t])))
    return within("gae_matches_naive_loop", "advantages_values", worst, 1e-4,
                  "max |gae() - a per-token reference loop| on random rewards and values")


def probe_advantages_follow_their_samples(ctx: ProbeContext) -> ProbeResult:
    """Under the update's minibatch shuffle, every row the losses get carries the advantages
    and returns computed for that row's own sample: each row of a minibatch is found in the
    rollout by its old logprobs and old values together (a collapsed policy gives many
    samples the same logprobs, never the same values after different prompts), and the
    advantages given with it (and the returns given to the value loss of the same
    minibatch) must be that sample's. Rows that cannot be told apart by those may be any of
    them: the nearest that matches counts."""
    trace = ctx.iteration()
    rollout, adv = trace.rollout, trace.advantages
    known = torch.cat([rollout.logprobs, rollout.values], 1).masked_fill(~rollout.mask.repeat(1, 2), 0.0)
    worst = 0.0
    for policy_call, value_call in zip(trace.policy_calls, trace.value_calls):
        mask = policy_call.mask
        given = torch.cat([policy_call.old_logprobs, value_call.old_values], 1).masked_fill(~mask.repeat(1, 2), 0.0)
        distance = (given[:, None, :] - known[None, :, :]).abs().amax(-1)  # (b, B)
        alike = distance <= distance.amin(1, keepdim=True) + SAME_ROW  # (b, B) the samples each row may be
        for received, computed in ((policy_call.advantages, adv.advantages), (value_call.returns, adv.returns)):
            error = (received[:, None, :] - computed[None, :, :]).abs().masked_fill(~mask[:, None, :], 0.0).amax(-1)
            worst = max(worst, float(error.masked_fill(~alike, float("inf")).amin(1).max()))
    return within("advantages_follow_their_samples", "advantages_values", worst, 1e-6,
                  f"max |advantage or return given to a loss - the one computed for that row's sample| over the "
                  f"update's {len(trace.policy_calls)} minibatches")


def probe_every_epoch_visits_every_sample_once(ctx: ProbeContext) -> ProbeResult:
    """The update's schedule (Schulman et al. 2017, alg. 1: K epochs, each a pass over the
    batch in minibatches): every run of `minibatches` consecutive policy-loss calls covers
    each sample of the rollout exactly once. Samples are found by their old logprobs."""
    trace, cfg = ctx.iteration(), ctx.config.ppo
    known = trace.rollout.logprobs.masked_fill(~trace.rollout.mask, 0.0)
    batch = known.shape[0]
    seen = []
    for call in trace.policy_calls:
        given = call.old_logprobs.masked_fill(~call.mask, 0.0)
        seen.append((given[:, None, :] - known[None, :, :]).abs().amax(-1).argmin(1))
    wrong = 0
    for epoch in range(0, len(seen), cfg.minibatches):
        counts = torch.bincount(torch.cat(seen[epoch : epoch + cfg.minibatches]), minlength=batch)
        wrong += int((counts != 1).sum())
    return within("every_epoch_visits_every_sample_once", "ppo_hyperparameters", wrong, 0,
                  f"samples not visited exactly once in an epoch, summed over the {len(seen) // max(cfg.minibatches, 1)} "
                  f"epochs of {cfg.minibatches} minibatches")
