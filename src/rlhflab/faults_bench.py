"""`rlhflab faults bench`: score the doctor and the checkup on the fault zoo.

Runs the healthy pipeline (several seeds) and every fault (on the first seed, reusing the
healthy run's stages that come before the fault's component), each followed by the checkup
(with the fault's components) and the doctor (which ranks causes with the failed
probes), and writes a table to docs/faults.md: per fault, whether a finding appeared (and
whether one came from the training metrics rather than the checkup), whether the fault's
component was ranked first (by the full doctor, and from the metrics alone, as the doctor
sees another trainer's log), which probes failed, and the cost.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path

from rlhflab.checkup import run_checkup
from rlhflab.config import load_config
from rlhflab.doctor import CHECKUP_RULE, Diagnosis, RunSettings, diagnose, read_and_diagnose, write_diagnosis, write_report
from rlhflab.faults.zoo import FAULTS, Fault, components_for, with_fault
from rlhflab.pipeline import run_pipeline
from rlhflab.runs import RunDir
from rlhflab.verify import first_stage_to_rerun, rerun


@dataclass
class BenchRow:
    name: str
    component: str
    detected: bool  # a finding: a rule on the metrics, or a failed checkup probe
    symptom_in_metrics: bool  # a finding of a rule on the training metrics
    first_component: str  # ranked first by the doctor (metrics, config and checkup)
    right_component: bool
    log_only_component: str  # ranked first from the metrics alone, as for another trainer's log
    findings: list[str] = field(default_factory=list)
    failed_probes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # settings the checkup warned of, as "key=value"
    seconds: float = 0.0

    @property
    def caught_by_probes(self) -> bool:
        """A checkup probe failed: the invariant probes alone catch the fault."""
        return bool(self.failed_probes)

    @property
    def right_from_log_only(self) -> bool:
        return self.log_only_component == self.component


def _first_component(diagnosis: Diagnosis) -> str:
    return diagnosis.findings[0].causes[0].component if diagnosis.findings and diagnosis.findings[0].causes else ""


def first_stage(fault: Fault) -> str:
    """The earliest stage a fault touches: its runs reuse the healthy run's earlier stages.
    Its config keys decide, as for `verify`; code faults replace PPO components only."""
    return first_stage_to_rerun(fault.config(load_config("demo")))


TIMING_FILE = "bench.json"  # in each run: the wall time of its training, checkup and doctor


def _timed_seconds(out: Path) -> float:
    """The seconds a bench recorded when it trained the run in `out`."""
    timing = out / TIMING_FILE
    if not timing.is_file():
        raise FileNotFoundError(f"{timing}: no timed bench run to rescore; run the bench without --rescore")
    return json.loads(timing.read_text())["seconds"]


def bench_one(preset: str, seed: int, out: Path, fault: Fault | None, base: RunDir | None = None,
              rescore: bool = False) -> BenchRow:
    """One run (a fresh pipeline, or the fault's stages on top of `base`), checkup, doctor.
    With `rescore`, the run already in `out` is not trained again: only the checkup and
    the doctor run, and the row keeps the seconds timed when the run was trained."""
    start = time.perf_counter()
    config = with_fault(load_config(preset, overrides=[f"seed={seed}"]), fault.name if fault else None)
    components = components_for(config)
    run = RunDir(out)
    if rescore:
        seconds = _timed_seconds(out)
    elif base is None:
        run = run_pipeline(config, out, components, show_progress=False).run
    else:
        rerun(config, base, run, first_stage(fault), components, show_progress=False)
    checkup = run_checkup(config, run, components)
    table, diagnosis = read_and_diagnose(run.root)  # ranks with the failed probes in RUN/checkup.json
    write_diagnosis(diagnosis, run.diagnosis)
    write_report(run.root, table, diagnosis)
    table.settings = RunSettings()  # what a log from another trainer gives: the metrics, no config, no checkup
    log_only = diagnose(table)
    first = _first_component(diagnosis)
    component = fault.component if fault else "none"
    if not rescore:
        seconds = time.perf_counter() - start
        (out / TIMING_FILE).write_text(json.dumps({"seconds": seconds}) + "\n")
    return BenchRow(
        name=fault.name if fault else f"healthy (seed {seed})", component=component,
        detected=bool(diagnosis.findings),
        symptom_in_metrics=any(f.rule != CHECKUP_RULE for f in diagnosis.findings),
        first_component=first, right_component=first == component, log_only_component=_first_component(log_only),
        findings=[f.rule for f in diagnosis.findings], failed_probes=failed_probes(checkup.results),
        warnings=[f"{s.setting}={s.value:g}" for s in checkup.warnings], seconds=seconds,
    )


def failed_probes(results) -> list[str]:
    """Each failed probe once, with the states it failed in when not only the start."""
    states: dict[str, list[str]] = {}
    for r in results:
        if not r.passed and r.state not in states.setdefault(r.name, []):
            states[r.name].append(r.state)
    return [name if where == ["start"] else f"{name} ({', '.join(where)})" for name, where in states.items() if where]


CAVEAT = (
    "How to read these numbers: the checkup's probes state invariants of any correct PPO-RLHF implementation",
    "(docs/checkup.md), each tested in tests/test_checkup.py against a broken implementation written in the test,",
    "not taken from the zoo; several of them were first written with zoo faults in view, so this table is not a",
    "held-out test of them. The doctor reads the run's config for settings outside the usual range (a zero KL",
    "coefficient, a negative entropy coefficient, a clip range that never clips); the column 'from metrics alone'",
    "is the doctor without config or checkup, as it works on another trainer's log.",
    "Seconds are wall time of the run, checkup, doctor and report (faults reuse the healthy run's earlier stages);",
    "with `--rescore`, the checkup and doctor ran again on runs trained by an earlier bench, and seconds are that bench's.",
)


def render(faulty: list[BenchRow], healthy: list[BenchRow], command: str) -> str:
    n = max(1, len(faulty))
    detected = sum(r.detected for r in faulty)
    in_metrics = sum(r.symptom_in_metrics for r in faulty)
    right = sum(r.right_component for r in faulty)
    right_log = sum(r.right_from_log_only for r in faulty)
    by_probes = sum(r.caught_by_probes for r in faulty)
    usual = {w for r in healthy for w in r.warnings}
    warned = [f"{r.name} ({', '.join(w for w in r.warnings if w not in usual)})" for r in faulty
              if set(r.warnings) - usual]
    healthy_findings = sum(len(r.findings) for r in healthy)
    healthy_probes = sum(len(r.failed_probes) for r in healthy)
    lines = [
        "# The fault zoo",
        "",
        "Each fault is a deliberately wrong replacement for one component (`src/rlhflab/faults/zoo.py`);",
        "`rlhflab pipeline --fault NAME` runs the pipeline with it, `rlhflab faults show NAME` prints it.",
        "",
        "| fault | component | replaces | models | expected symptom |",
        "|---|---|---|---|---|",
        *[f"| `{f.name}` | {f.component} | {f.replaces} | {f.reproduces} | {f.symptom} |" for f in FAULTS],
        "",
        "## Scored",
        "",
        f"Command: `{command}`. Measured on a 2-core CPU.",
        "",
        f"- faults detected (a finding on the metrics or a failed checkup probe): {detected}/{len(faulty)} "
        "(target: all)",
        f"- of which with a symptom in the training metrics: {in_metrics}/{len(faulty)}",
        f"- right component ranked first: {right}/{len(faulty)} = {right / n:.0%} (target: >= 80%)",
        f"- right component ranked first from the metrics alone (no config, no checkup, as for another "
        f"trainer's log): {right_log}/{len(faulty)} = {right_log / n:.0%}",
        f"- caught by the checkup's invariant probes alone (a failed probe, whatever the metrics show): "
        f"{by_probes}/{len(faulty)}; not: {', '.join(r.name for r in faulty if not r.caught_by_probes) or 'none'}",
        f"- settings the checkup warns of beyond the healthy runs' ({', '.join(sorted(usual)) or 'none'}): "
        f"{'; '.join(warned) or 'none'}",
        f"- findings on healthy runs: {healthy_findings} over {len(healthy)} seeds, failed probes: {healthy_probes} "
        "(target: 0)",
        f"- not detected: {', '.join(r.name for r in faulty if not r.detected) or 'none'}; "
        "detected by the checkup only: "
        f"{', '.join(r.name for r in faulty if r.detected and not r.symptom_in_metrics) or 'none'}; "
        f"wrong component first: {', '.join(r.name for r in faulty if r.detected and not r.right_component) or 'none'}",
        "",
        *CAVEAT,
        "",
        "| fault | component | detected | symptom in metrics | ranked first | from metrics alone | findings "
        "| failed probes | seconds |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    yes = lambda flag: "yes" if flag else "no"  # noqa: E731
    for r in healthy + faulty:
        mark = lambda component, right: f"{component or '-'}{' (right)' if right else ''}"  # noqa: E731
        lines.append(
            f"| {r.name} | {r.component} | {yes(r.detected)} | {yes(r.symptom_in_metrics)} | "
            f"{mark(r.first_component, r.right_component)} | {mark(r.log_only_component, r.right_from_log_only)} | "
            f"{', '.join(r.findings) or 'none'} | {', '.join(r.failed_probes) or 'none'} | {r.seconds:.0f} |"
        )
    return "\n".join(lines) + "\n"


def run_bench(preset: str, seeds: list[int], out: Path, names: list[str] | None, doc: Path, command: str,
              rescore: bool = False):
    """Healthy runs for every seed; each fault on the first seed, reusing the healthy run's
    stages before the fault's component (same seeds, so those stages are identical).
    `rescore` checks and diagnoses the runs already in `out` again, without training:
    after a change to the doctor or the checkup, not to training."""
    healthy = [bench_one(preset, seed, out / f"healthy-seed{seed}", None, rescore=rescore) for seed in seeds]
    base = RunDir(out / f"healthy-seed{seeds[0]}")
    chosen = [f for f in FAULTS if not names or f.name in names]
    rows = [bench_one(preset, seeds[0], out / fault.name, fault, base, rescore) for fault in chosen]
    doc.parent.mkdir(parents=True, exist_ok=True)  # outside a checkout, docs/ is made where it is run
    doc.write_text(render(rows, healthy, command), encoding="utf-8")
    return healthy, rows
