"""Mixed precision: model forwards under bf16 autocast on CUDA, fp32 everywhere else.

bf16 keeps fp32's exponent range, so no loss scaling is needed (unlike fp16,
Micikevicius et al. 2018). Only the forwards of the models run under autocast; their
outputs (logits, hidden states) are upcast to fp32 before any logprob, KL, loss or
advantage is computed, and the weights and Adam's moments stay fp32. On the CPU nothing
changes: autocast is off and every number is the fp32 one.
"""

from __future__ import annotations

import torch

BF16_DEVICES = ("cuda",)  # device types whose forwards run in bf16 under `compute.bf16 = "auto"`
_mode = {"bf16": "auto"}  # the process's `compute.bf16`, set by `use_bf16` when a stage starts


def use_bf16(mode: str) -> None:
    """Set this process's `compute.bf16`: "auto" (bf16 on BF16_DEVICES), "on" or "off"."""
    if mode not in ("auto", "on", "off"):
        raise ValueError(f"compute.bf16 = {mode!r}: expected auto, on or off")
    _mode["bf16"] = mode


def bf16_on(device: torch.device) -> bool:
    mode = _mode["bf16"]
    return mode == "on" or (mode == "auto" and device.type in BF16_DEVICES)


def forward_dtype(device: torch.device) -> torch.dtype:
    """The dtype the models' forwards compute in on `device`."""
    return torch.bfloat16 if bf16_on(device) else torch.float32


def autocast(device: torch.device):
    """The autocast context for forwards on `device`: bf16 where `bf16_on`, else a no-op."""
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16_on(device))
