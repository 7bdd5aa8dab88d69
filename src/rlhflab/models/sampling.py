"""Ancestral sampling with a key/value cache from left-padded prompts
(`rlhflab.models.decoding`).

Pure temperature sampling (no top-k/top-p), as the PPO objective assumes: the policy
being optimised is exactly the distribution that is sampled (Ziegler et al. 2019 sample
at T=1). Rows that emitted EOS keep being sampled; their tokens are masked out afterwards.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from rlhflab.data.batching import encode_prompts
from rlhflab.distributed import Cluster
from rlhflab.models.decoding import decoder_for
from rlhflab.models.precision import autocast
from rlhflab.seeding import RowStreams, rows_of, uniforms


@dataclass(frozen=True)
class Samples:
    response_ids: Tensor  # (B, T) right-padded with pad_id after EOS
    mask: Tensor  # (B, T) True for real response tokens, EOS included
    logprobs: Tensor  # (B, T) log-probabilities at sampling time, 0 on padding
    has_eos: Tensor  # (B,) True if the response ended with EOS


def exponential_race(weights: Tensor, generator: torch.Generator | RowStreams) -> Tensor:
    """One draw per row with probability proportional to `weights` (B, N) >= 0: the index
    of the first of independent exponential clocks E_i / w_i, E_i ~ Exp(1), which is i
    with probability w_i / sum(w) (the Gumbel-max trick in another form; Gumbel 1954,
    Maddison et al. 2014). It is the draw `torch.multinomial` makes on the CPU, so it is
    just as insensitive to last-bit differences in the weights: a flip needs two clocks
    within a rounding error of each other, where an inverse-CDF draw flips whenever its
    uniform falls within a cumulative sum's rounding error of a boundary.

    E_i = -log U_i, so argmax w_i / E_i = argmin w_i / log U_i. The uniforms are float64:
    a float32 uniform is a multiple of 2^-24, so E_i could not be smaller than ~6e-8 and
    weights below that, relative to the winner's, would almost never win. They come from
    the CPU generator whatever the device, so a seed means the same stream everywhere;
    with `RowStreams`, each row's from its own stream."""
    uniform = uniforms(tuple(weights.shape), generator)
    log_uniform = uniform.log_().to(weights.dtype).to(weights.device)  # -E_i; U = 0 gives -inf: never drawn
    return torch.div(weights, log_uniform).argmin(dim=-1)  # weight 0 gives -0.0: never drawn


