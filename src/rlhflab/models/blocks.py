"""A model's transformer blocks, and recomputing their activations in the backward
(activation checkpointing, Chen et al. 2016, "Training Deep Nets with Sublinear Memory
Cost"): the memory of a block's activations for one more forward of it per backward."""

from __future__ import annotations

from functools import partial

from torch import nn


def repeated_blocks(module: nn.Module) -> list[nn.Module]:
    """The transformer blocks: the members of every ModuleList of two or more modules of
    one class (GPT-2's `transformer.h`, Llama's `model.layers`)."""
    blocks = []
    for child in module.modules():
        if isinstance(child, nn.ModuleList) and len(child) > 1 and len({type(m) for m in child}) == 1:
            blocks.extend(child)
    return blocks


def checkpoint_blocks(module: nn.Module) -> int:
    """Wrap every block of `module` in torch's non-reentrant checkpoint wrapper, which
    recomputes it in the backward whatever the module's train/eval mode (transformers'
    own gradient checkpointing acts in train mode only, and the PPO policy stays in eval
    mode). Parameter names are unchanged in state dicts. Returns the blocks wrapped."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
        CheckpointImpl,
        apply_activation_checkpointing,
        checkpoint_wrapper,
    )

    blocks = {id(block) for block in repeated_blocks(module)}
    apply_activation_checkpointing(module, checkpoint_wrapper_fn=partial(checkpoint_wrapper,
                                                                          checkpoint_impl=CheckpointImpl.NO_REENTRANT),
                                   check_fn=lambda m: id(m) in blocks)
    return len(blocks)


def resolve(mode: str, device_type: str) -> bool:
    """An `auto`/`on`/`off` compute setting on a device: auto means on for CUDA."""
    return mode == "on" or (mode == "auto" and device_type == "cuda")


def checkpoint_blocks_if(mode: str, module: nn.Module, device_type: str) -> int:
    """`checkpoint_blocks` where `compute.activation_checkpointing` (`mode`) asks for it on
    this device type; the blocks wrapped (0 when off)."""
    return checkpoint_blocks(module) if resolve(mode, device_type) else 0
