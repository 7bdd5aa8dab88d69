"""Forward passes over `[left-padded prompt | right-padded response]` batches.

Every per-token quantity of a response (logprobs, values, entropy) comes from this one
place, so sampling-time and training-time numbers are computed the same way. Logits at
position `t` predict token `t + 1`: the response token `j` (absolute position `P + j`)
is scored by the logits at position `P + j - 1`.
"""

from __future__ import annotations

import torch
from torch import Tensor

from rlhflab.models.precision import autocast


def position_ids_from_mask(attention_mask: Tensor) -> Tensor:
    """Positions counted over real tokens only, so left padding does not shift them. (B, L)"""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


def padded_forward(model: torch.nn.Module, input_ids: Tensor, attention_mask: Tensor, **kwargs):
    """`model` (an HF causal LM or trunk) on a padded batch, positions from the mask, no
    cache, under the device's autocast (`models/precision.py`). (B, L) -> its output."""
    with autocast(input_ids.device):
        return model(input_ids=input_ids, attention_mask=attention_mask.long(),
                     position_ids=position_ids_from_mask(attention_mask), use_cache=False, **kwargs)


def response_logits(
    model: torch.nn.Module,
    input_ids: Tensor,
    attention_mask: Tensor,
    prompt_len: int,
    temperature: float,
    output_hidden_states: bool = False,
):
    """Logits (B, T, V) scoring the T response tokens, divided by the sampling temperature.

    Args:
        input_ids: (B, P + T) prompt (left-padded) then response (right-padded).
        attention_mask: (B, P + T) True for real tokens.
        prompt_len: P.
    Returns the logits and, when asked, the last hidden states aligned with them (B, T, H).
    """
    out = padded_forward(model, input_ids, attention_mask, output_hidden_states=output_hidden_states)
    # (B, P + T, V) -> (B, T, V): drop the last position, keep those predicting responses.
    logits = out.logits[:, prompt_len - 1 : -1].float() / temperature
    hidden = out.hidden_states[-1][:, prompt_len - 1 : -1].float() if output_hidden_states else None
    return logits, hidden


def response_logprobs(
    model: torch.nn.Module,
    input_ids: Tensor,
    attention_mask: Tensor,
    prompt_len: int,
    temperature: float,
    logits_fn=response_logits,
) -> Tensor:
    """Log pi(response token | prefix) at `temperature`. (B, T)"""
    logits, _ = logits_fn(model, input_ids, attention_mask, prompt_len, temperature)
    return logprobs_from_logits(logits, input_ids[:, prompt_len:])


def logprobs_from_logits(logits: Tensor, tokens: Tensor) -> Tensor:
    """Log-probability of the given tokens: ``log_softmax(logits).gather(tokens)``.

    Computed as ``logits[token] - logsumexp(logits)`` so no (B, T, V) log-softmax copy
    is kept for the backward pass (only the (B, T) logsumexp is), the same trick as
    TRL's ``selective_log_softmax``. Logits are used in their own dtype; upcast
    bf16/fp16 logits to float32 first if precision matters more than memory.

    Args:
        logits: (B, T, V) logits; position t predicts ``tokens[:, t]``.
        tokens: (B, T) integer token ids.

    Returns:
        (B, T) log pi(tokens).
    """
    # log p(y) = z_y - log sum_v exp(z_v)
    picked = logits.gather(dim=-1, index=tokens.long().unsqueeze(-1)).squeeze(-1)  # (B, T)
    return picked - torch.logsumexp(logits, dim=-1)
