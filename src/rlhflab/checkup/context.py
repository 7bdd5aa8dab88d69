"""What the probes share: the configured pipeline's own state and components in the state
they run in (`states.py`), one rollout from it, and one traced PPO iteration on that
rollout."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Callable, TypeVar

import torch

from rlhflab.checkup.iteration import IterationTrace, trace_iteration
from rlhflab.checkup.results import ProbeSkipped
from rlhflab.checkup.states import START, ProbeState
from rlhflab.config import PipelineConfig
from rlhflab.data.batching import through_first
from rlhflab.data.files import PreferenceRecord
from rlhflab.data.prompt_pool import PromptSource
from rlhflab.models.forward import response_logprobs
from rlhflab.models.lm import load_causal_lm
from rlhflab.models.precision import forward_dtype
from rlhflab.ppo.rollout import Rollout, make_rollout
from rlhflab.ppo.state import PPOState
from rlhflab.seeding import torch_generator
from rlhflab.worlds.reviews import ReviewsWorld

T = TypeVar("T")


@dataclass
class ProbeContext:
    """`world` is the embedded world when the run uses it; own models bring their prompts
    (`source`) and, optionally, held-out preference pairs to test the reward model on.
    `trainer` is False when the models are checked for another trainer (`rlhflab checkup
    --policy ...`): the probes of rlhflab's own PPO code then do not run. `where` is the
    state the probes run in; `starting_model` the directory the policy and the reference
    were loaded from, read again by probes that need an independent reference."""

    config: PipelineConfig
    state: PPOState
    source: PromptSource
    prompts: list[str]
    world: ReviewsWorld | None = None
    pairs: tuple[PreferenceRecord, ...] = ()
    trainer: bool = True
    where: ProbeState = START
    starting_model: Path | None = None
    _cache: dict = field(default_factory=dict, repr=False)

    def shared(self, name: str, make: Callable[[], T]) -> T:
        """What several probes measure once: `make()` on the first call for `name`."""
        if name not in self._cache:
            self._cache[name] = make()
        return self._cache[name]

    def rollout(self) -> Rollout:
        """One rollout of the policy in this state (the same one for every probe)."""
        return self.shared("rollout", lambda: make_rollout(
            self.state, self.prompts, torch_generator(self.config.seed, "checkup", "sampling",
                                                      *self.where.seed_names))[0])

    def response_mask(self) -> torch.Tensor:
        """(B, T) the rollout's responses through their first EOS, from the sampled ids: a
        second path to the trainer's mask (a component, which `mask_covers_response` tests).
        Probes of other components select real tokens with this one, so that a wrong mask
        fails the mask's probe and not theirs too."""
        return self.shared("response_mask", lambda: through_first(self.rollout().response_ids,
                                                                  self.state.tokenizer.eos_token_id))

    def recorded_mask(self) -> torch.Tensor:
        """(B, T) the real response tokens the rollout recorded logprobs and values for (the
        trainer zeroes them outside its mask): where a recorded number can be compared with
        a recomputed one."""
        return self.response_mask() & self.rollout().mask

    def attention_mask(self) -> torch.Tensor:
        """(B, P + T) `[prompt | response]` attention by `response_mask()`."""
        return torch.cat([self.rollout().prompt_mask, self.response_mask()], dim=1)

    def iteration(self) -> IterationTrace:
        """One traced PPO iteration on `rollout()` (`iteration.trace_iteration`); the state is
        restored afterwards."""
        return self.shared("iteration", lambda: trace_iteration(self.state, self.rollout(), self.config.seed))

    def starting_logprobs(self) -> torch.Tensor:
        """The rollout's response tokens scored by the starting model loaded afresh from its
        directory (the reference as it must be, by a second path), with the trainer's own
        training forward."""
        if self.starting_model is None:
            raise ProbeSkipped("no starting model directory to load a second reference from")

        def score() -> torch.Tensor:
            rollout = self.rollout()
            device = next(self.state.policy.parameters()).device
            model = load_causal_lm(self.starting_model).eval().requires_grad_(False).to(device)
            with torch.no_grad():
                return response_logprobs(model, rollout.input_ids, self.attention_mask(), rollout.prompt_len,
                                         self.config.ppo.temperature, self.state.components.response_logits)

        return self.shared("starting_logprobs", score)

    @cached_property
    def dtype(self) -> torch.dtype:
        """The dtype the forwards run in."""
        return forward_dtype(next(self.state.policy.parameters()).device)
