"""Probes of logprob bookkeeping and the reference: the ratio is exactly 1 where it must
be and moves where it must, the old logprobs are the rollout's, the sampler and the
training forward agree, padding changes nothing, and the reference is a frozen,
separate, deterministic copy whose KL to the untrained policy is 0."""

from __future__ import annotations

from dataclasses import replace

import torch

from rlhflab.checkup.context import ProbeContext
from rlhflab.checkup.results import FORWARD_TOLERANCES, ProbeResult, forward_within, within
from rlhflab.data.batching import join_prompt_response
from rlhflab.models.forward import response_logprobs
from rlhflab.ppo.rollout import make_rollout
from rlhflab.seeding import torch_generator


def probe_kl_zero_before_update(ctx: ProbeContext) -> ProbeResult:
    rollout = ctx.rollout()
    kl = float(((rollout.logprobs - rollout.ref_logprobs) * ctx.recorded_mask()).sum(1).abs().max())
    return forward_within("kl_zero_before_update", "logprob_bookkeeping", kl, ctx.dtype,
                          "max |per-sequence KL| between the untrained policy and the reference")


def probe_first_ratio_is_one(ctx: ProbeContext) -> ProbeResult:
    first = ctx.iteration().policy_calls[0]
    deviation = max(abs(first.ratio_mean - 1.0), first.approxkl)
    return forward_within("first_ratio_is_one", "logprob_bookkeeping", deviation, ctx.dtype,
                          "max(|ratio_mean - 1|, approxkl) on the first minibatch of the first epoch of a real update")


def probe_ratio_moves_after_first_step(ctx: ProbeContext) -> ProbeResult:
    later = ctx.iteration().policy_calls[1:]
    moved = max((call.approxkl for call in later), default=0.0)
    # Any optimiser step moves some token's logprob by far more than float noise (1e-12).
    return within("ratio_moves_after_first_step", "ppo_hyperparameters", moved, 1e-12,
                  f"largest approxkl over the {len(later)} later minibatches of the update: the policy the "
                  "ratio compares with the rollout must have moved", below=False)


def probe_old_logprobs_are_the_rollouts(ctx: ProbeContext) -> ProbeResult:
    """Every row the update's loss got as 'old' logprobs is a row of the rollout's."""
    trace = ctx.iteration()
    reference = trace.rollout.logprobs.masked_fill(~trace.rollout.mask, 0.0)
    worst = 0.0
    for call in trace.policy_calls:
        given = call.old_logprobs.masked_fill(~call.mask, 0.0)
        distance = (given[:, None, :] - reference[None, :, :]).abs().amax(-1)  # (b, B)
        worst = max(worst, float(distance.amin(1).max()))
    return forward_within("old_logprobs_are_the_rollouts", "logprob_bookkeeping", worst, ctx.dtype,
                          f"max over the update's {len(trace.policy_calls)} minibatches of |old logprobs given to "
                          "the loss - the nearest rollout row's|")


def probe_sampled_logprobs_match(ctx: ProbeContext) -> ProbeResult:
    """Where they differ tells whose fault it is: a training forward unlike the sampler's
    moves logprobs throughout a response (logprob_bookkeeping); a token changed after it
    was drawn moves only the last token of the rows it was written into (sampling)."""
    rollout, real = ctx.rollout(), ctx.recorded_mask()
    difference = (rollout.sampled_logprobs - rollout.logprobs).abs().masked_fill(~real, 0.0)
    gap = float(difference.max())
    result = forward_within("sampled_logprobs_match_training_forward", "logprob_bookkeeping", gap, ctx.dtype,
                            "max |logprob at sampling - logprob in the padded training forward|")
    if result.passed:
        return result
    last = real.long().cumsum(1).argmax(1)
    off = difference > FORWARD_TOLERANCES["sampled_logprobs_match_training_forward"][ctx.dtype]
    at_last = off[torch.arange(len(last), device=last.device), last]
    if int(off.sum()) == int(at_last.sum()):
        return replace(result, component="sampling", detail=result.detail + f"; only at the last token of "
                       f"{int(at_last.sum())} responses: tokens written after sampling")
    return result


CUT_LENGTH = 2  # tokens: short enough that most responses are cut before their EOS


