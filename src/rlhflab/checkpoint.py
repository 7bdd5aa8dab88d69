"""Atomic, resumable PPO checkpoints: weights and optimiser moments in safetensors,
everything else in JSON, nothing pickled.

A checkpoint is one directory, `RUN/checkpoints/ppo/`, written whole under a temporary
name and then renamed over the previous one, so a crash at any instant leaves either
the old checkpoint or the new one, never a mix. It holds what the next iteration reads:

    model.safetensors      policy and value head (tied weights stored once)
    optimizer.safetensors  Adam's per-parameter moments and step counts
    rng.safetensors        the sampling generator's state
    state.json             next iteration, KL controller, optimiser hyper-parameters,
                           lines of metrics/ppo.jsonl and samples/ppo.jsonl written so
                           far (so a resume drops lines logged after the checkpoint),
                           and the held-out evaluation of the starting policy

Prompts are drawn from a seed derived from the iteration number, so the data position
is the iteration itself. PPO runs at a constant learning rate: there is no scheduler.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file, load_model, save_file, save_model

from rlhflab.runs import atomic_dir

STATE_FILE = "state.json"


@dataclass(frozen=True)
class ResumePoint:
    """Where a resumed run picks up."""

    next_step: int
    metrics_lines: int
    samples_lines: int
    before: dict  # held-out evaluation of the starting policy


def _optimizer_tensors(optimizer: torch.optim.Optimizer) -> tuple[dict[str, torch.Tensor], list[dict]]:
    """Per-parameter state as flat tensors, and the param groups' hyper-parameters."""
    state = optimizer.state_dict()
    tensors = {f"{index}.{name}": value.detach().cpu().contiguous() for index, slots in state["state"].items()
               for name, value in slots.items() if torch.is_tensor(value)}
    return tensors, state["param_groups"]


def _load_optimizer(optimizer: torch.optim.Optimizer, tensors: dict[str, torch.Tensor], groups: list[dict]) -> None:
    slots: dict[int, dict[str, torch.Tensor]] = {}
    for key, value in tensors.items():
        index, name = key.split(".", 1)
        slots.setdefault(int(index), {})[name] = value
    optimizer.load_state_dict({"state": slots, "param_groups": groups})


def save_checkpoint(directory: Path, policy: torch.nn.Module, optimizer: torch.optim.Optimizer,
                    controller, generator: torch.Generator, resume: ResumePoint) -> None:
    """Write the checkpoint to a temporary directory, then swap it in."""
    with atomic_dir(directory) as tmp:
        save_model(policy, str(tmp / "model.safetensors"))
        tensors, groups = _optimizer_tensors(optimizer)
        save_file(tensors, str(tmp / "optimizer.safetensors"))
        save_file({"sampling": generator.get_state()}, str(tmp / "rng.safetensors"))
        state = {"next_step": resume.next_step, "metrics_lines": resume.metrics_lines,
                 "samples_lines": resume.samples_lines, "before": resume.before,
                 "kl_controller": controller.state_dict(), "param_groups": groups}
        (tmp / STATE_FILE).write_text(json.dumps(state, indent=2) + "\n", encoding="utf-8")


def has_checkpoint(directory: Path) -> bool:
    return (Path(directory) / STATE_FILE).is_file()


def load_checkpoint(directory: Path, policy: torch.nn.Module, optimizer: torch.optim.Optimizer,
                    controller, generator: torch.Generator) -> ResumePoint:
    """Restore everything `save_checkpoint` wrote into the given objects (in place)."""
    directory = Path(directory)
    state = json.loads((directory / STATE_FILE).read_text(encoding="utf-8"))
    load_model(policy, str(directory / "model.safetensors"), strict=True)
    _load_optimizer(optimizer, load_file(str(directory / "optimizer.safetensors")), state["param_groups"])
    controller.load_state_dict(state["kl_controller"])
    generator.set_state(load_file(str(directory / "rng.safetensors"))["sampling"])
    return ResumePoint(state["next_step"], state["metrics_lines"], state["samples_lines"], state["before"])


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
