"""Probes of sampling and prompt data: the untrained policy's responses end within the
length limit, and the first PPO batch's prompts are varied."""

from __future__ import annotations

from rlhflab.checkup.context import ProbeContext
from rlhflab.checkup.results import ProbeResult, within
from rlhflab.doctor.rules.responses import EOS_RATE_LIMIT, PROMPT_UNIQUE_LIMIT
from rlhflab.seeding import derive_seed


def probe_responses_end(ctx: ProbeContext) -> ProbeResult:
    rollout = ctx.rollout()
    return within("responses_end", "sampling", float(rollout.has_eos.float().mean()), EOS_RATE_LIMIT.value,
                  f"fraction of the untrained policy's responses that end with EOS within "
                  f"ppo.response_length = {ctx.config.ppo.response_length}", below=False)


def probe_prompts_distinct(ctx: ProbeContext) -> ProbeResult:
    # The first batch PPO trains on, drawn exactly as the trainer draws it.
    prompts = ctx.state.components.prompts(ctx.source, ctx.config.ppo.batch_size,
                                           derive_seed(ctx.config.seed, "ppo-prompts", "0"))
    return within("prompts_distinct", "prompt_data", len(set(prompts)) / len(prompts), PROMPT_UNIQUE_LIMIT.value,
                  "fraction of distinct prompts in the first PPO batch", below=False)
