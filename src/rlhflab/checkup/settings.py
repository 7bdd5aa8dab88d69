"""Settings against the ranges the literature supports, reported as warnings with their
sources (they do not fail the checkup: a setting outside a published range can be right
for a run, and the warning says when rlhflab's own default is such a case)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from rlhflab.config import PPOConfig
from rlhflab.doctor import Component


@dataclass(frozen=True)
class SettingReport:
    name: str
    component: Component
    setting: str
    value: float
    supported: str  # the range the source supports
    ok: bool
    source: str
    note: str = ""  # why rlhflab's default sits outside the range, when it does


@dataclass(frozen=True)
class SettingCheck:
    name: str
    component: Component
    setting: str
    low: float
    high: float
    source: str
    measure: Callable[[PPOConfig], float | None]  # None: does not apply to this config
    default_note: str = ""  # why rlhflab's default is outside [low, high], if it is

    def report(self, config: PPOConfig) -> SettingReport | None:
        value = self.measure(config)
        if value is None:
            return None
        ok = self.low <= value <= self.high
        note = self.default_note if not ok and value == self.measure(PPOConfig()) else ""
        return SettingReport(self.name, self.component, self.setting, value, f"[{self.low:g}, {self.high:g}]", ok,
                             self.source, note)


def adaptive_range(config: PPOConfig) -> float | None:
    """The factor by which an adaptive KL controller can move beta over the whole run:
    each iteration moves it by at most 0.2 x batch / horizon (Ziegler et al. 2019, sec. 2.2)."""
    if config.kl_target is None:
        return None
    return math.exp(min(50.0, 0.2 * config.iterations * config.batch_size / config.kl_horizon))


SETTINGS: tuple[SettingCheck, ...] = (
    SettingCheck("clip_range", "ppo_hyperparameters", "ppo.clip_eps", 0.1, 0.3,
                 "Schulman et al. 2017 sec. 6.1 compare 0.1, 0.2 and 0.3 (0.2 best); lm-human-preferences and "
                 "TRL's PPO use 0.2", lambda c: c.clip_eps),
    SettingCheck("value_clip_range", "advantages_values", "ppo.value_clip_eps", 0.1, 0.3,
                 "lm-human-preferences' cliprange_value and TRL's PPO use 0.2 on standardised rewards (Huang et al. "
                 "2022, detail 9); with unstandardised rewards the range scales with them", lambda c: c.value_clip_eps),
    SettingCheck("discount", "advantages_values", "ppo.gamma", 0.99, 1.0,
                 "Ziegler et al. 2019 and Stiennon et al. 2020 use gamma = 1: the score arrives at the last token, "
                 "and a lower gamma discounts it for every earlier one", lambda c: c.gamma),
    SettingCheck("gae_lambda", "advantages_values", "ppo.lam", 0.9, 1.0,
                 "Schulman et al. 2016 find 0.92-0.99 best; lm-human-preferences and TRL's PPO use 0.95",
                 lambda c: c.lam),
    SettingCheck("epochs_per_batch", "ppo_hyperparameters", "ppo.epochs", 1, 4,
                 "lm-human-preferences (noptepochs) and TRL's PPO (num_ppo_epochs) use 4 passes over a rollout "
                 "batch; more push the ratio out of the clip range", lambda c: c.epochs),
    SettingCheck("entropy_bonus", "ppo_hyperparameters", "ppo.entropy_coef", 0.0, 0.01,
                 "Schulman et al. 2017 eq. 9 add +c2 x entropy with c2 = 0.01 (Atari); lm-human-preferences and "
                 "TRL's PPO use none; a negative coefficient rewards collapse", lambda c: c.entropy_coef),
    SettingCheck("kl_coefficient", "kl_control", "ppo.kl_coef", 0.01, 0.15,
                 "fixed or initial beta per nat: Ouyang et al. 2022 0.02, Stiennon et al. 2020 0.05, TRL's PPO "
                 "0.05, Ziegler et al. 2019 0.1-0.15", lambda c: c.kl_coef,
                 default_note="rlhflab's 0.2 holds the demo's 32-token responses to its stage-1 model against a "
                              "standardised reward; the pipeline targets (docs/benchmarks.md) are measured with it"),
    SettingCheck("kl_controller_reach", "kl_control", "ppo.kl_horizon", 2.0, math.inf,
                 "the factor by which the adaptive controller can move beta over the run "
                 "(exp(0.2 x episodes / horizon), Ziegler et al. 2019 sec. 2.2): below 2 it cannot correct an "
                 "initial beta 2x off; their horizon of 10000 episodes suits runs of 10^5 episodes and more",
                 adaptive_range),
)


def check_settings(config: PPOConfig) -> list[SettingReport]:
    return [r for r in (check.report(config) for check in SETTINGS) if r is not None]
