"""What samples stage 3's rollouts (`rollout.engine`): rlhflab's own decoder on the
trained weights, or an inference engine that holds a copy of them, pushed to it after
every update. Both are called like the `sample` component (`seams.Sample`) and return
the tokens they drew with the logprobs they drew them at; the trainer recomputes its own
for the update (rollout.py), and the gap between the two is the mismatch it logs."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Protocol

import torch
from torch import Tensor

from rlhflab.config import ConfigError, RolloutConfig
from rlhflab.models.sampling import Samples
from rlhflab.ppo import seams
from rlhflab.ppo.components import PPOComponents, component_path
from rlhflab.seeding import RowStreams


class Sampler(Protocol):
    """A rollout sampler: `seams.Sample` plus `push`, told the policy's weights after every
    update, and `close`, called when the run is done with it. `is_trainer`: it samples the
    trained weights themselves (its logprobs differ from the trainer's by float noise only)."""

    is_trainer: bool

    def __call__(self, model: torch.nn.Module, prompt_ids: Tensor, prompt_mask: Tensor, max_new_tokens: int,
                 temperature: float, eos_id: int, pad_id: int, generator: torch.Generator | RowStreams) -> Samples: ...

    def push(self, lm: torch.nn.Module) -> None: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class NativeSampler:
    """The `sample` component on the trained weights themselves: nothing to push."""

    sample: seams.Sample
    is_trainer = True

    def __call__(self, model, prompt_ids, prompt_mask, max_new_tokens, temperature, eos_id, pad_id,
                 generator) -> Samples:
        return self.sample(model, prompt_ids, prompt_mask, max_new_tokens, temperature, eos_id, pad_id, generator)

    def push(self, lm: torch.nn.Module) -> None:
        pass

    def close(self) -> None:
        pass


def _native(sample: seams.Sample, policy_dir: Path, config: RolloutConfig, seed: int, device: torch.device
            ) -> Sampler:
    return NativeSampler(sample)


def _check_vllm(config: RolloutConfig, sample: seams.Sample) -> None:
    """Before the run: vLLM importable, and no replaced sample component it would stand in for."""
    from rlhflab.models.vllm_sampler import import_vllm

    if sample is not PPOComponents().sample:  # the engine samples in its place: a replacement would be lost
        raise ConfigError(f"rollout.engine = {config.engine!r} samples in place of the sample component, which this "
                          f"run replaces ({component_path(sample)}: a fault, or components.sample); use "
                          "rollout.engine = 'native' to run it")
    import_vllm()


def _vllm(sample: seams.Sample, policy_dir: Path, config: RolloutConfig, seed: int, device: torch.device
          ) -> Sampler:
    from rlhflab.models.vllm_sampler import VLLMSampler

    _check_vllm(config, sample)
    return VLLMSampler(policy_dir, config, seed, device)


@dataclass(frozen=True)
class Engine:
    """A rollout engine: how to start it, and what it needs, checked before a run writes anything."""

    start: Callable[..., Sampler]
    """(the sample component, the policy's directory, the rollout config, a seed, the device) -> Sampler."""
    check: Callable[[RolloutConfig, seams.Sample], None] = lambda config, sample: None


# rollout.engine -> its engine.
SAMPLERS: dict[str, Engine] = {"native": Engine(_native), "vllm": Engine(_vllm, _check_vllm)}


def check_engine(config: RolloutConfig, sample: seams.Sample) -> None:
    """What `config.engine` needs, there before the run starts (`preflight`)."""
    SAMPLERS[config.engine].check(config, sample)


def start_sampler(sample: seams.Sample, policy_dir: Path, config: RolloutConfig, seed: int,
                  device: torch.device) -> Sampler:
    """The sampler `config.engine` names, started on the weights of `policy_dir`."""
    return SAMPLERS[config.engine].start(sample, policy_dir, config, seed, device)
