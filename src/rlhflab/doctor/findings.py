"""What the doctor says: findings with evidence, ranked causes, a fix and how to verify it."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Literal

Symptom = Literal["exploding_kl", "mode_collapse", "reward_hacking", "ppo_instability", "reward_model",
                  "responses", "prompt_data", "component_bug"]
Severity = Literal["high", "medium", "low"]
Component = Literal[
    "kl_control", "ppo_hyperparameters", "advantages_values", "logprob_bookkeeping",
    "reward_model", "reward_scaling", "prompt_data", "sampling",
]


@dataclass(frozen=True)
class Evidence:
    """One metric's behaviour that made a rule fire."""

    metric: str
    onset_step: int
    observed: dict[str, float]  # e.g. {"start": 0.1, "at_onset": 21.0, "end": 90.0}
    threshold: str  # the condition, in words and numbers
    source: str  # where the threshold comes from


@dataclass(frozen=True)
class Fix:
    """A config change that should remove the symptom, and why."""

    overrides: dict[str, str]  # dotted keys -> values, as on the command line
    text: str

    def arguments(self) -> str:
        return " ".join(f"--fix {k}={v}" for k, v in self.overrides.items())


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

    def verify_command(self, run: str) -> str:
        fix = self.fix
        if fix is None:
            return f"rlhflab checkup {run}"
        return f"rlhflab verify {run} {fix.arguments()}"


@dataclass
class Diagnosis:
    source: str
    findings: list[Finding] = field(default_factory=list)
    skipped: dict[str, list[str]] = field(default_factory=dict)  # rule -> metrics it lacked
    unknown_metrics: list[str] = field(default_factory=list)
    steps: int = 0

    @property
    def healthy(self) -> bool:
        return not self.findings

    def to_json(self) -> dict:
        return {
            "source": self.source,
            "steps": self.steps,
            "healthy": self.healthy,
            "findings": [
                asdict(f) | {"fix": asdict(f.fix) if f.fix else None, "verify": f.verify_command(self.source)}
                for f in self.findings
            ],
            "skipped_rules": self.skipped,
            "unknown_metrics": self.unknown_metrics,
        }
