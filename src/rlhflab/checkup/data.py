"""Probes of sampling and prompt data: the untrained policy's responses end within the
length limit, and the first PPO batch's prompts are varied and begin with one BOS."""

from __future__ import annotations

from rlhflab.checkup.context import ProbeContext
from rlhflab.checkup.results import ProbeResult, ProbeSkipped, within
from rlhflab.data.batching import encode_prompts
from rlhflab.doctor import THRESHOLDS
from rlhflab.seeding import derive_seed


def first_batch(ctx: ProbeContext) -> list[str]:
    """The first batch of prompts PPO trains on, drawn exactly as the trainer draws it."""
    return ctx.state.components.prompts(ctx.source, ctx.config.ppo.batch_size,
                                        derive_seed(ctx.config.seed, "ppo-prompts", "0"))


def probe_responses_end(ctx: ProbeContext) -> ProbeResult:
    rollout = ctx.rollout()
    return within("responses_end", "sampling", float(rollout.has_eos.float().mean()), THRESHOLDS["EOS_RATE_LIMIT"].value,
                  f"fraction of the untrained policy's responses that end with EOS within "
                  f"ppo.response_length = {ctx.config.ppo.response_length}", below=False)


def probe_prompts_distinct(ctx: ProbeContext) -> ProbeResult:
    prompts = first_batch(ctx)
    return within("prompts_distinct", "prompt_data", len(set(prompts)) / len(prompts), THRESHOLDS["PROMPT_UNIQUE_LIMIT"].value,
                  "fraction of distinct prompts in the first PPO batch", below=False)


def probe_prompts_begin_with_one_bos(ctx: ProbeContext) -> ProbeResult:
    """The first PPO batch's prompts, drawn as the trainer draws them and encoded as the
    sampler encodes them (`encode_prompts`): no row holds the BOS token more than once, at
    its start (a prompt whose text already holds it, as a chat template writes it, gets a
    second one from the encoder; the model never saw two)."""
    bos = ctx.state.tokenizer.bos_token_id
    if bos is None:
        raise ProbeSkipped("the tokenizer has no BOS token")
    prompts = first_batch(ctx)
    ids, mask = encode_prompts(ctx.state.tokenizer, prompts)
    repeated = ((ids == bos) & mask).sum(1) > 1
    return within("prompts_begin_with_one_bos", "prompt_data", float(repeated.float().mean()), 0.0,
                  "fraction of the first PPO batch's encoded prompts holding the BOS token more than once")
