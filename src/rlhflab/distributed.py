"""Devices and data parallelism over processes started by `torchrun` (torch.distributed:
NCCL with one CUDA device per process when CUDA is present, gloo on CPU), in the
plainest form that gives the single-process result. The device comes from accelerate.

Every process holds the whole model and the whole batch: rollouts, reference and reward
scores and advantages are computed identically everywhere (same seeds), and only the
gradient work is split: each process takes its share of a minibatch's rows, and the
gradients are summed across processes before the optimiser step. A loss that is a mean
over a minibatch's tokens is weighted so the sum over processes is that same mean, so
`W` processes at a global batch `B` follow one process at `B` up to floating-point
reassociation. Generation is not sharded (it is repeated on every process): a
deliberate trade of speed for exact agreement, documented in the README.

Outside torchrun, `Cluster.single()` is a no-op: the single-process code path is the
same code with one shard. Random numbers are drawn on the CPU on every device, so a
seed gives the same samples on CPU and CUDA up to the precision of the probabilities.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist
from accelerate import PartialState
from torch import Tensor

SUPPORTED_DEVICE_TYPES = ("cpu", "cuda")


def default_device() -> torch.device:
    """Where this process's models and batches live, as accelerate's `PartialState`
    places it: under torchrun or `accelerate launch` on GPUs the local rank's GPU (it
    joins the NCCL group then), else the machine's CUDA device, else the CPU. Other
    accelerators accelerate finds (MPS, XPU, ...) get the CPU: rlhflab is not tested on
    them."""
    device = PartialState().device
    return device if device.type in SUPPORTED_DEVICE_TYPES else torch.device("cpu")


@dataclass(frozen=True)
class Cluster:
    rank: int
    world: int

    @staticmethod
    def single() -> "Cluster":
        return Cluster(0, 1)

    @staticmethod
    def from_environment() -> "Cluster":
        """Join the process group torchrun describes (RANK, WORLD_SIZE, MASTER_ADDR, ...);
        a single process when those are not set."""
        world = int(os.environ.get("WORLD_SIZE", "1"))
        if world == 1:
            return Cluster.single()
        default_device()  # on GPUs accelerate sets this process's device and joins the NCCL group
        if not dist.is_initialized():  # on CPUs accelerate leaves a torchrun process alone
            dist.init_process_group("gloo")
        return Cluster(dist.get_rank(), dist.get_world_size())

    @property
    def device(self) -> torch.device:
        return default_device()

    @property
    def is_main(self) -> bool:
        """The process that writes files (metrics, checkpoints, models)."""
        return self.rank == 0

    def shard(self, rows: Tensor) -> Tensor:
        """This process's contiguous share of `rows` (an index tensor); sizes differ by at most one."""
        return rows.tensor_split(self.world)[self.rank]

    def sum_gradients(self, parameters) -> None:
        """Sum every gradient over processes (each process's loss carries its weight)."""
        if self.world == 1:
            return
        for p in parameters:
            if p.grad is not None:
                dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)

    def sum(self, values: dict[str, float]) -> dict[str, float]:
        """Each value summed over processes."""
        if self.world == 1:
            return values
        keys = sorted(values)
        packed = torch.tensor([values[k] for k in keys], dtype=torch.float64, device=self.device)
        dist.all_reduce(packed, op=dist.ReduceOp.SUM)
        return dict(zip(keys, packed.tolist()))

    def max(self, value: float) -> float:
        if self.world == 1:
            return value
        packed = torch.tensor([value], dtype=torch.float64, device=self.device)
        dist.all_reduce(packed, op=dist.ReduceOp.MAX)
        return float(packed)

    def barrier(self) -> None:
        if self.world > 1:
            dist.barrier()
