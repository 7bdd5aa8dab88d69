"""The probe of the update's direction: on a batch where one response scores far higher
than the rest, one PPO iteration (the configured shaping, GAE, whitening and losses, every
minibatch of every epoch) must raise that response's logprob relative to the others'."""

from __future__ import annotations

from dataclasses import replace

import torch

from rlhflab.checkup.context import ProbeContext
from rlhflab.checkup.iteration import preserved, run_update
from rlhflab.checkup.results import ProbeResult, within
from rlhflab.metrics.stats import masked_mean
from rlhflab.models.forward import response_logprobs

BEST_SCORE = 5.0  # standardised-score units: the best response stands 5 sigma above the rest, which score 0
MIN_MOVE = 1e-6  # a change of mean logprob above float noise
STEP_SHRINK = 0.01


def probe_one_update_moves_the_right_way(ctx: ProbeContext) -> ProbeResult:
    """Measured at the configured learning rate. When it fails, the same iteration at
    STEP_SHRINK x that rate tells direction from step size: an update that moves the right
    way with smaller steps overshoots (ppo_hyperparameters); one that moves the wrong way
    even then has its direction wrong (the advantages or the losses: advantages_values)."""
    configured = _relative_change(ctx, 1.0)
    if configured >= MIN_MOVE:
        component, why = "advantages_values", ""
    else:
        small = _relative_change(ctx, STEP_SHRINK)
        component = "ppo_hyperparameters" if small >= MIN_MOVE else "advantages_values"
        why = f"; at {STEP_SHRINK:g}x the learning rate: {small:.3g}"
    return within("one_update_moves_the_right_way", component, configured, MIN_MOVE,
                  f"mean logprob change of the response scored {BEST_SCORE:g} minus the mean change of the "
                  f"others (scored 0) after one PPO iteration{why}", below=False)


def _relative_change(ctx: ProbeContext, lr_scale: float) -> float:
    rollout, real, state, cfg = ctx.rollout(), ctx.response_mask(), ctx.state, ctx.config.ppo
    best = int(real.sum(1).argmax())
    scores = torch.zeros_like(rollout.scores)
    scores[best] = BEST_SCORE
    staged = replace(rollout, scores=scores, proxy=scores)

    def mean_logprobs():
        with torch.no_grad():
            logprobs = response_logprobs(state.policy.lm, rollout.input_ids, ctx.attention_mask(),
                                         rollout.prompt_len, cfg.temperature, state.components.response_logits)
        return masked_mean(logprobs, real, dim=1)  # (B,)

    with preserved(state):
        for group in state.optimizer.param_groups:
            group["lr"] *= lr_scale
        before = mean_logprobs()
        run_update(state, staged, ctx.config.seed)
        change = mean_logprobs() - before
    others = torch.cat([change[:best], change[best + 1:]])
    return float(change[best] - others.mean())
