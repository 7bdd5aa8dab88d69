"""`rlhflab pipeline`: all three stages into one run directory, then the doctor."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

from rich.table import Table

from rlhflab.config import PipelineConfig, save_config, with_strategy
from rlhflab.distributed import Cluster
from rlhflab.doctor import StopRule, read_and_diagnose, write_diagnosis, write_report
from rlhflab.ppo.components import PPOComponents, record_components
from rlhflab.ppo.run import run_ppo
from rlhflab.preflight import preflight
from rlhflab.progress import console
from rlhflab.runs import RunDir, read_json, write_json
from rlhflab.stages.pretrain import run_pretrain
from rlhflab.stages.reward import run_reward


@dataclass(frozen=True)
class StageContext:
    config: PipelineConfig
    run: RunDir
    components: PPOComponents
    show_progress: bool
    cluster: Cluster
    resume: bool
    stop_when: StopRule | None = None  # stops PPO early, beside `ppo.stop_on` (an ablation's arms)


@dataclass(frozen=True)
class Stage:
    """One stage of the pipeline, as `rlhflab pipeline`, `rlhflab verify` and the faults
    bench run it."""

    name: str  # its config section and metrics file
    summary_key: str  # where its result goes in RUN/summary.json
    outputs: tuple[str, ...]  # run-directory entries it writes; the last one marks it complete
    run: Callable[[StageContext], dict]
    resumes_itself: bool = False  # continues from its own checkpoint rather than being skipped


STAGES: tuple[Stage, ...] = (
    Stage("pretrain", "pretrain", ("world", "stage1_lm"),
          lambda c: asdict(run_pretrain(c.config, c.run, c.show_progress, c.cluster, c.components))),
    Stage("reward", "reward", ("stage2_rm",),
          lambda c: asdict(run_reward(c.config, c.run, c.show_progress, c.cluster, c.components))),
    Stage("ppo", "eval", ("stage3_policy",),
          lambda c: run_ppo(c.config, c.run, c.components, c.show_progress, resume=c.resume, cluster=c.cluster,
                            stop_when=c.stop_when),
          resumes_itself=True),
)
STAGE_NAMES = tuple(stage.name for stage in STAGES)


def run_stages(context: StageContext, first: str = STAGE_NAMES[0]) -> tuple[dict, dict[str, float]]:
    """The stages from `first` on, into `context.run`: their results (by summary key) and
    seconds. With `context.resume`, a stage whose output is complete and whose result is
    in RUN/summary.json is kept; PPO continues from its checkpoint."""
    run, cluster = context.run, context.cluster
    previous = read_json(run.summary) if context.resume and run.summary.is_file() else {}
    results, timings = {}, {}
    for stage in STAGES[STAGE_NAMES.index(first):]:
        start = time.perf_counter()
        complete = (run.root / stage.outputs[-1]).is_dir() and stage.summary_key in previous
        if context.resume and complete and not stage.resumes_itself:
            result = previous[stage.summary_key]
        else:
            result = stage.run(context)
            if not stage.resumes_itself:
                previous[stage.summary_key] = result
                if cluster.is_main:
                    write_json(run.summary, previous)
        results[stage.summary_key] = result
        timings[f"{stage.name}_s"] = time.perf_counter() - start
    return results, timings


@dataclass(frozen=True)
class PipelineResult:
    run: RunDir
    summary: dict


def run_pipeline(
    config: PipelineConfig,
    out: Path,
    components: PPOComponents = PPOComponents(),
    show_progress: bool = True,
    resume: bool = False,
    cluster: Cluster = Cluster.single(),
) -> PipelineResult:
    """The three stages into `out`, then the doctor and the report. With `resume`, stages
    whose output directory is complete are kept and PPO continues from its checkpoint.
    Under torchrun every stage runs on every process through the engine of
    `distributed.strategy` (engines.py); the doctor runs on the first."""
    run = RunDir(Path(out))
    config = record_components(with_strategy(config, cluster.world_size), components)
    preflight(config, run, components, resume=resume)
    if cluster.is_main:
        run.create()
        save_config(config, run.config)
    results, timings = run_stages(StageContext(config, run, components, show_progress, cluster, resume))
    if not cluster.is_main:
        return PipelineResult(run, {})
    table, diagnosis = read_and_diagnose(run.root)
    write_diagnosis(diagnosis, run.diagnosis)
    write_report(run.root, table, diagnosis)
    summary = {
        "findings": [f.rule for f in diagnosis.findings],
        **results,
        "time": timings | {"total_s": sum(timings.values())},
    }
    write_json(run.summary, summary)
    return PipelineResult(run, summary)


def summary_table(summary: dict) -> Table:
    """SFT (stage-1) model vs the final policy on held-out prompts."""
    table = Table(title="stage-1 model vs PPO policy (held-out prompts)")
    table.add_column("metric")
    table.add_column("stage 1", justify="right")
    table.add_column("policy", justify="right")
    before, after = summary["eval"]["stage1"], summary["eval"]["policy"]
    rows = [
        ("gold reward", "gold_mean"), ("proxy reward", "proxy_mean"), ("KL to reference (nats)", "kl_mean"),
        ("distinct-2", "distinct_2"), ("grammatical rate", "grammatical_rate"), ("length (tokens)", "length_mean"),
    ]
    for label, key in rows:
        if key in before:  # gold and grammar exist on the embedded world only
            table.add_row(label, f"{before[key]:.3f}", f"{after[key]:.3f}")
    rm = summary["reward"]
    findings = ", ".join(summary["findings"]) or "none"
    table.caption = (
        f"RM gold agreement {rm['gold_agreement']:.3f}, val acc {rm['val_acc']:.3f}; "
        f"time {summary['time']['total_s']:.0f} s; doctor findings: {findings}"
    )
    return table


def print_summary(summary: dict) -> None:
    console.print(summary_table(summary))
