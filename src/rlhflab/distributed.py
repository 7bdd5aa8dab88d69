"""Processes started by `torchrun` (torch.distributed: NCCL with one CUDA device per
process when CUDA is present, gloo on CPU): who this process is, which share of a batch's
rows it works on, and the collectives that put the shares back together. The device comes
from accelerate. How the models are spread over the processes is `rlhflab.engines`.

Work is split by rows: a batch's rows are cut into contiguous shares (`shard`), each
process samples, scores or trains on its share, and `gather_rows` gives every process
the whole batch again in row order. A row's random draws come from its own stream
(`seeding.RowStreams`), so what a row gets never depends on the number of processes.

Outside torchrun, `Cluster.single()` is the same code with one share: every collective
returns its input.
"""

from __future__ import annotations

import atexit
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist
from accelerate import PartialState
from torch import Tensor

SUPPORTED_DEVICE_TYPES = ("cpu", "cuda")


def _leave_group() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


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
    world_size: int

    @staticmethod
    def single() -> "Cluster":
        return Cluster(0, 1)

    @staticmethod
    def from_environment() -> "Cluster":
        """Join the process group torchrun describes (RANK, WORLD_SIZE, MASTER_ADDR, ...);
        a single process when those are not set."""
        world_size = int(os.environ.get("WORLD_SIZE", "1"))
        if world_size == 1:
            return Cluster.single()
        default_device()  # on GPUs accelerate sets this process's device and joins the NCCL group
        if not dist.is_initialized():  # on CPUs accelerate leaves a torchrun process alone
            dist.init_process_group("gloo")
        # A process that exits with its group still open can abort in the backend's teardown
        # ("terminate called without an active exception") while the others finish.
        atexit.register(_leave_group)
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
        return rows.tensor_split(self.world_size)[self.rank]

    def gather_rows(self, local: Tensor, total: int) -> Tensor:
        """Every process's share of a `total`-row batch (each cut by `shard`), concatenated
        in row order, on every process. Shares must agree in every dimension but the first."""
        if self.world_size == 1:
            return local
        sizes = [len(share) for share in torch.arange(total).tensor_split(self.world_size)]
        is_bool = local.dtype == torch.bool  # gloo cannot gather bool tensors
        padded = local.to(torch.uint8) if is_bool else local
        if len(padded) < sizes[0]:
            padded = torch.cat([padded, padded.new_zeros((sizes[0] - len(padded), *padded.shape[1:]))])
        parts = [torch.empty_like(padded) for _ in range(self.world_size)]
        dist.all_gather(parts, padded.contiguous())
        rows = torch.cat([part[:size] for part, size in zip(parts, sizes)])
        return rows.bool() if is_bool else rows

    def gather_lists(self, local: list) -> list:
        """Every process's list (picklable items), concatenated in rank order."""
        if self.world_size == 1:
            return local
        parts: list[list] = [[] for _ in range(self.world_size)]
        dist.all_gather_object(parts, local)
        return [item for part in parts for item in part]

    def sum(self, values: dict[str, float]) -> dict[str, float]:
        """Each value summed over processes."""
        if self.world_size == 1:
            return values
        keys = sorted(values)
        packed = torch.tensor([values[k] for k in keys], dtype=torch.float64, device=self.device)
        dist.all_reduce(packed, op=dist.ReduceOp.SUM)
        return dict(zip(keys, packed.tolist()))

    def max(self, value: float) -> float:
        """The largest of every process's `value`."""
        if self.world_size == 1:
            return value
        packed = torch.tensor([value], dtype=torch.float64, device=self.device)
        dist.all_reduce(packed, op=dist.ReduceOp.MAX)
        return float(packed)

    def barrier(self) -> None:
        if self.world_size > 1:
            dist.barrier()
