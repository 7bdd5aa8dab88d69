"""`RunSettings`: what a log tells of its run's configuration.

Every format fills what its log holds (rlhflab's `config.toml`, a trainer's saved
arguments) and leaves the rest None: a rule or a cause that needs a setting the log
does not tell falls back to the metrics, or says nothing. Fixes name these fields, and
each format renders them in its own trainer's vocabulary (`formats/`).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Optional


@dataclass(frozen=True)
class RunSettings:
    trainer: str = "unknown"
    """The format that read the log (`rlhflab doctor --list-formats`)."""
    kl_coef: Optional[float] = None
    """Coefficient beta of the KL penalty (its initial value when adaptive); 0 = no penalty."""
    kl_estimator: Optional[str] = None
    """Per-token KL estimator of the penalty: k1, k2 or k3 (Schulman 2020)."""
    kl_target: Optional[float] = None
    """Target per-sequence KL of an adaptive controller (Ziegler et al. 2019); None = fixed beta."""
    kl_horizon: Optional[int] = None
    """Horizon of the adaptive controller, in episodes."""
    kl_controller: Optional[str] = None
    """"fixed" or "adaptive", where the log's configuration says which (None: not told)."""
    kl_in_reward: Optional[bool] = None
    """Whether the KL penalty is in the reward (PPO, Ziegler et al. 2019) rather than a loss
    term (GRPO's, veRL's `use_kl_loss`); None where the log does not tell."""
    clip_eps: Optional[float] = None
    """Policy ratio clip range."""
    value_clip_eps: Optional[float] = None
    """Value clip range."""
    lr: Optional[float] = None
    """Policy learning rate."""
    entropy_coef: Optional[float] = None
    """Weight of the entropy bonus in the loss."""
    batch_size: Optional[int] = None
    """Responses per update batch."""
    epochs: Optional[int] = None
    """Passes of the update over each rollout batch."""
    minibatches: Optional[int] = None
    """Optimiser steps per pass (1 with one epoch: the logged ratio is the first minibatch's)."""
    group_size: Optional[int] = None
    """Responses per prompt (GRPO/RLOO groups)."""
    response_length: Optional[int] = None
    """Maximum new tokens per response."""
    normalize_reward: Optional[bool] = None
    """Whether reward-model scores are standardised before PPO sees them."""
    missing_eos_penalty: Optional[float] = None
    """Score subtracted from responses that do not end."""
    reward_pairs: Optional[int] = None
    """Comparisons the reward model was trained on."""
    reward_epochs: Optional[int] = None
    """Passes of reward-model training over them."""
    reward_train_max: Optional[float] = None
    """The highest (standardised) score the reward model gave on its own training data."""
    importance_sampling_correction: Optional[bool] = None
    """Whether the loss weights tokens by the trainer/sampler probability ratio (truncated
    importance sampling, Yao et al. 2025) to correct for the inference engine's mismatch."""
    separate_sampler: Optional[bool] = None
    """Whether an inference engine (vLLM, SGLang) samples the rollouts rather than the
    trainer's own forward; None where the log does not tell."""
    has_gold: bool = False
    """Whether the log holds a gold or held-out evaluation signal (`reward/gold_mean`)."""

    @property
    def adaptive_kl(self) -> bool:
        return self.kl_target is not None


SETTING_NAMES = tuple(f.name for f in fields(RunSettings))
