"""`rlhflab pipeline`: all three stages on the embedded world into one run directory."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path

from rich.table import Table

from rlhflab.config import PipelineConfig, save_config
from rlhflab.doctor.diagnose import diagnose_path, write_diagnosis
from rlhflab.doctor.readers import read_run
from rlhflab.doctor.report import write_report
from rlhflab.ppo.components import PPOComponents
from rlhflab.ppo.trainer import run_ppo
from rlhflab.progress import console
from rlhflab.runs import RunDir, write_json
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
) -> PipelineResult:
    run = RunDir(Path(out)).create()
    save_config(config, run.config)
    timings = {}
    start = time.perf_counter()
    pre = run_pretrain(config, run, show_progress)
    timings["pretrain_s"] = time.perf_counter() - start
    start = time.perf_counter()
    rm = run_reward(config, run, show_progress)
    timings["reward_s"] = time.perf_counter() - start
    start = time.perf_counter()
    evaluation = run_ppo(config, run, components, show_progress)
    timings["ppo_s"] = time.perf_counter() - start
    diagnosis = diagnose_path(run.root)
    write_diagnosis(diagnosis, run.diagnosis)
    write_report(run.root, read_run(run.root), diagnosis)
    summary = {
        "findings": [f.rule for f in diagnosis.findings],
        "pretrain": asdict(pre),
        "reward": asdict(rm),
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
