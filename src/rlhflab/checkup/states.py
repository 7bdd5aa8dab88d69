"""The states the checkup probes in. At the start the stage-1 model is the policy, the
rollout's old policy and the reference at once, so an invariant that relates two of them
(the ratio to the rollout's logprobs, the KL to the reference) holds there whatever the
code does with them: a bug that uses one in place of another is invisible. The moved
state is one where the three differ: the run's latest checkpoint (its policy, value head,
optimiser and KL controller), or, for a run without one, the state after a few real PPO
iterations the checkup makes itself with the run's own components. Either is undone when
the probes of that state have run."""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Literal

from rlhflab.checkpoint import has_checkpoint, load_checkpoint
from rlhflab.checkup.iteration import preserved
from rlhflab.config import PipelineConfig
from rlhflab.data.prompt_pool import PromptSource
from rlhflab.ppo.state import PPOState
from rlhflab.ppo.trainer import ppo_iteration
from rlhflab.seeding import derive_seed

StateName = Literal["start", "moved"]
STATES: tuple[StateName, ...] = ("start", "moved")
# Real PPO iterations the checkup makes when the run has no checkpoint: after the first the
# policy differs from the reference; the second carries the optimiser's moments across an
# iteration, so both kinds of invariant have something to hold.
MOVE_ITERATIONS = 2


@dataclass(frozen=True)
class ProbeState:
    """Where a probe ran: its name, how the state was reached, and the optimiser steps the
    policy has taken there (the count its Adam moments must carry; None where a checkpoint
    does not say how many of its updates a non-finite guard skipped)."""

    name: StateName
    detail: str
    optimizer_steps: int | None = 0

    @property
    def seed_names(self) -> tuple[str, ...]:
        """Extra names of the state's sampling seed (none at the start, whose rollout is the
        one every earlier checkup drew)."""
        return () if self.name == "start" else (self.name,)


START = ProbeState("start", "the stage-1 model before any update: policy = old policy = reference")


@contextmanager
def moved_state(state: PPOState, config: PipelineConfig, source: PromptSource,
                checkpoint_dir: Path | None) -> Iterator[ProbeState]:
    """The state moved to the run's checkpoint when it has one, else by MOVE_ITERATIONS real
    iterations; the policy, optimiser and controller are restored on exit."""
    with preserved(state):
        if checkpoint_dir is not None and has_checkpoint(checkpoint_dir):
            point = load_checkpoint(checkpoint_dir, state.policy, state.optimizer, state.controller)
            state.sampler.push(state.policy.lm)  # an inference engine samples the checkpoint's weights too
            yield ProbeState("moved", f"the run's checkpoint {checkpoint_dir} (after iteration {point.next_step})",
                             None)
            return
        skipped = 0
        for iteration in range(MOVE_ITERATIONS):
            prompts = state.components.prompts(source, config.ppo.batch_size,
                                               derive_seed(config.seed, "checkup-move", str(iteration)))
            _, metrics = ppo_iteration(state, prompts, derive_seed(config.seed, "checkup", "move"), iteration)
            skipped += int(metrics.get("guard/skipped_updates", 0))
        steps = MOVE_ITERATIONS * config.ppo.epochs * config.ppo.minibatches - skipped
        yield ProbeState("moved", f"after {MOVE_ITERATIONS} real PPO iterations made by the checkup (undone after)",
                         steps)
