"""`rlhflab verify RUN --fix k=v`: rerun a run's config with the same seeds and the fix,
diagnose both runs, and compare them as `rlhflab compare` does (doctor/compare.py: each
finding gone, weaker or still there, new findings, the truth's change, a verdict).

Only the stages a fix touches are rerun: a `ppo.*` fix reuses the run's stage-1 and
stage-2 models (copied, so the original run is untouched), a `reward.*` fix reruns
stages 2 and 3, anything else all three.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from rlhflab.config import apply_overrides, config_from_run, parse_override, save_config, with_strategy
from rlhflab.distributed import Cluster
from rlhflab.doctor.compare import Comparison, compare_tables
from rlhflab.doctor.diagnose import read_and_diagnose, write_diagnosis
from rlhflab.doctor.findings import Diagnosis
from rlhflab.doctor.report import write_report
from rlhflab.faults.zoo import components_for
from rlhflab.pipeline import STAGE_NAMES, STAGES, StageContext, run_stages
from rlhflab.runs import RunDir, write_json


@dataclass(frozen=True)
class VerifyResult:
    rerun: Path
    before: Diagnosis
    after: Diagnosis
    comparison: Comparison  # the same comparison as `rlhflab compare` (doctor/compare.py)


def first_stage_to_rerun(fix: dict[str, str]) -> str:
    """The earliest stage whose config section the fix touches; a key of no stage's
    section (seed, world, data, fault) may shape any stage, so all rerun. No key at all
    (a fault that replaces PPO code only) reruns the last stage."""
    sections = {key.split(".")[0] for key in fix}
    if not sections <= set(STAGE_NAMES):
        return STAGE_NAMES[0]
    return min(sections, key=STAGE_NAMES.index, default=STAGE_NAMES[-1])


def rerun(config, source: RunDir, out: RunDir, first_stage: str, components, show_progress: bool) -> None:
    """The stages from `first_stage` on into `out`, after copying the outputs and metrics
    of the stages before it from `source` (same seeds, so those stages are identical)."""
    out.create()
    config = with_strategy(config, 1)  # the rerun is one process, whatever the run was
    save_config(config, out.config)
    for stage in STAGES[:STAGE_NAMES.index(first_stage)]:
        for name in stage.outputs:
            if (source.root / name).is_dir():
                shutil.copytree(source.root / name, out.root / name, dirs_exist_ok=True)
        if source.metrics(stage.name).is_file():
            shutil.copy(source.metrics(stage.name), out.metrics(stage.name))
    run_stages(StageContext(config, out, components, show_progress, Cluster.single(), resume=False), first_stage)


def verify(run_dir: Path, fixes: list[str], out: Path | None = None, components=None,
           show_progress: bool = True) -> VerifyResult:
    source = RunDir(Path(run_dir))
    fix = dict(parse_override(f) for f in fixes)
    config = apply_overrides(config_from_run(source.root), fix, source="--fix")
    target = RunDir(Path(out) if out else source.root.parent / f"{source.root.name}-verify")
    # The rerun keeps the run's fault unless the fix removes it (`--fix fault=`).
    rerun(config, source, target, first_stage_to_rerun(fix), components or components_for(config), show_progress)

    (before_table, before), (after_table, after) = read_and_diagnose(source.root), read_and_diagnose(target.root)
    write_diagnosis(before, source.diagnosis)
    write_diagnosis(after, target.diagnosis)
    comparison = compare_tables([before_table], [after_table])
    saved = comparison.to_json()
    write_json(source.root / "verify.json", {
        "fix": [f"{k}={v}" for k, v in fix.items()], "rerun": str(target.root),
        "comparison": [{**f, "gone": f["status"] == "gone"} for f in saved["findings"]],
        **{k: saved[k] for k in ("new_findings", "verdict", "why", "truth")},
    })
    write_report(source.root, before_table, before, compare=after_table)
    write_report(target.root, after_table, after)
    return VerifyResult(target.root, before, after, comparison)
