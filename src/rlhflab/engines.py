"""How the models are spread over torchrun's processes: PyTorch's own engines.

- `single`: one process, the models as they are.
- `ddp`: `DistributedDataParallel`: every process holds the whole trained model; its
  gradients are averaged across processes during the backward.
- `fsdp2`: `torch.distributed.fsdp.fully_shard` on each transformer block and on the
  root: parameters, gradients and optimiser state are sharded (each process holds 1/W),
  a block's parameters are all-gathered for its forward and backward, and gradients are
  reduce-scattered. Frozen models are sharded too or replicated (`shard_frozen`).

The trained model is always called through `trained(...)`'s module, whose forward is
where DDP and FSDP2 hook their communication. Generation and saving need every weight on
every process: `full_weights` gathers them once for a whole rollout (FSDP2), instead of
once per generated token. Why these engines and not others: docs/distributed.md.
"""

from __future__ import annotations

from contextlib import contextmanager, nullcontext
from typing import ContextManager, Iterator, Protocol

import torch
from torch import nn

from rlhflab.config import DistributedConfig, resolve_strategy
from rlhflab.distributed import Cluster
from rlhflab.models.blocks import repeated_blocks


def clip_grad_norm(parameters, max_norm: float) -> torch.Tensor:
    """`clip_grad_norm_` whose result is a plain scalar tensor also when gradients are
    sharded (FSDP2's DTensors give a DTensor norm)."""
    norm = torch.nn.utils.clip_grad_norm_(list(parameters), max_norm)
    return norm.full_tensor() if hasattr(norm, "full_tensor") else norm


class Engine(Protocol):
    """How a model is trained across processes (one of `ENGINES`, by `distributed.strategy`)."""

    name: str

    def trained(self, module: nn.Module) -> nn.Module:
        """`module` wrapped for training (its gradients combined across processes)."""

    def frozen(self, module: nn.Module) -> nn.Module:
        """A frozen `module` (a reference, a reward model) placed for forwards only."""

    def full_weights(self, module: nn.Module) -> ContextManager:
        """Every weight of `module` present on every process while the context lasts."""

    def full_state_dict(self, module: nn.Module) -> dict:
        """The module's whole state dict, on the first process (every process calls it)."""

    def loss_weight(self, fraction: float | torch.Tensor) -> float | torch.Tensor:
        """The factor a process's loss is multiplied by before backward, given the fraction
        of the whole minibatch (its tokens, rows or pairs) this process's loss is the mean
        over: what makes the combined gradient the whole minibatch's."""


class SingleEngine:
    name = "single"

    def __init__(self, config: DistributedConfig, cluster: Cluster) -> None:
        self.config, self.cluster = config, cluster

    def loss_weight(self, fraction: float | torch.Tensor) -> float | torch.Tensor:
        """`fraction` times the number of processes: DDP and FSDP2 average the gradients
        over the W processes (a sum divided by W), so a process whose loss is the mean over
        `fraction` of the minibatch must be weighted by W x `fraction` for the average to be
        the whole minibatch's mean. Written here once, for every engine; W is 1 alone."""
        return fraction * self.cluster.world_size

    def trained(self, module: nn.Module) -> nn.Module:
        return module

    def frozen(self, module: nn.Module) -> nn.Module:
        return module

    def full_weights(self, module: nn.Module) -> ContextManager:
        return nullcontext()

    def full_state_dict(self, module: nn.Module) -> dict:
        """The module's whole state dict, on the first process (a collective: every process calls it)."""
        return module.state_dict()


class DDPEngine(SingleEngine):
    name = "ddp"

    def trained(self, module: nn.Module) -> nn.Module:
        from torch.nn.parallel import DistributedDataParallel

        device = self.cluster.device
        # Unused parameters are allowed: a component may leave one out of a loss (the value
        # head of a reward model, a fault's detached values), which DDP would wait for forever.
        return DistributedDataParallel(module, device_ids=[device] if device.type == "cuda" else None,
                                       find_unused_parameters=True)


class FSDP2Engine(SingleEngine):
    name = "fsdp2"

    def __init__(self, config: DistributedConfig, cluster: Cluster) -> None:
        super().__init__(config, cluster)
        from torch.distributed.device_mesh import init_device_mesh

        self.mesh = init_device_mesh(cluster.device.type, (cluster.world_size,))

    def _shard_blocks(self, module: nn.Module) -> None:
        from torch.distributed.fsdp import fully_shard

        for block in repeated_blocks(module):
            fully_shard(block, mesh=self.mesh, reshard_after_forward=self.config.reshard_after_forward,
                        mp_policy=self._precision())

    def _precision(self):
        from torch.distributed.fsdp import MixedPrecisionPolicy

        dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}
        return MixedPrecisionPolicy(param_dtype=dtype[self.config.param_dtype],
                                    reduce_dtype=dtype[self.config.reduce_dtype])

    def trained(self, module: nn.Module) -> nn.Module:
        from torch.distributed.fsdp import fully_shard

        self._shard_blocks(module)
        # The root (embeddings, final norm, heads) is gathered for the whole forward anyway.
        fully_shard(module, mesh=self.mesh, reshard_after_forward=False, mp_policy=self._precision())
        # Made the root now: otherwise the first forward to reach FSDP would make it, and a
        # forward of the policy's LM alone (evaluation) would make a block the root.
        module._get_fsdp_state()._lazy_init()
        return module

    def frozen(self, module: nn.Module) -> nn.Module:
        """The blocks sharded, each a root of its own: any of the model's entry points (a
        reward model's trunk read by `score_sequences`, an LM's forward) gathers the block
        it runs through. Embeddings and heads stay whole on every process."""
        if self.config.shard_frozen:
            self._shard_blocks(module)
        return module

    @contextmanager
    def full_weights(self, module: nn.Module) -> Iterator[None]:
        """Every FSDP unit of `module` gathered (on every process: a collective) and kept so
        through any number of forwards, then sharded again."""
        from torch.distributed.fsdp import FSDPModule

        units = [m for m in module.modules() if isinstance(m, FSDPModule)]
        if not units:
            yield
            return
        for unit in units:
            unit.set_reshard_after_forward(False, recurse=False)
            unit.unshard()
        try:
            yield
        finally:
            for unit in units:
                unit.reshard()
                unit.set_reshard_after_forward(unit is not module and self.config.reshard_after_forward,
                                               recurse=False)


    def full_state_dict(self, module: nn.Module) -> dict:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        # FSDP2's state_dict is its shards (it reshards a gathered module first); DCP gathers
        # the full tensors onto the first process's CPU.
        return get_model_state_dict(module, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


ENGINES: dict[str, type[Engine]] = {engine.name: engine for engine in (SingleEngine, DDPEngine, FSDP2Engine)}


def make_engine(config: DistributedConfig, cluster: Cluster) -> Engine:
    """The engine of `config.strategy` for this cluster; one process runs every strategy as single."""
    return ENGINES[resolve_strategy(config.strategy, cluster.world_size)](config, cluster)
