"""Mixed precision: model forwards under bf16 autocast on CUDA, fp32 everywhere else.

bf16 keeps fp32's exponent range, so no loss scaling is needed (unlike fp16,
Micikevicius et al. 2018). Only the forwards of the models run under autocast; their
outputs (logits, hidden states) are upcast to fp32 before any logprob, KL, loss or
advantage is computed, and the weights and Adam's moments stay fp32. On the CPU nothing
changes: autocast is off and every number is the fp32 one.
"""

from __future__ import annotations

import torch

BF16_DEVICES = ("cuda",)  # device types whose forwards run in bf16


def forward_dtype(device: torch.device) -> torch.dtype:
    """The dtype the models' forwards compute in on `device`."""
    return torch.bfloat16 if device.type in BF16_DEVICES else torch.float32


def autocast(device: torch.device):
    """The autocast context for forwards on `device`: bf16 on BF16_DEVICES, else a no-op."""
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type in BF16_DEVICES)
