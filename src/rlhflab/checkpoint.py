"""Atomic, resumable PPO checkpoints in torch.distributed.checkpoint (DCP) form, under
every strategy, loadable at any world size.

A checkpoint is one directory, `RUN/checkpoints/ppo/`, written whole under a temporary
name and then renamed over the previous one (by the first process, after every process
has written its part), so a crash at any instant leaves either the old checkpoint or the
new one, never a mix. It holds what the next iteration reads:

    weights/       DCP: the policy's trained parameters (under LoRA its adapters) with its
                   value head, and Adam's moments and step
                   counts, under the models' own parameter names (no DDP or FSDP
                   prefix); each process writes the shards it holds (FSDP2) or the first
                   writes the replicated tensors (single, DDP). Loading reshards them for
                   whatever strategy and world size the resumed run uses.
    state.json     next iteration, KL controller, lines of metrics/ppo.jsonl and
                   samples/ppo.jsonl written so far (so a resume drops lines logged after
                   the checkpoint), the held-out evaluation of the starting policy, and the
                   training config it was written under (a resume under another is refused)

No random-generator state is saved: every draw of an iteration comes from streams named
by the seed and the iteration (`ppo.trainer.ppo_iteration`), so the iteration number is
the whole data and sampling position. PPO runs at a constant learning rate: there is no
scheduler. The checkpoint directory must be on a filesystem every process sees (one
node, or a shared one across nodes), as DCP requires.
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict, set_state_dict

from rlhflab.distributed import Cluster
from rlhflab.runs import fresh_dir, staging, swap_in

STATE_FILE = "state.json"
WEIGHTS = "weights"


@dataclass(frozen=True)
class ResumePoint:
    """Where a resumed run picks up."""

    next_step: int
    metrics_lines: int
    samples_lines: int
    before: dict  # held-out evaluation of the starting policy
    config: dict = field(default_factory=dict)  # the training keys it was written under (config.training_keys)


def save_checkpoint(directory: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer, controller,
                    resume: ResumePoint, cluster: Cluster = Cluster.single()) -> None:
    """Every process writes its part to a temporary directory; the first swaps it in."""
    directory = Path(directory)
    partial = fresh_dir(directory) if cluster.is_main else staging(directory)
    cluster.barrier()
    model_state, optimizer_state = get_state_dict(model, optimizer, options=_options(model))
    with warnings.catch_warnings():  # one process is how rlhflab runs outside torchrun, not a mistake to warn of
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        dcp.save({"model": model_state, "optimizer": optimizer_state}, checkpoint_id=str(partial / WEIGHTS),
                 no_dist=not dist.is_initialized())
    if cluster.is_main:
        state = {"next_step": resume.next_step, "metrics_lines": resume.metrics_lines,
                 "samples_lines": resume.samples_lines, "before": resume.before,
                 "kl_controller": controller.state_dict(), "world_size": cluster.world_size, "config": resume.config}
        (partial / STATE_FILE).write_text(json.dumps(state, indent=2) + "\n", encoding="utf-8")
        swap_in(partial, directory)
    cluster.barrier()


def _options(model: torch.nn.Module) -> StateDictOptions:
    """Trained parameters only: under LoRA the frozen base is the run's starting model, read
    from its directory, so a checkpoint holds the adapters, the value head and their Adam
    moments (strict loading would ask for the frozen weights too)."""
    frozen = any(not p.requires_grad for p in model.parameters())
    return StateDictOptions(ignore_frozen_params=frozen, strict=not frozen)


def has_checkpoint(directory: Path) -> bool:
    return (Path(directory) / STATE_FILE).is_file() and (Path(directory) / WEIGHTS).is_dir()


def load_checkpoint(directory: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                    controller) -> ResumePoint:
    """Restore everything `save_checkpoint` wrote into the given objects (in place), at this
    process's strategy and world size whatever they were when it was written."""
    directory = Path(directory)
    state = json.loads((directory / STATE_FILE).read_text(encoding="utf-8"))
    # DCP loads only what the template names; get_state_dict makes an empty optimiser's
    # moments to name them (a zero-gradient step at lr 0), which it skips if any gradient is set.
    optimizer.zero_grad(set_to_none=True)
    options = _options(model)
    model_state, optimizer_state = get_state_dict(model, optimizer, options=options)  # what to load, and where
    loaded = {"model": model_state, "optimizer": optimizer_state}
    dcp.load(loaded, checkpoint_id=str(directory / WEIGHTS), no_dist=not dist.is_initialized())
    set_state_dict(model, optimizer, model_state_dict=loaded["model"], optim_state_dict=loaded["optimizer"],
                   options=options)
    controller.load_state_dict(state["kl_controller"])
    return ResumePoint(state["next_step"], state["metrics_lines"], state["samples_lines"], state["before"],
                       state.get("config", {}))


def truncate_lines(path: Path, lines: int) -> None:
    """Keep the first `lines` lines of a JSONL file: what was logged after the checkpoint
    is logged again by the resumed run."""
    path = Path(path)
    if not path.is_file():
        return
    kept = path.read_text(encoding="utf-8").splitlines(keepends=True)[:lines]
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text("".join(kept), encoding="utf-8")
    tmp.replace(path)


def count_lines(path: Path) -> int:
    path = Path(path)
    return sum(1 for _ in path.open(encoding="utf-8")) if path.is_file() else 0
