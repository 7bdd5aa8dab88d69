"""Run every rule on a metrics table and attribute each detection to ranked causes."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Callable

from rlhflab.doctor.causes import CheckupVerdict, rank_causes
from rlhflab.doctor.findings import FAMILIES, Coverage, Diagnosis, Evidence, Finding
from rlhflab.doctor.formats import UserMapping, read_log, render_fix, verify_command
from rlhflab.doctor.formats.rlhflab import read_checkup
from rlhflab.doctor.rules import RULES, Rule
from rlhflab.doctor.table import MetricTable
from rlhflab.doctor.truth import RatedTruth, attach_truth
from rlhflab.runs import write_json

SEVERITY_ORDER = {"high": 0, "medium": 1, "low": 2}
# Failed checkup probes are a finding of their own (not a rule over the metrics): a probe
# that fails has caught a bug in its component whether or not training shows a symptom.
CHECKUP_RULE = "checkup_probe_failed"


def diagnose(table: MetricTable, rules: tuple[Rule, ...] = RULES,
             checkup: CheckupVerdict | None = None) -> Diagnosis:
    """Findings sorted by severity then onset; rules lacking a metric are listed as skipped."""
    diagnosis = Diagnosis(table.source, unknown_metrics=list(table.unknown), notes=list(table.notes),
                          trainer=table.settings.trainer, format=table.format, vocabulary=dict(table.vocabulary),
                          verifiable=table.verifiable, evaluation=list(table.evaluation),
                          guesses=list(table.guesses))
    diagnosis.steps = table.steps_read
    diagnosis.coverage = coverage(table, rules)
    for rule in rules:
        missing = [m for m in rule.requires if table.get(m, any_unit=m in rule.relative) is None]
        if missing:
            diagnosis.skipped[rule.name] = missing
            continue
        detection = rule.detect(table)
        if detection is None:
            continue
        diagnosis.findings.append(Finding(
            rule.name, rule.symptom, detection.severity, detection.title, detection.onset_step,
            detection.evidence, tuple(rank_causes(rule.causes, rule.clues, table, checkup)),
        ))
    diagnosis.findings.extend(checkup_findings(table, checkup))
    diagnosis.findings.sort(key=lambda f: (SEVERITY_ORDER[f.severity], f.onset_step))
    return diagnosis


def coverage(table: MetricTable, rules: tuple[Rule, ...] = RULES) -> dict[str, Coverage]:
    """Per symptom family: checked (by which rules, on how many steps: the longest series
    they read), missing (the metrics its rules lacked), or not applicable (exploding KL
    in a run without a KL penalty that logs no KL). Rules that need no metric (NaN
    checks) check no family."""
    result: dict[str, Coverage] = {}
    for family, symptoms in FAMILIES.items():
        members = [r for r in rules if r.symptom in symptoms and r.requires]
        ran, needs = [], []
        steps = 0
        for rule in members:
            series = [table.get(m, any_unit=m in rule.relative) for m in rule.requires]
            if all(s is not None for s in series):
                ran.append(rule.name)
                steps = max(steps, max(len(s) for s in series))
            else:
                needs.extend(m for m, s in zip(rule.requires, series) if s is None and m not in needs)
        if ran:
            result[family] = Coverage("checked", steps=steps, rules=tuple(ran))
        elif family == "exploding_kl" and table.settings.kl_coef == 0:
            result[family] = Coverage("not_applicable", reason="no KL penalty (KL coefficient 0), and no KL logged")
        else:
            result[family] = Coverage("missing", needs=tuple(needs))
    return result


def checkup_findings(table: MetricTable, checkup: CheckupVerdict | None) -> list[Finding]:
    """A finding for failed checkup probes; the components are ranked as for any finding,
    the most specific failed probe's first."""
    if checkup is None or not checkup.failed:
        return []
    evidence = []
    for probe in checkup.failed:
        record = checkup.records.get(probe, {})
        state = f" (in the {record['state']} state)" if record.get("state") else ""
        upstream = checkup.upstream(probe)
        state += f"; may follow from {' and '.join(upstream)}, whose output it reads" if upstream else ""
        evidence.append(Evidence(f"checkup/{probe}", 0, {"measured": record.get("measured", float("nan"))},
                                 f"{record.get('detail', probe)} {record.get('tolerance', '')}".strip() + state,
                                 "rlhflab checkup (rlhflab/checkup/)"))
    title = f"checkup: {len(evidence)} probe(s) failed ({', '.join(checkup.failed)})"
    return [Finding(CHECKUP_RULE, "component_bug", "high", title, 0, tuple(evidence),
                    tuple(rank_causes((), (), table, checkup)))]


def read_and_diagnose(path: Path, mapping: UserMapping | None = None, format_name: str | None = None,
                      samples: Path | None = None,
                      truth: Callable[[MetricTable], RatedTruth | None] | None = None,
                      run: int | None = None) -> tuple[MetricTable, Diagnosis]:
    """Read a log (its format detected, or forced) and its samples (`samples`, or those
    found beside it) and diagnose it, with the run's checkup when it is a run directory
    that has one: the table (for a report) and the diagnosis. `truth`, given the table,
    returns a rated truth to read as its gold (doctor/truth.py), or None. `run` picks one run
    of a console holding several (1-based; the last by default)."""
    table = read_log(Path(path), mapping, format_name, samples, run=run)
    rated = truth(table) if truth is not None else None
    if rated is not None:
        attach_truth(table, rated)
    return table, diagnose(table, checkup=read_checkup(Path(path)) if Path(path).is_dir() else None)


def diagnose_path(path: Path, mapping: UserMapping | None = None, format_name: str | None = None,
                  samples: Path | None = None) -> Diagnosis:
    return read_and_diagnose(path, mapping, format_name, samples)[1]


# diagnosis.json's schema version (docs/doctor.md, "diagnosis.json"); bumped when a field
# changes meaning or goes away, not when one is added.
SCHEMA_VERSION = 2


def diagnosis_json(diagnosis: Diagnosis) -> dict:
    """`diagnosis.json`: the verdict, what could be checked, and the findings with each fix
    rendered in the log's trainer's vocabulary."""
    return {
        "schema_version": SCHEMA_VERSION,
        "source": diagnosis.source,
        "format": diagnosis.format,
        "trainer": diagnosis.trainer,
        "verdict": diagnosis.verdict,
        "exit_code": diagnosis.exit_code,
        "cannot_tell": diagnosis.cannot_tell_reason() if diagnosis.verdict == "cannot_tell" else None,
        "steps": diagnosis.steps,
        "healthy": diagnosis.healthy,
        "coverage": {family: asdict(c) for family, c in diagnosis.coverage.items()},
        "findings": [
            asdict(f) | {"fix": render_fix(diagnosis.vocabulary, f.fix), "verify": verify_command(diagnosis, f)}
            for f in diagnosis.findings
        ],
        "skipped_rules": diagnosis.skipped,
        "name_guesses": diagnosis.guesses,
        "unknown_metrics": diagnosis.unknown_metrics,
        "evaluation_metrics": diagnosis.evaluation,
        "notes": diagnosis.notes,
    }


def write_diagnosis(diagnosis: Diagnosis, path: Path) -> None:
    write_json(Path(path), diagnosis_json(diagnosis))
