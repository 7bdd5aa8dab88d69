"""The doctor's rules: one module per symptom family (`registry.FAMILIES`), each rule
registered once beside its detect function (`registry.py`). Importing this package
imports every family, which registers its rules."""

from importlib import import_module

from rlhflab.doctor.rules.registry import FAMILIES, Detection, Rule, Threshold, registered

for _family in FAMILIES:
    import_module(f"{__name__}.{_family}")

RULES: tuple[Rule, ...] = registered()
RULE_NAMES: tuple[str, ...] = tuple(r.name for r in RULES)
BY_NAME: dict[str, Rule] = {r.name: r for r in RULES}


def rule_names(names) -> list[str]:
    """Rule names from a comma-separated string or a list (`ppo.stop_on`, `--stop-on`,
    `DoctorCallback(stop_on=...)`); an unknown name is a ValueError naming the known ones."""
    names = [n.strip() for n in (names.split(",") if isinstance(names, str) else names) if n.strip()]
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        raise ValueError(f"unknown rule(s) {', '.join(unknown)}; known: {', '.join(RULE_NAMES)}")
    return names


__all__ = ["BY_NAME", "Detection", "RULES", "RULE_NAMES", "Rule", "Threshold", "rule_names"]