def draw_tokens(probs: Tensor, generator: torch.Generator | RowStreams) -> Tensor:
    """One token per row from `probs` (B, V), in two exponential races: first among
    blocks of about sqrt(V) tokens, by their total probability, then among the tokens
    of the drawn block. P(token) = P(block) P(token | block) is exact, and each race is
    as insensitive to rounding as one race over V; but it needs ~2 sqrt(V) uniforms per
    row instead of V, and making uniforms is most of the cost of a draw."""
    rows, vocab = probs.shape
    size = math.isqrt(vocab - 1) + 1  # ceil(sqrt(V))
    n_blocks = -(-vocab // size)
    blocks = F.pad(probs, (0, n_blocks * size - vocab)).view(rows, n_blocks, size)  # padding has probability 0
    masses = blocks.sum(dim=-1)  # (B, blocks)
    if bool(masses.isnan().any()):  # a NaN would win or lose a race silently; multinomial raises too
        raise ValueError("sampling: the model's next-token probabilities contain NaN (non-finite logits)")
    block = exponential_race(masses, generator)  # (B,)
    members = blocks.gather(1, block[:, None, None].expand(rows, 1, size)).squeeze(1)  # (B, size)
    return block * size + exponential_race(members, generator)


@torch.no_grad()
def sample_responses(
    model: torch.nn.Module,
    prompt_ids: Tensor,
    prompt_mask: Tensor,
    max_new_tokens: int,
    temperature: float,
    eos_id: int,
    pad_id: int,
    generator: torch.Generator | RowStreams,
) -> Samples:
    """Sample up to `max_new_tokens` per prompt. prompt_ids/prompt_mask: (B, P), left-padded.
    With `RowStreams`, a row's response depends on its own stream only (every row draws the
    same number of uniforms at every step, ended or not), so sampling a batch in shards
    gives the responses of sampling it whole, up to last-bit differences in the logits that
    a draw is insensitive to (`exponential_race`)."""
    batch = prompt_ids.shape[0]
    decoder = decoder_for(model, batch, prompt_ids.shape[1] + max_new_tokens)
    finished = torch.zeros(batch, dtype=torch.bool, device=prompt_ids.device)
    tokens, probs_drawn = [], []
    with autocast(prompt_ids.device):  # the softmax runs in fp32 under autocast
        logits = decoder.prefill(prompt_ids, prompt_mask)  # (B, V)
        for step in range(max_new_tokens):
            scaled = logits.float() if temperature == 1.0 else logits.float() / temperature  # T=1: no division
            probs = torch.softmax(scaled, dim=-1)
            token = draw_tokens(probs, generator)  # (B,)
            tokens.append(token)
            probs_drawn.append(probs.gather(-1, token[:, None]).squeeze(-1))
            finished |= token == eos_id
            if step == max_new_tokens - 1 or bool(finished.all()):
                break
            # A row that has ended is fed its draws like any other; they are masked below.
            logits = decoder.step(token)
    drawn = torch.stack(tokens, dim=1)  # (B, T)
    is_eos = drawn == eos_id
    mask = (is_eos.cumsum(dim=1) - is_eos.long()) == 0  # no EOS before this position
    response_ids = torch.where(mask, drawn, pad_id)
    logprobs = torch.where(mask, torch.stack(probs_drawn, dim=1).log(), 0.0)
    has_eos = (is_eos & mask).any(dim=1)
    return Samples(response_ids, mask, logprobs, has_eos)


def device_of(model: torch.nn.Module) -> torch.device:
    """Where a model computes: its parameters' device, or the `device` a parameterless view
    of another model names (`models.lora.AdaptersOff`)."""
    first = next(model.parameters(), None)
    return first.device if first is not None else model.device


def widen(samples: Samples, width: int, pad_id: int) -> Samples:
    """`samples` right-padded to `width` response positions (masked, logprob 0)."""
    extra = width - samples.response_ids.shape[1]
    if extra <= 0:
        return samples
    pad = lambda x, value: F.pad(x, (0, extra), value=value)  # noqa: E731
    return Samples(pad(samples.response_ids, pad_id), pad(samples.mask, False), pad(samples.logprobs, 0.0),
                   samples.has_eos)


@dataclass(frozen=True)
class Share:
    """This process's rows of a batch of prompts and what it sampled for them."""

    rows: Tensor  # (b,) long, the rows' indices in the whole batch
    prompt_ids: Tensor  # (b, P) left-padded to the whole batch's widest prompt
    prompt_mask: Tensor  # (b, P)
    samples: Samples  # responses right-padded to the whole batch's longest


def sample_share(sample, lm: torch.nn.Module, tokenizer, prompts: list[str], response_length: int, temperature: float,
                 generator: torch.Generator | RowStreams, cluster: Cluster) -> Share:
    """This process's share of a batch sampled with `sample` (a `sample_responses`). Prompts
    are padded to the whole batch's width and responses to its longest, so every process
    holds rows of one shape and a row is computed alike at any number of processes. Under
    several processes each row draws from its own stream (`RowStreams`)."""
    rows = cluster.shard(torch.arange(len(prompts)))
    ids, mask = encode_prompts(tokenizer, prompts)
    device = device_of(lm)
    ids, mask = ids[rows].to(device), mask[rows].to(device)
    if cluster.world_size > 1 and not isinstance(generator, RowStreams):  # one generator's draws would depend on the shares
        raise ValueError("sampling a batch over several processes needs one random stream per row (RowStreams)")
    generator = rows_of(generator, rows.tolist())
    samples = sample(lm, ids, mask, response_length, temperature, tokenizer.eos_token_id, tokenizer.pad_token_id,
                     generator)
    width = int(cluster.max(float(samples.response_ids.shape[1])))
    return Share(rows, ids, mask, widen(samples, width, tokenizer.pad_token_id))
