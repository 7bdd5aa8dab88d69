"""`rlhflab verify RUN --fix k=v`: rerun a run's config with the same seeds and the fix,
diagnose both runs, and say finding by finding whether the symptom is gone.

Only the stages a fix touches are rerun: a `ppo.*` fix reuses the run's stage-1 and
stage-2 models (copied, so the original run is untouched), a `reward.*` fix reruns
stages 2 and 3, anything else all three.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from rlhflab.config import PipelineConfig, apply_overrides, config_from_run, parse_override, save_config
from rlhflab.doctor.diagnose import diagnose_path, write_diagnosis
from rlhflab.doctor.findings import Diagnosis
from rlhflab.doctor.readers import read_run
from rlhflab.doctor.report import write_report
from rlhflab.runs import RunDir, write_json


@dataclass(frozen=True)
class Comparison:
    rule: str
    gone: bool
    metric: str
    before: float
    after: float


@dataclass(frozen=True)
class VerifyResult:
    rerun: Path
    before: Diagnosis
    after: Diagnosis
    comparison: list[Comparison]
    new_findings: list[str]


def first_stage_to_rerun(fix: dict[str, str]) -> str:
    sections = {key.split(".")[0] for key in fix}
    if "fault" in sections:
        return "pretrain"  # a fault may have shaped any stage
    if sections <= {"ppo"}:
        return "ppo"
    if sections <= {"ppo", "reward"}:
        return "reward"
    return "pretrain"


# What a rerun that starts at a stage copies from the original run: (dirs, stage metrics).
REUSED = {
    "ppo": (("world", "stage1_lm", "stage2_rm"), ("pretrain", "reward")),
    "reward": (("world", "stage1_lm"), ("pretrain",)),
    "pretrain": ((), ()),
}


def rerun(config: PipelineConfig, source: RunDir, out: RunDir, first_stage: str, components, show_progress: bool) -> None:
    from rlhflab.ppo.trainer import run_ppo
    from rlhflab.stages.pretrain import run_pretrain
    from rlhflab.stages.reward import run_reward

    out.create()
    save_config(config, out.config)
    dirs, stage_metrics = REUSED[first_stage]
    for name in dirs:
        shutil.copytree(source.root / name, out.root / name, dirs_exist_ok=True)
    for stage in stage_metrics:
        if source.metrics(stage).is_file():
            shutil.copy(source.metrics(stage), out.metrics(stage))
    if first_stage == "pretrain":
        run_pretrain(config, out, show_progress)
    if first_stage in ("pretrain", "reward"):
        run_reward(config, out, show_progress)
    run_ppo(config, out, components, show_progress)


def compare(before: Diagnosis, after: Diagnosis, before_run: Path, after_run: Path) -> list[Comparison]:
    before_table, after_table = read_run(before_run), read_run(after_run)
    remaining = {f.rule for f in after.findings}
    rows = []
    for finding in before.findings:
        metric = finding.evidence[0].metric
        b, a = before_table.get(metric), after_table.get(metric)
        rows.append(Comparison(finding.rule, finding.rule not in remaining, metric,
                               b.values[-1] if b else float("nan"), a.values[-1] if a else float("nan")))
    return rows


def verify(run_dir: Path, fixes: list[str], out: Path | None = None, components=None,
           show_progress: bool = True) -> VerifyResult:
    from rlhflab.faults.zoo import components_for

    source = RunDir(Path(run_dir))
    fix = dict(parse_override(f) for f in fixes)
    config = apply_overrides(config_from_run(source.root), fix, source="--fix")
    target = RunDir(Path(out) if out else source.root.parent / f"{source.root.name}-verify")
    # The rerun keeps the run's fault unless the fix removes it (`--fix fault=`).
    rerun(config, source, target, first_stage_to_rerun(fix), components or components_for(config), show_progress)

    before, after = diagnose_path(source.root), diagnose_path(target.root)
    write_diagnosis(before, source.diagnosis)
    write_diagnosis(after, target.diagnosis)
    comparison = compare(before, after, source.root, target.root)
    new = sorted({f.rule for f in after.findings} - {f.rule for f in before.findings})
    write_json(source.root / "verify.json", {
        "fix": [f"{k}={v}" for k, v in fix.items()], "rerun": str(target.root),
        "comparison": [c.__dict__ for c in comparison], "new_findings": new,
    })
    write_report(source.root, read_run(source.root), before, compare=read_run(target.root))
    write_report(target.root, read_run(target.root), after)
    return VerifyResult(target.root, before, after, comparison, new)
