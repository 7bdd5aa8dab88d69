"""Experience making: sample responses from the policy, then record in one batch the
policy's logprobs and values, the reference's logprobs and the reward model's score.

The old logprobs are recomputed in the same padded forward the update uses (not taken
from the sampler's incremental KV-cache passes), so the first minibatch of the first
epoch has a policy/old ratio of exactly 1 (Huang et al. 2023, "The N Implementation
Details of RLHF with PPO", detail on logprob recomputation). The sampler's own logprobs
are kept for the checkup, which compares the two.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from rlhflab.data.batching import decode_responses, join_prompt_response
from rlhflab.models.forward import response_logprobs
from rlhflab.models.sampling import sample_share
from rlhflab.ppo.losses import logprobs_from_logits
from rlhflab.seeding import RowStreams

if TYPE_CHECKING:
    from rlhflab.ppo.samplers import Sampler
    from rlhflab.ppo.state import PPOState


@dataclass(frozen=True)
class Rollout:
    """One batch of experience. B = rollouts, P = prompt width, T = response width."""

    prompts: list[str]  # B prompt texts
    responses: list[str]  # B response texts (no EOS, no padding)
    prompt_ids: Tensor  # (B, P) long, left-padded `<bos> prompt`
    prompt_mask: Tensor  # (B, P) bool, True for real prompt tokens
    response_ids: Tensor  # (B, T) long, right-padded after EOS
    mask: Tensor  # (B, T) bool, True for real response tokens, EOS included
    sampled_logprobs: Tensor  # (B, T) logprobs seen by the sampler (KV-cache path)
    logprobs: Tensor  # (B, T) policy logprobs recomputed before the update (the "old" logprobs)
    ref_logprobs: Tensor  # (B, T) frozen reference logprobs
    values: Tensor  # (B, T) value estimates before the update
    proxy: Tensor  # (B,) reward-model score, standardised when configured
    scores: Tensor  # (B,) score used in the reward: proxy minus the missing-EOS penalty
    has_eos: Tensor  # (B,) bool, response ended with EOS

    @property
    def input_ids(self) -> Tensor:
        return torch.cat([self.prompt_ids, self.response_ids], dim=1)  # (B, P + T)

    @property
    def attention_mask(self) -> Tensor:
        return torch.cat([self.prompt_mask, self.mask], dim=1)  # (B, P + T)

    @property
    def prompt_len(self) -> int:
        return self.prompt_ids.shape[1]

    def select(self, index: Tensor) -> "Rollout":
        """The rows in `index` (for minibatches)."""
        picked = {}
        for f in fields(self):
            value = getattr(self, f.name)
            picked[f.name] = [value[i] for i in index.tolist()] if isinstance(value, list) else value[index]
        return Rollout(**picked)


@dataclass(frozen=True)
class RolloutTimings:
    """Seconds a rollout spent sampling, and recording logprobs, values and scores."""

    sample: float
    score: float


@torch.no_grad()
def make_rollout(state: PPOState, prompts: list[str], generator: torch.Generator | RowStreams,
                 response_length: int | None = None, temperature: float | None = None,
                 sampler: Sampler | None = None) -> tuple[Rollout, RolloutTimings]:
    """The rollout of `prompts` by the state's policy, through its components, sampled by
    the state's sampler and at its decoding settings unless given (the held-out evaluation
    keeps its own, and samples the trained weights themselves). Under
    several processes each samples and scores its share of the rows (`sample_share`), and
    the shares are gathered: every process returns the whole batch, so the update and its
    metrics are those of one process."""
    policy, reference, reward, tokenizer = state.policy, state.reference, state.reward, state.tokenizer
    components, cluster, engine = state.components, state.cluster, state.engine
    response_length = state.config.response_length if response_length is None else response_length
    temperature = state.config.temperature if temperature is None else temperature
    sampler = state.sampler if sampler is None else sampler
    c = components
    start = time.perf_counter()
    policy.eval()
    # FSDP2 gathers the policy once for the whole rollout (under LoRA the reference is the
    # policy with its adapters off, so its forward needs the policy's weights too).
    with engine.full_weights(policy):
        share = sample_share(sampler, policy.lm, tokenizer, prompts, response_length, temperature, generator,
                             cluster)
        samples = share.samples
        mask = c.response_mask(samples.mask)
        sampled = time.perf_counter() - start
        start = time.perf_counter()
        input_ids, attention_mask = join_prompt_response(share.prompt_ids, share.prompt_mask, samples.response_ids,
                                                         samples.mask)
        P = share.prompt_ids.shape[1]
        with c.rollout_mode(policy):
            logits, values = policy(input_ids, attention_mask, P, temperature, c.response_logits)
        policy.eval()
        ref_logprobs = response_logprobs(reference, input_ids, attention_mask, P, temperature, c.response_logits)
    logprobs = logprobs_from_logits(logits, samples.response_ids)
    proxy, scores = reward(input_ids, attention_mask, samples.has_eos)
    zero = ~mask
    local = {
        "prompt_ids": share.prompt_ids, "prompt_mask": share.prompt_mask, "response_ids": samples.response_ids,
        "sampled_mask": samples.mask, "mask": mask, "sampled_logprobs": samples.logprobs,
        "logprobs": logprobs.masked_fill(zero, 0.0), "ref_logprobs": ref_logprobs.masked_fill(zero, 0.0),
        "values": values.masked_fill(zero, 0.0), "proxy": proxy, "scores": scores, "has_eos": samples.has_eos,
    }
    whole = {name: cluster.gather_rows(value, len(prompts)) for name, value in local.items()}
    scored = time.perf_counter() - start
    rollout = Rollout(prompts=list(prompts),
                      responses=decode_responses(tokenizer, whole["response_ids"], whole.pop("sampled_mask")), **whole)
    return rollout, RolloutTimings(sampled, scored)
