"""The doctor's rules: one module per symptom family (`registry.FAMILIES`), each rule
registered once beside its detect function (`registry.py`). Importing a family registers
its rules; every family is imported here by name (a test checks none is missing), and
`registered()` orders them as FAMILIES does."""

from rlhflab.doctor.rules import (  # noqa: F401  (imported to register their rules)
    collapse,
    hacking,
    identities,
    impossible,
    kl,
    mismatch,
    responses,
    reward_model,
    update,
)
from rlhflab.doctor.rules.registry import Detection, Rule, Threshold, registered

RULES: tuple[Rule, ...] = registered()
RULE_NAMES: tuple[str, ...] = tuple(r.name for r in RULES)
BY_NAME: dict[str, Rule] = {r.name: r for r in RULES}
# Every rule's named thresholds, for code that must agree with them (the checkup's data probes).
THRESHOLDS: dict[str, Threshold] = {t.name: t for r in RULES for t in r.thresholds}


def rule_names(names) -> list[str]:
    """Rule names from a comma-separated string or a list (`ppo.stop_on`, `--stop-on`,
    `DoctorCallback(stop_on=...)`); an unknown name is a ValueError naming the known ones."""
    items = names.split(",") if isinstance(names, str) else list(names)
    if not all(isinstance(n, str) for n in items):
        raise TypeError(f"expected rule names (strings), got {items!r}")
    names = [n.strip() for n in items if n.strip()]
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        raise ValueError(f"unknown rule(s) {', '.join(unknown)}; known: {', '.join(RULE_NAMES)}")
    return names


__all__ = ["BY_NAME", "Detection", "RULES", "RULE_NAMES", "Rule", "THRESHOLDS", "Threshold", "rule_names"]
