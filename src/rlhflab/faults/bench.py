"""`rlhflab faults bench`: score the doctor and the checkup on the fault zoo.

Runs the healthy pipeline (several seeds) and every fault (on the first seed, reusing the
healthy run's stages that come before the fault's component), each followed by the checkup
(with the fault's components) and the doctor (which ranks causes with the failed
probes), and writes a table to docs/faults.md: per fault, whether a finding appeared,
whether the fault's component was ranked first, which probes failed, and the cost.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from rlhflab.config import load_config
from rlhflab.doctor.diagnose import diagnose_path, write_diagnosis
from rlhflab.doctor.probes import run_checkup
from rlhflab.doctor.readers import read_run
from rlhflab.doctor.report import write_report
from rlhflab.faults.zoo import FAULTS, Fault, components_for
from rlhflab.doctor.verify import first_stage_to_rerun, rerun
from rlhflab.pipeline import run_pipeline
from rlhflab.runs import RunDir


@dataclass
class BenchRow:
    name: str
    component: str
    detected: bool
    first_component: str
    right_component: bool
    findings: list[str] = field(default_factory=list)
    failed_probes: list[str] = field(default_factory=list)
    seconds: float = 0.0


def first_stage(fault: Fault) -> str:
    """The earliest stage a fault touches: its runs reuse the healthy run's earlier stages.
    Its config keys decide as for `verify`; a replaced scorer also trains the reward model."""
    stage = first_stage_to_rerun(fault.config(load_config("demo")))
    return "reward" if stage == "ppo" and "score" in fault.code else stage


def bench_one(preset: str, seed: int, out: Path, fault: Fault | None, base: RunDir | None = None) -> BenchRow:
    """One run (a fresh pipeline, or the fault's stages on top of `base`), checkup, doctor."""
    start = time.perf_counter()
    config = load_config(preset, overrides=[f"seed={seed}"], fault=fault.name if fault else None)
    components = components_for(config)
    if base is None:
        run = run_pipeline(config, out, components, show_progress=False).run
    else:
        run = RunDir(out)
        rerun(config, base, run, first_stage(fault), components, show_progress=False)
    probes = run_checkup(config, run, components)
    diagnosis = diagnose_path(run.root)  # ranks with the failed probes in RUN/checkup.json
    write_diagnosis(diagnosis, run.diagnosis)
    write_report(run.root, read_run(run.root), diagnosis)
    first = diagnosis.findings[0].causes[0].component if diagnosis.findings and diagnosis.findings[0].causes else ""
    component = fault.component if fault else "none"
    return BenchRow(
        name=fault.name if fault else f"healthy (seed {seed})", component=component,
        detected=bool(diagnosis.findings), first_component=first, right_component=first == component,
        findings=[f.rule for f in diagnosis.findings], failed_probes=[p.name for p in probes if not p.passed],
        seconds=time.perf_counter() - start,
    )


def render(faulty: list[BenchRow], healthy: list[BenchRow], command: str) -> str:
    detected = sum(r.detected for r in faulty)
    right = sum(r.right_component for r in faulty)
    healthy_findings = sum(len(r.findings) for r in healthy)
    lines = [
        "# The fault zoo",
        "",
        "Each fault is a deliberately wrong replacement for one component (`src/rlhflab/faults/zoo.py`);",
        "`rlhflab pipeline --fault NAME` runs the pipeline with it, `rlhflab faults show NAME` prints it.",
        "",
        "| fault | component | replaces | models | expected symptom |",
        "|---|---|---|---|---|",
        *[f"| `{f.name}` | {f.component} | {f.replaces} | {f.models} | {f.symptom} |" for f in FAULTS],
        "",
        "## Scored",
        "",
        f"Command: `{command}`. Measured on a 2-core CPU.",
        "",
        f"- faults detected: {detected}/{len(faulty)} (target: all)",
        f"- right component ranked first: {right}/{len(faulty)} = {right / max(1, len(faulty)):.0%} (target: >= 80%)",
        f"- findings on healthy runs: {healthy_findings} over {len(healthy)} seeds (target: 0)",
        "",
        "| fault | component | detected | ranked first | findings | failed probes | seconds |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in healthy + faulty:
        lines.append(
            f"| {r.name} | {r.component} | {'yes' if r.detected else 'no'} | {r.first_component or '-'}"
            f"{' (right)' if r.right_component else ''} | {', '.join(r.findings) or 'none'} | "
            f"{', '.join(r.failed_probes) or 'none'} | {r.seconds:.0f} |"
        )
    return "\n".join(lines) + "\n"


def run_bench(preset: str, seeds: list[int], out: Path, names: list[str] | None, doc: Path, command: str):
    """Healthy runs for every seed; each fault on the first seed, reusing the healthy run's
    stages before the fault's component (same seeds, so those stages are identical)."""
    healthy = [bench_one(preset, seed, out / f"healthy-seed{seed}", None) for seed in seeds]
    base = RunDir(out / f"healthy-seed{seeds[0]}")
    chosen = [f for f in FAULTS if not names or f.name in names]
    rows = [bench_one(preset, seeds[0], out / fault.name, fault, base) for fault in chosen]
    doc.write_text(render(rows, healthy, command), encoding="utf-8")
    return healthy, rows
