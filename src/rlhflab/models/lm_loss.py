"""Stage 1's objective: next-token cross-entropy (Radford et al. 2018) over a batch's
target tokens, one mean over every target token of the batch."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from rlhflab.models.precision import autocast


def lm_loss(model: torch.nn.Module, ids: Tensor, mask: Tensor, loss_mask: Tensor) -> Tensor:
    """Mean next-token cross-entropy over the target tokens in `loss_mask`.
    ids/mask/loss_mask: (B, L); mask is True for real tokens, loss_mask for targets."""
    with autocast(ids.device):
        logits = model(input_ids=ids, attention_mask=mask.long(), use_cache=False).logits  # (B, L, V)
    targets = ids[:, 1:].masked_fill(~loss_mask[:, 1:], -100)
    return F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), targets.flatten(), ignore_index=-100)
