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

__all__ = ["BY_NAME", "Detection", "RULES", "RULE_NAMES", "Rule", "Threshold"]
