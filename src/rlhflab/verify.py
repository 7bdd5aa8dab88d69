"""`rlhflab verify RUN --fix k=v`: rerun a run's config with the same seeds and the fix,
diagnose both runs, and compare them as `rlhflab compare` does (doctor/compare.py: each
finding gone, weaker or still there, new findings, the truth's change, a verdict).

Only the stages a fix touches are rerun: a `ppo.*` (or `components.*`) fix reuses the
run's stage-1 and stage-2 models (hard-linked: no copy, and no stage writes into a file it
did not create), a `reward.*` fix reruns stages 2 and 3, anything else all three.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rlhflab.config import apply_overrides, config_from_run, parse_override, save_config, with_strategy
from rlhflab.distributed import Cluster
from rlhflab.doctor import Comparison, Diagnosis, compare_tables, read_and_diagnose, write_diagnosis, write_report
from rlhflab.faults.zoo import components_for
from rlhflab.pipeline import STAGE_NAMES, STAGES, StageContext, run_stages
from rlhflab.ppo.components import COMPONENT_STAGES, record_components
from rlhflab.preflight import preflight
from rlhflab.runs import RunDir, link_file, link_tree, write_json


@dataclass(frozen=True)
class VerifyResult:
    rerun: Path
    before: Diagnosis
    after: Diagnosis
    comparison: Comparison  # the same comparison as `rlhflab compare` (doctor/compare.py)


# Config sections that only one stage reads, though not named after it.
SECTION_STAGES = {"rollout": "ppo"}


def first_stage_to_rerun(fix: dict[str, str]) -> str:
    """The earliest stage whose config section the fix touches; a key of no stage's
    section (seed, world, data, fault) may shape any stage, so all rerun. No key at all
    (a fault that replaces PPO code only) reruns the last stage."""
    sections = {COMPONENT_STAGES.get(key.removeprefix("components."), "ppo") if key.startswith("components.")
                else SECTION_STAGES.get(key.split(".")[0], key.split(".")[0]) for key in fix}
    if not sections <= set(STAGE_NAMES):
        return STAGE_NAMES[0]
    return min(sections, key=STAGE_NAMES.index, default=STAGE_NAMES[-1])


def share_stages(source: RunDir, out: RunDir, first_stage: str) -> None:
    """The outputs and metrics of the stages before `first_stage`, hard-linked from
    `source` into `out` (same seeds and settings, so those stages are identical)."""
    for stage in STAGES[:STAGE_NAMES.index(first_stage)]:
        for name in stage.outputs:
            if (source.root / name).is_dir():
                link_tree(source.root / name, out.root / name)
        if source.metrics(stage.name).is_file():
            link_file(source.metrics(stage.name), out.metrics(stage.name))


def rerun(config, source: RunDir, out: RunDir, first_stage: str, components, show_progress: bool,
          resume: bool = False, stop_when=None) -> dict:
    """The stages from `first_stage` on into `out`, sharing the stages before it with
    `source`; their results by summary key. With `resume`, continues a rerun that was cut."""
    config = record_components(with_strategy(config, 1), components)  # the rerun is one process
    preflight(config, out, components, STAGE_NAMES[STAGE_NAMES.index(first_stage):], resume=resume)
    out.create()
    save_config(config, out.config)
    share_stages(source, out, first_stage)
    context = StageContext(config, out, components, show_progress, Cluster.single(), resume=resume,
                           stop_when=stop_when)
    return run_stages(context, first_stage)[0]


def verify(run_dir: Path, fixes: list[str], out: Path | None = None, components=None,
           show_progress: bool = True) -> VerifyResult:
    source = RunDir(Path(run_dir))
    fix = dict(parse_override(f) for f in fixes)
    recorded = config_from_run(source.root)
    config = apply_overrides(record_components(recorded, components_for(recorded)), fix, source="--fix")
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


def preference_study(run: Path, rerun_dir: Path, sample) -> tuple:
    """`verify --pair`: both policies sampled on the run's held-out prompts (`sample` writes
    each file, as `sample.sampled_sources` asks) and a blind comparison study of the two in
    RERUN/studies/pairs; returns the study, its rater links and the two systems' names
    (before, after). A source that cannot be sampled is a StudyError."""
    from rlhflab.sample import sampled_sources
    from rlhflab.studies.build import Source
    from rlhflab.studies.pairs import build_pair_study

    study_dir = Path(rerun_dir) / "studies" / "pairs"
    before, after = Path(run).resolve().name, Path(rerun_dir).resolve().name
    sources = sampled_sources([Source(before, Path(run)), Source(after, Path(rerun_dir))], None, study_dir, sample)
    study, _ = build_pair_study(study_dir, sources, {})
    return study, study.ensure_raters(study.design.ratings_per_item), (before, after)

