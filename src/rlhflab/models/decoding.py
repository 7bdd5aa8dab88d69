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
from transformers.pytorch_utils import Conv1D

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
        shape = (2, batch, self.heads, max_len, self.head_dim)
        # Per layer, keys and values (2, B, heads, max_len, head_dim), filled left to right
        # by one copy a step.
        self.cache = [torch.empty(shape, dtype=parameter.dtype, device=parameter.device) for _ in self.trunk.h]
        # Additive attention bias per key: 0 for a real token, -inf for padding and for
        # positions not written yet. One float bias shared by all layers of a step costs
        # less in attention than a boolean mask.
        self.key_bias = torch.full((batch, max_len), float("-inf"), dtype=parameter.dtype, device=parameter.device)
        self.length = 0

    @staticmethod
    def supports(model: torch.nn.Module) -> bool:
        """A plain GPT-2 causal LM whose forward this class reproduces: eval mode (no
        dropout), no cross-attention."""
        if type(model) is not GPT2LMHeadModel or model.training or model.config.add_cross_attention:
            return False
        # The forward below calls these layers' functions directly, so a replaced or
        # hooked layer (an adapter, a probe) keeps the model's own forward.
        trunk = model.transformer
        layers = [trunk.ln_f, *(m for b in trunk.h for m in (b.ln_1, b.ln_2, b.attn.c_attn, b.attn.c_proj,
                                                                b.mlp.c_fc, b.mlp.c_proj))]
        return all(type(m) in (Conv1D, torch.nn.LayerNorm) and not m._forward_hooks and not m._forward_pre_hooks
                   for m in layers)

    def prefill(self, prompt_ids: Tensor, prompt_mask: Tensor) -> Tensor:
        P = prompt_ids.shape[1]
        self.key_bias[:, :P].masked_fill_(prompt_mask, 0.0)
        positions = position_ids_from_mask(prompt_mask)
        self.next_position = positions[:, -1:] + 1
        query = torch.arange(P, device=prompt_ids.device)
        causal = query[None, :] <= query[:, None]  # (P, P): key k visible from query q when k <= q
        # Every query also sees itself, so a pad query's softmax is never over an empty set
        # (its output is never read, but a NaN there would reach real rows through the cache).
        allowed = (causal & prompt_mask[:, None, :]) | torch.eye(P, dtype=torch.bool, device=prompt_ids.device)
        return self._forward(prompt_ids, positions, allowed[:, None])  # mask (B, 1, P, P)

    def step(self, tokens: Tensor) -> Tensor:
        self.key_bias[:, self.length] = 0.0
        bias = self.key_bias[:, None, None, : self.length + 1]  # (B, 1, 1, L + 1)
        logits = self._forward(tokens[:, None], self.next_position, bias)
        self.next_position = self.next_position + 1
        return logits

    def _forward(self, ids: Tensor, positions: Tensor, attn_mask: Tensor) -> Tensor:
        # The modules' functions are called directly (F.layer_norm, torch.addmm as in HF's
        # Conv1D): at one token per row, module-call overhead is a visible part of a step.
        B, S = ids.shape
        start, end = self.length, self.length + S
        h = F.embedding(ids, self.trunk.wte.weight) + F.embedding(positions, self.trunk.wpe.weight)  # (B, S, E)
        for block, cache in zip(self.trunk.h, self.cache):
            attn, mlp = block.attn, block.mlp
            qkv = conv1d(attn.c_attn, layer_norm(block.ln_1, h))  # (B, S, 3E)
            qkv = qkv.view(B, S, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)  # (3, B, heads, S, hd)
            cache[:, :, :, start:end] = qkv[1:]
            out = F.scaled_dot_product_attention(qkv[0], cache[0, :, :, :end], cache[1, :, :, :end],
                                                 attn_mask=attn_mask, scale=attn.scaling)
            add_conv1d_(h, attn.c_proj, out.transpose(1, 2).reshape(B, S, -1))
            add_conv1d_(h, mlp.c_proj, mlp.act(conv1d(mlp.c_fc, layer_norm(block.ln_2, h))))
        self.length = end
        return F.linear(layer_norm(self.trunk.ln_f, h[:, -1]), self.head.weight, self.head.bias)  # (B, V)


def layer_norm(norm: torch.nn.LayerNorm, x: Tensor) -> Tensor:
    return F.layer_norm(x, norm.normalized_shape, norm.weight, norm.bias, norm.eps)


def conv1d(layer: torch.nn.Module, x: Tensor) -> Tensor:
    """HF's GPT-2 `Conv1D`: x @ weight + bias, weight stored (in, out)."""
    return torch.addmm(layer.bias, x.reshape(-1, x.shape[-1]), layer.weight).view(*x.shape[:-1], -1)


def add_conv1d_(h: Tensor, layer: torch.nn.Module, x: Tensor) -> None:
    """The residual update h += conv1d(layer, x), in place. In fp32 the matmul accumulates
    straight into h. Under autocast x is bf16 (autocast does not cast in-place ops), so
    the matmul runs in bf16 and its result is added to the fp32 stream, as in HF's block."""
    if x.dtype == h.dtype:
        h.view(-1, h.shape[-1]).addmm_(x.reshape(-1, x.shape[-1]), layer.weight).add_(layer.bias)
    else:
        h.add_(conv1d(layer, x))


def decoder_for(model: torch.nn.Module, batch: int, max_len: int) -> Decoder:
    """The fast decoder where it reproduces the model's forward, else the model's own."""
    if GPT2Decoder.supports(model):
        return GPT2Decoder(model, batch, max_len)
    return HFCacheDecoder(model)
