"""Adam (Kingma & Ba 2015) with PyTorch's fused kernel where the parameters allow it.

The fused step is the same update as the default per-parameter loop, to float
rounding, in one kernel over all parameters: on a small model the loop's per-tensor
dispatch, not the arithmetic, is the optimiser's cost (docs/benchmarks.md)."""

from __future__ import annotations

from typing import Iterable

import torch

FUSED_DEVICES = ("cpu", "cuda")


def _fusable(params: list[torch.Tensor]) -> bool:
    return all(p.is_floating_point() and p.device.type in FUSED_DEVICES for p in params)


def adam(params: Iterable, **kwargs) -> torch.optim.Adam:
    """`torch.optim.Adam`, fused on CPU and CUDA floating-point parameters."""
    params = list(params)
    return torch.optim.Adam(params, fused=_fusable(params), **kwargs)



def warmup_linear_decay(base_lr: float, step: int, steps_per_epoch: int, epochs: int) -> float:
    """The learning rate of step `step` (from 0) of `steps_per_epoch * epochs` steps: a linear
    warm-up over the first 5% of them (at least one step), then a linear decay that reaches
    0 after the last step."""
    total = steps_per_epoch * epochs
    warmup = max(1, total // 20)
    return base_lr * min((step + 1) / warmup, max(0.0, (total - step) / max(1, total - warmup)))
