"""`rlhflab pipeline`: all three stages into one run directory, then the doctor."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path

from rich.table import Table

from rlhflab.config import PipelineConfig, save_config
from rlhflab.distributed import Cluster
from rlhflab.doctor.diagnose import diagnose_path, write_diagnosis
from rlhflab.doctor.readers import read_run
from rlhflab.doctor.report import write_report
from rlhflab.ppo.components import PPOComponents
from rlhflab.ppo.trainer import run_ppo
from rlhflab.progress import console
from rlhflab.runs import RunDir, read_json, write_json
from rlhflab.stages.pretrain import run_pretrain
from rlhflab.stages.reward import run_reward


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
    Under torchrun, stage 1 runs on the first process only (the others wait for its
    model), stages 2 and 3 on all (distributed.py), the doctor on the first."""
    run = RunDir(Path(out))
    writer = cluster.is_main
    if writer:
        run.create()
        save_config(config, run.config)
    previous = read_json(run.summary) if resume and run.summary.is_file() else {}
    timings = {}
    start = time.perf_counter()
    if resume and run.stage1_lm.is_dir() and "pretrain" in previous:
        pre = previous["pretrain"]
    else:
        pre = asdict(run_pretrain(config, run, show_progress)) if writer else {}
        previous["pretrain"] = pre
        if writer:
            write_json(run.summary, previous)
    cluster.barrier()
    timings["pretrain_s"] = time.perf_counter() - start
    start = time.perf_counter()
    if resume and run.stage2_rm.is_dir() and "reward" in previous:
        rm = previous["reward"]
    else:
        rm = asdict(run_reward(config, run, show_progress, cluster))
        previous["reward"] = rm
        if writer:
            write_json(run.summary, previous)
    timings["reward_s"] = time.perf_counter() - start
    start = time.perf_counter()
    evaluation = run_ppo(config, run, components, show_progress, resume=resume, cluster=cluster)
    timings["ppo_s"] = time.perf_counter() - start
    if not writer:
        return PipelineResult(run, {})
    diagnosis = diagnose_path(run.root)
    write_diagnosis(diagnosis, run.diagnosis)
    write_report(run.root, read_run(run.root), diagnosis)
    summary = {
        "findings": [f.rule for f in diagnosis.findings],
        "pretrain": pre,
        "reward": rm,
        "eval": evaluation,
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
