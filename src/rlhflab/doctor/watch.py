"""The doctor on a run that is still going: diagnose the metrics so far, again and again,
and tell each finding once (again only if it grows more severe), and whether one of the
rules the user stops on has fired (the names and meaning of `ppo.stop_on`). Shared by the
transformers callback (`rlhflab.integrations`) and `rlhflab doctor --follow`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from rlhflab.doctor.diagnose import SEVERITY_ORDER, diagnose
from rlhflab.doctor.findings import Diagnosis, Finding
from rlhflab.doctor.rules import rule_names
from rlhflab.doctor.table import MetricTable


def stop_rules(names: Iterable[str] | str) -> frozenset[str]:
    """The rules to stop on; an unknown name is a ValueError (`rules.rule_names`)."""
    return frozenset(rule_names(names))


@dataclass
class Watch:
    stop_on: frozenset[str] = frozenset()
    told: dict[str, str] = field(default_factory=dict)  # rule -> the severity it was last told at
    diagnosis: Diagnosis | None = None
    stopped_by: Finding | None = None

    def check(self, table: MetricTable) -> list[Finding]:
        """Diagnose `table`; the findings not told before (or now more severe), in the
        diagnosis's order. The first of them that `stops` on `stop_on` stops the run."""
        self.diagnosis = diagnose(table)
        # SEVERITY_ORDER ranks high first (0): more severe is a smaller number.
        new = [f for f in self.diagnosis.findings
               if f.rule not in self.told or SEVERITY_ORDER[f.severity] < SEVERITY_ORDER[self.told[f.rule]]]
        for finding in new:
            self.told[finding.rule] = finding.severity
            if self.stopped_by is None and finding.stops(self.stop_on):
                self.stopped_by = finding
        return new


def finding_line(finding: Finding) -> str:
    """One console line for a finding: its severity, rule, onset and title, and its first cause."""
    cause = finding.causes[0].component if finding.causes else "unknown"
    return (f"rlhflab doctor: [{finding.severity}] {finding.rule} at step {finding.onset_step}: "
            f"{finding.title} (likely cause: {cause})")
