"""Incremental decoding for the sampler: one forward over the left-padded prompts
(prefill), then one token per row per step, each returning the next-token logits.

Two decoders share that interface, and `decoder_for` picks one:

- `GPT2Decoder` runs a `GPT2LMHeadModel`'s own modules and weights (no copy, so it
  always sees the current policy) through a short forward with a key/value cache
  preallocated for the whole response. Written because at the sizes rlhflab trains on
  a CPU, much of a step of HF's forward is per-call work (output capture, mask and
  cache objects) rather than arithmetic (per-step times: `bench/decoder_step.py`,
  docs/benchmarks.md). It is the same math as `GPT2Model.forward` (Radford et al.
  2019): pre-norm blocks, learned positions, the attention scale and activation read
  from the config.
- `HFCacheDecoder` runs any other causal LM (Llama, a user's model, a model wrapped by
  a fault) through its own forward with its own cache.

Both count positions over real tokens only, so left padding does not shift them, and
both treat a token fed after EOS as real: those rows are masked out afterwards.
"""

from __future__ import annotations

from typing import Protocol

import torch
import torch.nn.functional as F
from torch import Tensor
from transformers import GPT2LMHeadModel

from rlhflab.models.forward import position_ids_from_mask


class Decoder(Protocol):
    def prefill(self, prompt_ids: Tensor, prompt_mask: Tensor) -> Tensor:
        """Next-token logits (B, V) after the left-padded prompts (B, P)."""

    def step(self, tokens: Tensor) -> Tensor:
        """Feed one token per row (B,); next-token logits (B, V)."""


class HFCacheDecoder:
    """Any HF causal LM through its own forward and cache."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model
        self.cache = None

    def prefill(self, prompt_ids: Tensor, prompt_mask: Tensor) -> Tensor:
        self.attention = prompt_mask.long()
        positions = position_ids_from_mask(prompt_mask)
        self.next_position = positions[:, -1:] + 1
        return self._forward(prompt_ids, positions)

    def step(self, tokens: Tensor) -> Tensor:
        self.attention = torch.cat([self.attention, torch.ones_like(self.attention[:, :1])], dim=1)
        logits = self._forward(tokens[:, None], self.next_position)
        self.next_position = self.next_position + 1
        return logits

    def _forward(self, ids: Tensor, positions: Tensor) -> Tensor:
        out = self.model(input_ids=ids, attention_mask=self.attention, position_ids=positions, cache=self.cache,
                         use_cache=True)
        self.cache = out.cache
        return out.logits[:, -1]


class GPT2Decoder:
    """A `GPT2LMHeadModel` in eval mode, with a preallocated key/value cache."""

    def __init__(self, model: GPT2LMHeadModel, batch: int, max_len: int) -> None:
        config = model.config
        self.trunk, self.head = model.transformer, model.lm_head
        self.heads = config.n_head
        self.head_dim = config.n_embd // config.n_head
        parameter = self.head.weight
        shape = (batch, self.heads, max_len, self.head_dim)
        # (layers) x (B, heads, max_len, head_dim); filled left to right.
        self.keys = [torch.empty(shape, dtype=parameter.dtype, device=parameter.device) for _ in self.trunk.h]
        self.values = [torch.empty_like(k) for k in self.keys]
        self.real = torch.zeros(batch, max_len, dtype=torch.bool, device=parameter.device)  # key is a real token
        self.length = 0

    @staticmethod
    def supports(model: torch.nn.Module) -> bool:
        """A plain GPT-2 causal LM whose forward this class reproduces: eval mode (no
        dropout), no cross-attention."""
        return type(model) is GPT2LMHeadModel and not model.training and not model.config.add_cross_attention

    def prefill(self, prompt_ids: Tensor, prompt_mask: Tensor) -> Tensor:
        P = prompt_ids.shape[1]
        self.real[:, :P] = prompt_mask
        positions = position_ids_from_mask(prompt_mask)
        self.next_position = positions[:, -1:] + 1
        query = torch.arange(P, device=prompt_ids.device)
        causal = query[None, :] <= query[:, None]  # (P, P): key k visible from query q when k <= q
        # Every query also sees itself, so a pad query's softmax is never over an empty set
        # (its output is never read, but a NaN there would reach real rows through the cache).
        allowed = (causal & prompt_mask[:, None, :]) | torch.eye(P, dtype=torch.bool, device=prompt_ids.device)
        return self._forward(prompt_ids, positions, allowed[:, None])  # mask (B, 1, P, P)

    def step(self, tokens: Tensor) -> Tensor:
        self.real[:, self.length] = True
        allowed = self.real[:, None, None, : self.length + 1].contiguous()  # (B, 1, 1, L + 1)
        logits = self._forward(tokens[:, None], self.next_position, allowed)
        self.next_position = self.next_position + 1
        return logits

    def _forward(self, ids: Tensor, positions: Tensor, allowed: Tensor) -> Tensor:
        B, S = ids.shape
        start, end = self.length, self.length + S
        h = self.trunk.wte(ids) + self.trunk.wpe(positions)  # (B, S, E)
        for block, keys, values in zip(self.trunk.h, self.keys, self.values):
            attn = block.attn
            q, k, v = attn.c_attn(block.ln_1(h)).split(attn.split_size, dim=2)  # 3 x (B, S, E)
            keys[:, :, start:end] = k.view(B, S, self.heads, self.head_dim).transpose(1, 2)
            values[:, :, start:end] = v.view(B, S, self.heads, self.head_dim).transpose(1, 2)
            q = q.view(B, S, self.heads, self.head_dim).transpose(1, 2)  # (B, heads, S, head_dim)
            out = F.scaled_dot_product_attention(q, keys[:, :, :end], values[:, :, :end], attn_mask=allowed,
                                                 scale=attn.scaling)
            h = h + attn.c_proj(out.transpose(1, 2).reshape(B, S, -1))
            h = h + block.mlp(block.ln_2(h))
        self.length = end
        return self.head(self.trunk.ln_f(h[:, -1]))  # (B, V)


def decoder_for(model: torch.nn.Module, batch: int, max_len: int) -> Decoder:
    """The fast decoder where it reproduces the model's forward, else the model's own."""
    if GPT2Decoder.supports(model):
        return GPT2Decoder(model, batch, max_len)
    return HFCacheDecoder(model)
