"""Run every rule on a metrics table and attribute each detection to ranked causes."""

from __future__ import annotations

import json
from pathlib import Path

from rlhflab.doctor.causes import rank_causes
from rlhflab.doctor.findings import Diagnosis, Finding
from rlhflab.doctor.readers import read_log
from rlhflab.doctor.rules import RULES, Rule
from rlhflab.doctor.table import MetricTable
from rlhflab.runs import write_json

SEVERITY_ORDER = {"high": 0, "medium": 1, "low": 2}


def diagnose(table: MetricTable, rules: tuple[Rule, ...] = RULES,
             failed_probes: dict[str, str] | None = None) -> Diagnosis:
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
            detection.evidence, tuple(rank_causes(rule.name, table, failed_probes)),
        ))
    diagnosis.findings.sort(key=lambda f: (SEVERITY_ORDER[f.severity], f.onset_step))
    return diagnosis


def checkup_failures(run_dir: Path) -> dict[str, str]:
    """Failed probes of a run's checkup (`checkup.json`), as probe -> component."""
    path = Path(run_dir) / "checkup.json"
    if not path.is_file():
        return {}
    results = json.loads(path.read_text())
    return {p["name"]: p["component"] for p in results.get("probes", []) if not p["passed"]}


def diagnose_path(path: Path, mapping: dict[str, str] | None = None) -> Diagnosis:
    table = read_log(Path(path), mapping)
    failed = checkup_failures(Path(path)) if Path(path).is_dir() else {}
    return diagnose(table, failed_probes=failed)


def write_diagnosis(diagnosis: Diagnosis, path: Path) -> None:
    write_json(Path(path), diagnosis.to_json())