@torch.no_grad()
def probe_cut_responses_keep_what_was_sampled(ctx: ProbeContext) -> ProbeResult:
    """Responses sampled under a limit of CUT_LENGTH tokens, so that most are cut before
    their EOS, which the run's own rollouts seldom are: each real token's recorded logprob
    must be the training forward's for that very token. A sampler that writes a token into
    a cut response after drawing it (an EOS forced onto it, counted as ended) breaks it
    there, where responses that end on their own never show it."""
    rollout, _ = make_rollout(ctx.state, ctx.prompts, torch_generator(ctx.config.seed, "checkup", "cut",
                                                                      *ctx.where.seed_names), CUT_LENGTH)
    real = rollout.mask
    cut = int((real.sum(1) == CUT_LENGTH).sum())
    gap = float((rollout.sampled_logprobs - rollout.logprobs).abs().masked_fill(~real, 0.0).max())
    return forward_within("cut_responses_keep_what_was_sampled", "sampling", gap, ctx.dtype,
                          f"max |logprob at sampling - logprob in the training forward| over {len(real)} responses "
                          f"limited to {CUT_LENGTH} tokens ({cut} of them at the limit)")


def alone_and_batched(ctx: ProbeContext, rows: int = 4):
    """(one row alone, the same row inside the padded batch) for the first `rows` rows."""
    rollout, real = ctx.rollout(), ctx.response_mask()
    batch_ids, batch_mask = join_prompt_response(rollout.prompt_ids, rollout.prompt_mask, rollout.response_ids, real)
    for row in range(min(rows, len(rollout.prompts))):
        prompt = rollout.prompt_ids[row][rollout.prompt_mask[row]][None]
        response = rollout.response_ids[row][real[row]][None]
        ids = torch.cat([prompt, response], 1)
        yield (ids, torch.ones_like(ids, dtype=torch.bool), prompt.shape[1]), \
              (batch_ids, batch_mask, rollout.prompt_len, row, real[row])


@torch.no_grad()
def probe_logprob_padding_invariance(ctx: ProbeContext) -> ProbeResult:
    """A sequence's logprobs alone and inside a left/right-padded batch."""
    lm, T, logits_fn = ctx.state.policy.lm, ctx.config.ppo.temperature, ctx.state.components.response_logits
    worst = 0.0
    for (ids, mask, P), (batch_ids, batch_mask, batch_P, row, real) in alone_and_batched(ctx):
        alone = response_logprobs(lm, ids, mask, P, T, logits_fn)[0]
        batched = response_logprobs(lm, batch_ids, batch_mask, batch_P, T, logits_fn)[row][real]
        worst = max(worst, float((alone - batched).abs().max()))
    return forward_within("logprob_padding_invariance", "logprob_bookkeeping", worst, ctx.dtype,
                          "max |logprob of a sequence alone - in a padded batch|")


def probe_reference_frozen(ctx: ProbeContext) -> ProbeResult:
    policy_ptrs = {p.untyped_storage().data_ptr() for p in ctx.state.policy.parameters()}
    shared = sum(p.untyped_storage().data_ptr() in policy_ptrs for p in ctx.state.reference.parameters())
    trainable = sum(p.requires_grad for p in ctx.state.reference.parameters())
    return within("reference_frozen_and_separate", "kl_control", shared + trainable, 0,
                  f"{shared} reference tensors share storage with the policy, {trainable} require grad")


@torch.no_grad()
def probe_reference_deterministic(ctx: ProbeContext) -> ProbeResult:
    """The reference scores the rollout the same way twice (no dropout, no sampling)."""
    rollout, c = ctx.rollout(), ctx.state.components
    twice = [response_logprobs(ctx.state.reference, rollout.input_ids, ctx.attention_mask(), rollout.prompt_len,
                               ctx.config.ppo.temperature, c.response_logits) for _ in range(2)]
    gap = float((twice[0] - twice[1])[ctx.response_mask()].abs().max())
    return forward_within("reference_deterministic", "kl_control", gap, ctx.dtype,
                          "max |reference logprob, first call - second call| on the rollout")


def probe_reference_is_the_starting_model(ctx: ProbeContext) -> ProbeResult:
    """In the moved state: the reference logprobs the rollout recorded are those of the
    starting model loaded afresh from its directory. At the start the policy is that model
    too, so a reference that follows the policy would pass there; here it cannot."""
    rollout, real = ctx.rollout(), ctx.recorded_mask()
    gap = float((rollout.ref_logprobs - ctx.starting_logprobs())[real].abs().max())
    moved = float((rollout.logprobs - ctx.starting_logprobs())[real].abs().max())
    return forward_within("reference_is_the_starting_model", "kl_control", gap, ctx.dtype,
                          f"max |the rollout's reference logprob - the starting model's, loaded again| (the policy's "
                          f"differ from the starting model's by up to {moved:.3g} here)")
