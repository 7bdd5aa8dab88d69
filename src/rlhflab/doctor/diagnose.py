"""Run every rule on a metrics table and attribute each detection to ranked causes."""

from __future__ import annotations

import json
from pathlib import Path

from rlhflab.doctor.causes import CheckupVerdict, rank_causes
from rlhflab.doctor.findings import Diagnosis, Evidence, Finding
from rlhflab.doctor.readers import read_log
from rlhflab.doctor.rules import RULES, Rule
from rlhflab.doctor.table import MetricTable
from rlhflab.runs import write_json

SEVERITY_ORDER = {"high": 0, "medium": 1, "low": 2}


def diagnose(table: MetricTable, rules: tuple[Rule, ...] = RULES,
             checkup: CheckupVerdict | None = None) -> Diagnosis:
    """Findings sorted by severity then onset; rules lacking a metric are listed as skipped."""
    diagnosis = Diagnosis(table.source, unknown_metrics=list(table.unknown))
    ppo = table.get("kl/mean") or table.get("reward/proxy_mean")
    diagnosis.steps = len(ppo) if ppo is not None else 0
    for rule in rules:
        missing = [m for m in rule.requires if table.get(m) is None]
        if missing:
            diagnosis.skipped[rule.name] = missing
            continue
        detection = rule.detect(table)
        if detection is None:
            continue
        diagnosis.findings.append(Finding(
            rule.name, rule.symptom, detection.severity, detection.title, detection.onset_step,
            detection.evidence, tuple(rank_causes(rule.name, table, checkup)),
        ))
    diagnosis.findings.extend(checkup_findings(table, checkup))
    diagnosis.findings.sort(key=lambda f: (SEVERITY_ORDER[f.severity], f.onset_step))
    return diagnosis


CHECKUP_RULE = "checkup_probe_failed"


def checkup_findings(table: MetricTable, checkup: CheckupVerdict | None) -> list[Finding]:
    """A finding for failed checkup probes: a probe that fails has caught a bug in its
    component whether or not training has shown a symptom yet. The components are ranked
    as for any finding, the most specific failed probe's first."""
    if checkup is None or not checkup.failed:
        return []
    evidence = []
    for probe in checkup.failed:
        record = checkup.records.get(probe, {})
        evidence.append(Evidence(f"checkup/{probe}", 0, {"measured": record.get("measured", float("nan"))},
                                 f"{record.get('detail', probe)} {record.get('tolerance', '')}".strip(),
                                 "rlhflab checkup (doctor/probes.py)"))
    title = f"checkup: {len(evidence)} probe(s) failed ({', '.join(checkup.failed)})"
    return [Finding(CHECKUP_RULE, "component_bug", "high", title, 0, tuple(evidence),
                    tuple(rank_causes(CHECKUP_RULE, table, checkup)))]


def read_checkup(run_dir: Path) -> CheckupVerdict | None:
    """A run's checkup results (`checkup.json`), or None when it has none."""
    path = Path(run_dir) / "checkup.json"
    if not path.is_file():
        return None
    return CheckupVerdict.from_probes(json.loads(path.read_text()).get("probes", []))


def diagnose_path(path: Path, mapping: dict[str, str] | None = None) -> Diagnosis:
    table = read_log(Path(path), mapping)
    return diagnose(table, checkup=read_checkup(Path(path)) if Path(path).is_dir() else None)


def write_diagnosis(diagnosis: Diagnosis, path: Path) -> None:
    write_json(Path(path), diagnosis.to_json())
