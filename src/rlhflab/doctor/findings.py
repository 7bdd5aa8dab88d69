"""What the doctor says: findings with evidence, ranked causes, a fix and how to verify it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Union

Symptom = Literal["exploding_kl", "mode_collapse", "reward_hacking", "ppo_instability", "reward_model",
                  "responses", "prompt_data", "component_bug"]
Severity = Literal["high", "medium", "low"]
Component = Literal[
    "kl_control", "ppo_hyperparameters", "advantages_values", "logprob_bookkeeping",
    "reward_model", "reward_scaling", "prompt_data", "sampling",
]
SettingValue = Union[float, int, bool, str, None]


@dataclass(frozen=True)
class Evidence:
    """One metric's behaviour that made a rule fire."""

    metric: str
    onset_step: int
    observed: dict[str, float]  # e.g. {"start": 0.1, "at_onset": 21.0, "end": 90.0}
    threshold: str  # the condition, in words and numbers
    source: str  # where the threshold comes from


@dataclass(frozen=True)
class Change:
    """One setting to change: a `RunSettings` field, and the value to set when the log
    tells enough to propose one (None with direction "set" means unset), else a direction."""

    setting: str
    direction: Literal["set", "increase", "decrease"]
    value: SettingValue = None


@dataclass(frozen=True)
class Fix:
    """Setting changes that should remove the symptom, and why."""

    changes: tuple[Change, ...]
    text: str


@dataclass(frozen=True)
class Cause:
    component: Component
    explanation: str
    fix: Fix | None


@dataclass(frozen=True)
class Finding:
    rule: str  # the detector's name, also the name `ppo.stop_on` uses
    symptom: Symptom
    severity: Severity
    title: str
    onset_step: int
    evidence: tuple[Evidence, ...]
    causes: tuple[Cause, ...]  # ranked, most likely first

    @property
    def fix(self) -> Fix | None:
        return next((c.fix for c in self.causes if c.fix is not None), None)


@dataclass
class Diagnosis:
    source: str
    findings: list[Finding] = field(default_factory=list)
    skipped: dict[str, list[str]] = field(default_factory=dict)  # rule -> metrics it lacked
    unknown_metrics: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # unit conversions made, or not
    steps: int = 0
    trainer: str = "unknown"  # the format that read the log: fixes are rendered in its vocabulary

    @property
    def healthy(self) -> bool:
        return not self.findings
