"""What the probes share: the configured pipeline's own state and components, one rollout
from it before any update, and one traced PPO iteration on that rollout."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Callable, TypeVar

import torch

from rlhflab.checkup.iteration import IterationTrace, trace_iteration
from rlhflab.config import PipelineConfig
from rlhflab.data.files import PreferenceRecord
from rlhflab.data.prompt_pool import PromptSource
from rlhflab.models.precision import forward_dtype
from rlhflab.ppo.rollout import Rollout, make_rollout
from rlhflab.ppo.trainer import PPOState
from rlhflab.seeding import torch_generator
from rlhflab.worlds.reviews import ReviewsWorld

T = TypeVar("T")


@dataclass
class ProbeContext:
    """`world` is the embedded world when the run uses it; own models bring their prompts
    (`source`) and, optionally, held-out preference pairs to test the reward model on.
    `trainer` is False when the models are checked for another trainer (`rlhflab checkup
    --policy ...`): the probes of rlhflab's own PPO code then do not run."""

    config: PipelineConfig
    state: PPOState
    source: PromptSource
    prompts: list[str]
    world: ReviewsWorld | None = None
    pairs: tuple[PreferenceRecord, ...] = ()
    trainer: bool = True
    _cache: dict = field(default_factory=dict, repr=False)

    def shared(self, name: str, make: Callable[[], T]) -> T:
        """What several probes measure once: `make()` on the first call for `name`."""
        if name not in self._cache:
            self._cache[name] = make()
        return self._cache[name]

    def rollout(self) -> Rollout:
        """One rollout of the untrained policy (the same one for every probe)."""
        return self.shared("rollout", lambda: make_rollout(
            self.state.policy, self.state.reference, self.state.reward, self.state.tokenizer, self.prompts,
            self.config.ppo.response_length, self.config.ppo.temperature,
            torch_generator(self.config.seed, "checkup", "sampling"), self.state.components))

    def iteration(self) -> IterationTrace:
        """One traced PPO iteration on `rollout()` (`iteration.trace_iteration`); the state is
        restored afterwards."""
        return self.shared("iteration", lambda: trace_iteration(self.state, self.rollout(), self.config.seed))

    @cached_property
    def dtype(self) -> torch.dtype:
        """The dtype the forwards run in."""
        return forward_dtype(next(self.state.policy.parameters()).device)
