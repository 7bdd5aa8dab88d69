"""The replaceable parts of the RLHF pipeline, in one structure with the correct
implementations as defaults. A fault (`rlhflab.faults`) is a documented, deliberately
wrong replacement for exactly one field, so the main code never branches on a fault."""

from __future__ import annotations

import importlib
from contextlib import contextmanager
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Callable, Iterator

import torch
from torch import Tensor

from rlhflab.checkpoint import load_checkpoint
from rlhflab.config import ConfigError, PipelineConfig, PPOConfig
from rlhflab.data.batching import join_prompt_response, length_grouped_batches
from rlhflab.engines import clip_grad_norm
from rlhflab.models.bradley_terry import bt_loss, pair_scores
from rlhflab.models.forward import response_logits
from rlhflab.models.lm import load_causal_lm
from rlhflab.models.lm_loss import lm_loss
from rlhflab.models.lora import AdaptersOff, is_adapted
from rlhflab.models.optim import warmup_linear_decay
from rlhflab.models.reward_model import score_sequences
from rlhflab.models.sampling import sample_responses
from rlhflab.ppo import advantages, losses, seams
from rlhflab.ppo.kl import AdaptiveKLController, FixedKLController, KLController


def kl_controller_from_config(config: PPOConfig) -> KLController:
    """Adaptive (Ziegler et al. 2019) when a target is set, otherwise fixed."""
    if config.kl_target is not None:
        return AdaptiveKLController(config.kl_coef, config.kl_target, config.kl_horizon)
    return FixedKLController(config.kl_coef)


def load_reference(stage1_dir: Path, policy_lm: torch.nn.Module) -> torch.nn.Module:
    """A separate, frozen copy of the stage-1 model (shares nothing with the policy); under
    LoRA, the policy with its adapters off, whose frozen base is the stage-1 model."""
    if is_adapted(policy_lm):
        return AdaptersOff(policy_lm)
    return load_causal_lm(stage1_dir).eval().requires_grad_(False)


def standardise(raw: Tensor, mean: float, std: float, normalize: bool) -> Tensor:
    """Reward-model scores to zero mean, unit std on the RM's training distribution."""
    return (raw - mean) / std if normalize else raw


def keep_mask(mask: Tensor) -> Tensor:
    """The response mask as sampled: True up to and including the first EOS."""
    return mask


@contextmanager
def eval_mode(model: torch.nn.Module) -> Iterator[None]:
    """Forwards that record rollout logprobs run with dropout off."""
    model.eval()
    yield


def world_prompts(world, n: int, seed: int) -> list[str]:
    return world.prompts(n, seed)


def kl_to_reference(metrics: dict[str, float]) -> float:
    """What the KL controller is told: the batch mean of the per-sequence KL to the
    reference (Ziegler et al. 2019 sec. 2.2 control the KL of the whole response)."""
    return metrics["kl/mean"]


def shuffled_minibatches(batch: int, minibatches: int, epochs: int, generator: torch.Generator) -> list[Tensor]:
    """The update's schedule: every epoch a fresh permutation of the batch, split into
    `minibatches` equal parts (each epoch visits every sample once, in a new order)."""
    size = batch // minibatches
    schedule = []
    for _ in range(epochs):
        order = torch.randperm(batch, generator=generator)
        schedule.extend(order[start : start + size] for start in range(0, batch, size))
    return schedule


def gradient_step(optimizer: torch.optim.Optimizer, parameters, loss: Tensor, max_grad_norm: float) -> Tensor:
    """One optimiser step on `loss`: gradients from zero (none left from an earlier step),
    clipped to `max_grad_norm` in global norm before the step, and no step at all when they
    are not finite: a NaN or Inf (from a reward, an advantage or an overflow) would poison
    the weights and Adam's moments for good. Returns the norm before clipping."""
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    grad_norm = clip_grad_norm(parameters, max_grad_norm)
    if torch.isfinite(grad_norm):
        optimizer.step()
    return grad_norm


def first_for_training(n_train: int, n_val: int) -> tuple[Tensor, Tensor]:
    """The first `n_train` labelled comparisons train the reward model, the next `n_val`
    (other prompts) hold it out."""
    return torch.arange(n_train), torch.arange(n_train, n_train + n_val)


def evaluate_held_out(state, world, prompts: list[str], response_length: int, temperature: float, streams):
    """The held-out evaluation (`ppo.evaluation.evaluate_policy`)."""
    from rlhflab.ppo.evaluation import evaluate_policy  # it samples through ppo.samplers, which reads this module

    return evaluate_policy(state, world, prompts, response_length, temperature, streams)


