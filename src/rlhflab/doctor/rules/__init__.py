"""The doctor's rules: one module per symptom family, each rule registered once beside its
detect function (`registry.py`). Importing this package registers them all."""

from rlhflab.doctor.rules import collapse, hacking, kl, responses, reward_model, update  # noqa: F401  (registers)
from rlhflab.doctor.rules.registry import Detection, Rule, Threshold, registered

RULES: tuple[Rule, ...] = registered()
RULE_NAMES: tuple[str, ...] = tuple(r.name for r in RULES)
BY_NAME: dict[str, Rule] = {r.name: r for r in RULES}

__all__ = ["BY_NAME", "Detection", "RULES", "RULE_NAMES", "Rule", "Threshold"]
