"""Ancestral sampling with a key/value cache from left-padded prompts
(`rlhflab.models.decoding`).

Pure temperature sampling (no top-k/top-p), as the PPO objective assumes: the policy
being optimised is exactly the distribution that is sampled (Ziegler et al. 2019 sample
at T=1). Rows that emitted EOS keep being fed a pad token, masked out afterwards.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from rlhflab.models.decoding import decoder_for
from rlhflab.models.precision import autocast


@dataclass(frozen=True)
class Samples:
    response_ids: Tensor  # (B, T) right-padded with pad_id after EOS
    mask: Tensor  # (B, T) True for real response tokens, EOS included
    logprobs: Tensor  # (B, T) log-probabilities at sampling time, 0 on padding
    has_eos: Tensor  # (B,) True if the response ended with EOS


@torch.no_grad()
def sample_responses(
    model: torch.nn.Module,
    prompt_ids: Tensor,
    prompt_mask: Tensor,
    max_new_tokens: int,
    temperature: float,
    eos_id: int,
    pad_id: int,
    generator: torch.Generator,
) -> Samples:
    """Sample up to `max_new_tokens` per prompt. prompt_ids/prompt_mask: (B, P), left-padded."""
    batch = prompt_ids.shape[0]
    decoder = decoder_for(model, batch, prompt_ids.shape[1] + max_new_tokens)
    finished = torch.zeros(batch, dtype=torch.bool, device=prompt_ids.device)
    tokens, logprobs, real = [], [], []
    with autocast(prompt_ids.device):  # log_softmax runs in fp32 under autocast
        logits = decoder.prefill(prompt_ids, prompt_mask)  # (B, V)
        for step in range(max_new_tokens):
            log_p = torch.log_softmax(logits.float() / temperature, dim=-1)
            # Drawn on the CPU generator whatever the device, so a seed means the same stream everywhere.
            token = torch.multinomial(log_p.exp().cpu(), 1, generator=generator).squeeze(-1)
            token = token.to(log_p.device)  # (B,)
            token = torch.where(finished, torch.full_like(token, pad_id), token)
            real.append(~finished)
            logprobs.append(torch.where(finished, 0.0, log_p.gather(-1, token[:, None]).squeeze(-1)))
            tokens.append(token)
            finished = finished | (token == eos_id)
            if bool(finished.all()) or step == max_new_tokens - 1:
                break
            logits = decoder.step(token)
    response_ids = torch.stack(tokens, dim=1)
    mask = torch.stack(real, dim=1)
    has_eos = ((response_ids == eos_id) & mask).any(dim=1)
    return Samples(response_ids, mask, torch.stack(logprobs, dim=1), has_eos)
