"""The signature of every replaceable PPO component (`PPOComponents`), one `Protocol` each,
so that "go to definition" on a component leads to what it must accept and return, and a
replacement (a fault, a user's own component) is checked against it
(tests/test_components.py compares every default's and every fault's parameters)."""

from __future__ import annotations

from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import torch
from torch import Tensor

if TYPE_CHECKING:
    from rlhflab.config import PPOConfig
    from rlhflab.models.sampling import Samples
    from rlhflab.ppo.kl import KLController, KLEstimator
    from rlhflab.ppo.losses import PolicyLossStats, ValueLossStats
    from rlhflab.seeding import RowStreams


# --- advantage and loss math ---------------------------------------------------------------------
class ShapeRewards(Protocol):
    def __call__(self, scores: Tensor, logprobs: Tensor, ref_logprobs: Tensor, mask: Tensor, kl_coef: float,
                 kl_estimator: KLEstimator = "k1") -> tuple[Tensor, Tensor]:
        """Per-token rewards (the score on the last token, minus beta x KL) and the per-token KL."""


class Gae(Protocol):
    def __call__(self, rewards: Tensor, values: Tensor, mask: Tensor, gamma: float, lam: float) -> tuple[Tensor, Tensor]:
        """Advantages and returns."""


class Whiten(Protocol):
    def __call__(self, x: Tensor, mask: Tensor, shift_mean: bool = True) -> Tensor:
        """`x` standardised over the masked positions."""


class PolicyLoss(Protocol):
    def __call__(self, logprobs: Tensor, old_logprobs: Tensor, advantages: Tensor, mask: Tensor,
                 clip_eps: float) -> tuple[Tensor, PolicyLossStats]:
        """The clipped surrogate loss and its statistics."""


class ValueLoss(Protocol):
    def __call__(self, values: Tensor, old_values: Tensor, returns: Tensor, mask: Tensor,
                 clip_eps: float) -> tuple[Tensor, ValueLossStats]:
        """The clipped value loss and its statistics."""


# --- KL control ---------------------------------------------------------------------------------
class MakeKLController(Protocol):
    def __call__(self, config: PPOConfig) -> KLController:
        """The KL coefficient's controller."""


class MakeReference(Protocol):
    def __call__(self, stage1_dir: Path, policy_lm: torch.nn.Module) -> torch.nn.Module:
        """The frozen reference model."""


class KLSignal(Protocol):
    def __call__(self, metrics: dict[str, float]) -> float:
        """What the KL controller is told of an iteration's metrics."""


# --- logprob bookkeeping and sampling ------------------------------------------------------------
class Sample(Protocol):
    def __call__(self, model: torch.nn.Module, prompt_ids: Tensor, prompt_mask: Tensor, max_new_tokens: int,
                 temperature: float, eos_id: int, pad_id: int, generator: torch.Generator | RowStreams) -> Samples:
        """Responses to the prompts, with their sampling logprobs."""


class ResponseLogits(Protocol):
    def __call__(self, model: torch.nn.Module, input_ids: Tensor, attention_mask: Tensor, prompt_len: int,
                 temperature: float, output_hidden_states: bool = False) -> tuple[Tensor, Tensor | None]:
        """The logits scoring each response token (and the last hidden states, when asked)."""


class ResponseMask(Protocol):
    def __call__(self, mask: Tensor) -> Tensor:
        """The response positions losses, KL and advantages count."""


class RolloutMode(Protocol):
    def __call__(self, model: torch.nn.Module) -> AbstractContextManager[None]:
        """The mode the rollout's forwards run in."""


# --- the update's mechanics -----------------------------------------------------------------------
class MinibatchSchedule(Protocol):
    def __call__(self, batch: int, minibatches: int, epochs: int, generator: torch.Generator) -> list[Tensor]:
        """The row indices of each minibatch, in the order the update takes them."""


class GradientStep(Protocol):
    def __call__(self, optimizer: torch.optim.Optimizer, parameters: Any, loss: Tensor,
                 max_grad_norm: float) -> Tensor:
        """One optimiser step on `loss`; the gradient norm before clipping."""


class Entropy(Protocol):
    def __call__(self, logits: Tensor, mask: Tensor) -> Tensor:
        """The mean entropy over the masked positions."""


# --- the reward model's training (stage 2) -------------------------------------------------------
class ComparisonRows(Protocol):
    def __call__(self, prompt_ids: Tensor, prompt_mask: Tensor, response_ids: Tensor,
                 mask: Tensor) -> tuple[Tensor, Tensor]:
        """The rows the reward model reads: ids and attention mask."""


class PreferencePairs(Protocol):
    def __call__(self, scores: Tensor, pairs: Tensor, first_preferred: Tensor) -> tuple[Tensor, Tensor]:
        """Each comparison's chosen and rejected scores."""


class PreferenceLoss(Protocol):
    def __call__(self, chosen_scores: Tensor, rejected_scores: Tensor) -> tuple[Tensor, Tensor]:
        """The loss and the accuracy of a batch of comparisons."""


class RewardLR(Protocol):
    def __call__(self, base_lr: float, step: int, steps_per_epoch: int, epochs: int) -> float:
        """The learning rate of one reward-model step."""


class RewardBatches(Protocol):
    def __call__(self, lengths: Tensor, batch_size: int, generator: torch.Generator, pool: int = 50) -> list[Tensor]:
        """One pass over the reward model's training prompts: their row indices, batch by batch
        (`pool` batches sorted by length together)."""


class ComparisonSplit(Protocol):
    def __call__(self, n_train: int, n_val: int) -> tuple[Tensor, Tensor]:
        """Which of the labelled comparisons train the reward model and which hold it out."""


# --- stage 1 ----------------------------------------------------------------------------------------
class LMLoss(Protocol):
    def __call__(self, model: Any, ids: Tensor, mask: Tensor, loss_mask: Tensor) -> Tensor:
        """Stage 1's objective on a batch: next-token cross-entropy over the target tokens."""


# --- the run around the PPO step: its held-out evaluation, its resume ----------------------------
class Evaluate(Protocol):
    def __call__(self, state: Any, world: Any, prompts: list[str], response_length: int, temperature: float,
                 streams: RowStreams) -> dict[str, float]:
        """The held-out metrics of the state's policy as it is now."""


class Restore(Protocol):
    def __call__(self, directory: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                 controller: Any) -> Any:
        """Everything a checkpoint holds, put back in place; where the resumed run picks up."""


# --- reward and data --------------------------------------------------------------------------------
class Score(Protocol):
    def __call__(self, model: Any, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        """The reward model's score of each row."""


class RewardTransform(Protocol):
    def __call__(self, raw: Tensor, mean: float, std: float, normalize: bool) -> Tensor:
        """The score PPO is paid."""


class Prompts(Protocol):
    def __call__(self, world: Any, n: int, seed: int) -> list[str]:
        """A batch of prompts."""
