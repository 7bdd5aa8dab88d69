"""What the doctor says: findings with evidence, ranked causes, a fix and how to verify it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Union

Symptom = Literal["exploding_kl", "mode_collapse", "reward_hacking", "ppo_instability", "reward_model",
                  "responses", "prompt_data", "component_bug"]
Severity = Literal["high", "medium", "low"]
Component = Literal[
    "kl_control", "ppo_hyperparameters", "advantages_values", "logprob_bookkeeping",
    "reward_model", "reward_scaling", "prompt_data", "sampling", "evaluation", "stage1", "checkpointing",
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
    in_place: tuple[str, ...] = ()
    """Changes of its fix the run already has ("normalize_reward=True"): not proposed again."""


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

    def stops(self, rules: "frozenset[str] | set[str]") -> bool:
        """Whether this finding stops a run told to stop on `rules` (`ppo.stop_on`,
        `--stop-on`, `DoctorCallback(stop_on=...)`): one of those rules, at medium or high
        severity (a low one is a note: the doctor still calls the run healthy)."""
        return self.rule in rules and self.severity != "low"


# The symptom families the doctor's coverage is stated for, and the rule symptoms each holds.
FAMILIES: dict[str, tuple[str, ...]] = {
    "exploding_kl": ("exploding_kl",),
    "mode_collapse": ("mode_collapse",),
    "reward_hacking": ("reward_hacking",),
    "update_health": ("ppo_instability",),
}
# A diagnosis says "no finding" only when it read this many steps and checked this many families.
MIN_STEPS = 10
MIN_FAMILIES = 2
EXIT_CODES = {"finding": 1, "no_finding": 0, "cannot_tell": 3}


@dataclass(frozen=True)
class Coverage:
    """What the doctor could check for one symptom family: `checked` (on `steps` steps, by
    `rules`), `missing` (the metrics it would need) or `not_applicable` (and why)."""

    status: Literal["checked", "missing", "not_applicable"]
    steps: int = 0
    rules: tuple[str, ...] = ()
    needs: tuple[str, ...] = ()
    reason: str = ""

    @property
    def detail(self) -> str:
        """The rules that checked the family, or why it was not checked."""
        if self.status == "checked":
            return ", ".join(self.rules)
        return self.reason or "needs " + " or ".join(self.needs)


@dataclass
class Diagnosis:
    source: str
    findings: list[Finding] = field(default_factory=list)
    skipped: dict[str, list[str]] = field(default_factory=dict)  # rule -> metrics it lacked
    unknown_metrics: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # unit conversions made, or not
    steps: int = 0  # distinct training steps at which an understood metric was read
    trainer: str = "unknown"  # the dialect that read the log
    format: str = ""  # the container that was read
    vocabulary: dict[str, str] = field(default_factory=dict)  # fixes in the trainer's own keys
    verifiable: bool = False  # `rlhflab verify` can rerun the run
    coverage: dict[str, Coverage] = field(default_factory=dict)  # symptom family -> what could be checked
    evaluation: list[str] = field(default_factory=list)  # evaluation series, kept apart
    guesses: list[dict] = field(default_factory=list)  # names read by spelling: name, taken_for, why

    @property
    def healthy(self) -> bool:
        """No finding of medium or high severity (low ones are notes)."""
        return not any(f.severity in ("high", "medium") for f in self.findings)

    @property
    def families_checked(self) -> list[str]:
        return [name for name, c in self.coverage.items() if c.status == "checked"]

    @property
    def verdict(self) -> Literal["finding", "no_finding", "cannot_tell"]:
        """`finding` for any finding of medium or high severity, whatever the coverage;
        `no_finding` when enough was read to say so; else `cannot_tell`."""
        if not self.healthy:
            return "finding"
        if self.steps >= MIN_STEPS and len(self.families_checked) >= MIN_FAMILIES:
            return "no_finding"
        return "cannot_tell"

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.verdict]

    def cannot_tell_reason(self) -> str:
        """What the log would need to hold for a verdict."""
        wanted = []
        if self.steps < MIN_STEPS:
            wanted.append(f"at least {MIN_STEPS} steps (read {self.steps})")
        checked = self.families_checked
        if len(checked) < MIN_FAMILIES:
            missing = {name: c.needs for name, c in self.coverage.items() if c.status == "missing"}
            needs = "; ".join(f"{name}: {' or '.join(needs)}" for name, needs in missing.items() if needs)
            wanted.append(f"at least {MIN_FAMILIES} symptom families checked (checked {len(checked)}"
                          + (f": {', '.join(checked)}" if checked else "") + ")"
                          + (f"; metrics that would add one: {needs}" if needs else ""))
        return "; ".join(wanted)