def _stage(name: str, default: Callable):
    """A component used first in stage `name` (a rerun that swaps it starts there)."""
    return field(default=default, metadata={"stage": name})


@dataclass(frozen=True)
class PPOComponents:
    """One field per component; see docs/implementation_details.md for each default."""

    # Advantage and loss math.
    shape_rewards: seams.ShapeRewards = advantages.shape_rewards
    gae: seams.Gae = advantages.gae
    whiten: seams.Whiten = advantages.whiten
    policy_loss: seams.PolicyLoss = losses.policy_loss
    value_loss: seams.ValueLoss = losses.value_loss
    # KL control.
    make_kl_controller: seams.MakeKLController = kl_controller_from_config
    make_reference: seams.MakeReference = load_reference
    kl_signal: seams.KLSignal = kl_to_reference
    # Logprob bookkeeping and sampling.
    sample: seams.Sample = sample_responses
    response_logits: seams.ResponseLogits = response_logits
    response_mask: seams.ResponseMask = keep_mask
    rollout_mode: seams.RolloutMode = eval_mode
    # The update's mechanics: its schedule of minibatches, each optimiser step, the entropy it reports.
    minibatch_schedule: seams.MinibatchSchedule = shuffled_minibatches
    gradient_step: seams.GradientStep = gradient_step
    entropy: seams.Entropy = losses.mean_entropy
    # The reward model's training (stage 2): the rows it reads, each comparison's chosen and
    # rejected scores, the loss, and the learning rate of each step.
    comparison_rows: seams.ComparisonRows = _stage("reward", join_prompt_response)
    preference_pairs: seams.PreferencePairs = _stage("reward", pair_scores)
    preference_loss: seams.PreferenceLoss = _stage("reward", bt_loss)
    reward_lr: seams.RewardLR = _stage("reward", warmup_linear_decay)
    reward_batches: seams.RewardBatches = _stage("reward", length_grouped_batches)
    comparison_split: seams.ComparisonSplit = _stage("reward", first_for_training)
    # Stage 1's objective.
    lm_loss: seams.LMLoss = _stage("pretrain", lm_loss)
    # The run around the PPO step: the held-out evaluation of the policy, and what a resume restores.
    evaluate: seams.Evaluate = evaluate_held_out
    restore: seams.Restore = load_checkpoint
    # Reward.
    score: seams.Score = score_sequences
    reward_transform: seams.RewardTransform = standardise
    # Data.
    prompts: seams.Prompts = world_prompts


COMPONENT_NAMES = tuple(f.name for f in fields(PPOComponents))
COMPONENT_STAGES = {f.name: f.metadata.get("stage", "ppo") for f in fields(PPOComponents)}
DEFAULT = "default"  # a record's value for a component swapped back to its default


def component_path(function: Callable) -> str:
    """Where a component lives, as `module:qualname` (what config.toml records)."""
    target = function if hasattr(function, "__qualname__") else type(function)
    return f"{target.__module__}:{target.__qualname__}"


def record_components(config: PipelineConfig, components: PPOComponents) -> PipelineConfig:
    """`config` with every component the run uses written in its `[components]` record (the
    defaults too, so a later reader needs no fault name to rebuild them)."""
    record = tuple(sorted((name, component_path(getattr(components, name))) for name in COMPONENT_NAMES))
    return replace(config, components=record)


def non_default_components(config: PipelineConfig) -> dict[str, str]:
    """The recorded components that are not the defaults: field -> module:qualname."""
    defaults = PPOComponents()
    return {name: path for name, path in config.components
            if path != DEFAULT and path != component_path(getattr(defaults, name))}


def _import(name: str, path: str) -> Callable:
    module_name, _, qualname = path.partition(":")
    if "<" in qualname:
        raise ConfigError(f"components.{name} = {path!r}: defined inside a function, so it cannot be imported "
                          "again; define it at a module's top level to rerun the run")
    try:
        found = importlib.import_module(module_name)
        for part in qualname.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError) as err:
        raise ConfigError(f"components.{name} = {path!r}: cannot import it ({err})") from None
    return found


def components_from_record(record: dict[str, str], base: PPOComponents = PPOComponents()) -> PPOComponents:
    """`base` with each recorded component imported by its path ("default": the default's)."""
    unknown = sorted(set(record) - set(COMPONENT_NAMES))
    if unknown:
        raise ConfigError(f"components.{unknown[0]}: not a PPO component; known: {', '.join(COMPONENT_NAMES)}")
    defaults = PPOComponents()
    return replace(base, **{name: getattr(defaults, name) if path == DEFAULT else _import(name, path)
                            for name, path in record.items()})
