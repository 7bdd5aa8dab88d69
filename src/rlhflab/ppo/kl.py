"""KL(pi || ref) estimators and the KL-coefficient controllers.

Estimators: Schulman (2020), "Approximating KL Divergence",
http://joschu.net/blog/kl-approx.html. With samples y ~ pi and
``log_ratio = log pi(y) - log ref(y)``:

- k1 = log_ratio                          unbiased, high variance, can be negative
- k2 = 0.5 * log_ratio^2                  biased (low bias when pi ~ ref), low variance, >= 0
- k3 = exp(-log_ratio) - 1 + log_ratio    unbiased (E_pi[ref/pi] = 1), low variance, >= 0

Controllers: Ziegler et al. (2019), "Fine-Tuning Language Models from Human
Preferences", sec. 2.2, as in OpenAI lm-human-preferences
``lm_human_preferences/train_policy.py`` (``FixedKLController``,
``AdaptiveKLController``). Deviations: ``value`` is a read-only property (it changes
only through ``update`` / ``load_state_dict``), and both controllers have
``state_dict`` / ``load_state_dict`` for resumable checkpoints.
"""

from __future__ import annotations

import math
from typing import Literal, Protocol, runtime_checkable

import torch
from torch import Tensor

__all__ = [
    "KLEstimator",
    "kl_estimate",
    "KLController",
    "FixedKLController",
    "AdaptiveKLController",
]

KLEstimator = Literal["k1", "k2", "k3"]


def kl_estimate(logprobs: Tensor, ref_logprobs: Tensor, kind: KLEstimator = "k1") -> Tensor:
    """Per-token estimate of KL(pi || ref) from tokens sampled from pi.

    Schulman (2020), http://joschu.net/blog/kl-approx.html. Summing k1 or k3 over
    the tokens of a response gives an unbiased estimate of the sequence-level KL.
    Elementwise: masking is the caller's job (see ``advantages.shape_rewards``).

    Args:
        logprobs: (B, T) log pi(y_t | x, y_<t) of the sampled tokens.
        ref_logprobs: (B, T) log ref(y_t | x, y_<t) of the same tokens.
        kind: "k1", "k2" or "k3".

    Returns:
        (B, T) per-token estimates.
    """
    log_ratio = logprobs - ref_logprobs  # log(pi / ref)
    if kind == "k1":
        # k1 = log(pi/ref)
        return log_ratio
    if kind == "k2":
        # k2 = 0.5 * log(pi/ref)^2
        return 0.5 * log_ratio.square()
    if kind == "k3":
        # k3 = (r - 1) - log r, with r = ref/pi = exp(-log_ratio)
        # expm1 keeps precision when r ~ 1; the exact value is >= 0, the clamp only
        # removes rounding noise of order 1 ulp at |log_ratio| ~ 1e-8.
        return (torch.expm1(-log_ratio) + log_ratio).clamp_min(0.0)
    raise ValueError(f"unknown KL estimator {kind!r}; expected 'k1', 'k2' or 'k3'")


@runtime_checkable
class KLController(Protocol):
    """Anything that supplies the KL coefficient beta and adapts it after a step."""

    @property
    def value(self) -> float:
        """The current KL coefficient beta."""
        ...

    def update(self, current_kl: float, n_steps: int) -> None:
        """Adapt beta after an iteration that observed ``current_kl`` on ``n_steps`` episodes."""
        ...

    def state_dict(self) -> dict[str, float]:
        """What a checkpoint must store to resume."""
        ...

    def load_state_dict(self, state: dict[str, float]) -> None:
        """Restore from ``state_dict()``."""
        ...


class FixedKLController:
    """Constant KL coefficient (lm-human-preferences ``FixedKLController``).

    Args:
        kl_coef: beta, the weight of the per-token KL penalty in the reward.
    """

    def __init__(self, kl_coef: float) -> None:
        if kl_coef < 0:
            raise ValueError(f"kl_coef must be >= 0, got {kl_coef}")
        self._value = float(kl_coef)

    @property
    def value(self) -> float:
        return self._value

    def update(self, current_kl: float, n_steps: int) -> None:
        """No-op: the coefficient is fixed."""

    def state_dict(self) -> dict[str, float]:
        return {"value": self._value}

    def load_state_dict(self, state: dict[str, float]) -> None:
        self._value = float(state["value"])

    def __repr__(self) -> str:
        return f"FixedKLController(kl_coef={self._value})"


class AdaptiveKLController:
    """Proportional controller that steers the observed KL towards ``target``.

    Ziegler et al. (2019) sec. 2.2 (lm-human-preferences ``AdaptiveKLController``):

        e_t      = clip(KL_t / KL_target - 1, -0.2, 0.2)
        beta_t+1 = beta_t * (1 + K_beta * e_t),   K_beta = n_steps / horizon

    so beta rises when the policy drifts further than the target and falls when it
    stays closer; the clip bounds the change to 20% of a full-horizon step.

    Args:
        init_kl_coef: beta at step 0 (lm-human-preferences default 0.2).
        target: the desired KL, in the same units as ``current_kl`` passed to
            ``update`` (rlhflab passes ``kl/mean``: per-sequence sum of k1, batch mean).
        horizon: episodes over which the controller closes the gap (lm-human-preferences
            default 10000); with ``n_steps`` = batch size, the per-update gain is
            batch_size / horizon.
    """

    ERROR_CLIP = 0.2

    def __init__(self, init_kl_coef: float, target: float, horizon: float) -> None:
        if init_kl_coef < 0:
            raise ValueError(f"init_kl_coef must be >= 0, got {init_kl_coef}")
        if target <= 0:
            raise ValueError(f"target must be > 0, got {target}")
        if horizon <= 0:
            raise ValueError(f"horizon must be > 0, got {horizon}")
        self._value = float(init_kl_coef)
        self.target = float(target)
        self.horizon = float(horizon)

    @property
    def value(self) -> float:
        return self._value

    def update(self, current_kl: float, n_steps: int) -> None:
        """Move beta towards the value that keeps ``current_kl`` at the target.

        Args:
            current_kl: observed KL of the last iteration (python float).
            n_steps: episodes (sequences) in that iteration.

        A nan ``current_kl`` leaves beta unchanged (the nan is already visible in the
        logged ``kl/mean``; a nan beta would poison every later reward). An infinite
        one is clipped like any other large error.
        """
        if math.isnan(current_kl):
            return
        # proportional_error = clip(KL / target - 1, -0.2, 0.2)
        proportional_error = min(max(current_kl / self.target - 1.0, -self.ERROR_CLIP), self.ERROR_CLIP)
        # beta <- beta * (1 + proportional_error * n_steps / horizon)
        self._value *= 1.0 + proportional_error * n_steps / self.horizon

    def state_dict(self) -> dict[str, float]:
        # target and horizon are config, not state: a resumed run may change them.
        return {"value": self._value}

    def load_state_dict(self, state: dict[str, float]) -> None:
        self._value = float(state["value"])

    def __repr__(self) -> str:
        return (
            f"AdaptiveKLController(value={self._value}, target={self.target}, "
            f"horizon={self.horizon})"
        )
