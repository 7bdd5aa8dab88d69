"""The stage commands: `rlhflab pipeline`, `pretrain`, `reward`, `ppo`, and `report`."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer

from rlhflab.cli.common import (
    ConfigOption,
    FaultOption,
    OverridesArgument,
    PresetOption,
    ResumeOption,
    SkipInvalidOption,
    build_config,
    interruptible,
    training_stack,
)
from rlhflab.cli.errors import fail
from rlhflab.cli.render import result_table
from rlhflab.progress import console

if TYPE_CHECKING:
    from rlhflab.config import PipelineConfig


def pipeline(
    overrides: Optional[list[str]] = OverridesArgument,
    preset: str = PresetOption,
    config_file: Optional[Path] = ConfigOption,
    out: Optional[Path] = typer.Option(None, "--out", help="Run directory (default runs/<preset>-<time>)."),
    fault: Optional[str] = FaultOption,
    resume: Optional[Path] = ResumeOption,
    quiet: bool = typer.Option(False, "--quiet", help="No progress bars."),
) -> None:
    """All three stages (on the embedded reviews world, or on your models and files given as
    data.* overrides), then the doctor and a summary."""
    training_stack()
    from rlhflab.faults.zoo import components_for
    from rlhflab.pipeline import print_summary, run_pipeline

    if resume is not None:
        config, out = _resume_config(resume, overrides, config_file, fault), resume
    else:
        config, out = build_config(preset, config_file, overrides, fault), out or _default_out(preset)
    from rlhflab.distributed import Cluster

    cluster = Cluster.from_environment()
    with interruptible():
        result = run_pipeline(config, out, components_for(config), show_progress=not quiet,
                              resume=resume is not None, cluster=cluster)
    if not cluster.is_main:
        return
    print_summary(result.summary)
    console.print(f"run directory: {out}")


def _data_overrides(**paths: Optional[object]) -> list[str]:
    """Stage options (--model, --prompts, ...) as `data.*` overrides, so the run's config
    records every input."""
    return [f"data.{key}={value}" for key, value in paths.items() if value not in (None, False)]


def _default_out(preset: str) -> Path:
    import time

    return Path("runs") / f"{preset}-{time.strftime('%Y%m%d-%H%M%S')}"


def stage_config(run: Path, preset: str, config_file: Optional[Path], overrides: Optional[list[str]],
                  fault: Optional[str] = None) -> PipelineConfig:
    """A stage run into an existing run directory starts from that run's config (then the
    config file and overrides); a new run directory starts from the preset."""
    from rlhflab.config import config_from_run

    base = config_from_run(run) if (run / "config.toml").is_file() else None
    return build_config(preset, config_file, overrides, fault, base)


def _run_sets_data(run, key: str) -> bool:
    """Whether an existing run's config sets `data.<key>` (its own model directory)."""
    from rlhflab.config import ConfigError, config_from_run

    if not run.config.is_file():
        return False
    try:
        return bool(getattr(config_from_run(run.root).data, key))
    except ConfigError:
        return False


def require_stage(path: Path, what: str) -> None:
    if not path.is_dir():
        fail(f"{path} not found: run `rlhflab {what}` into this run directory first")


def _resume_config(run: Path, overrides, config_file, fault) -> PipelineConfig:
    """A resumed run is the same run: its own config, nothing changed but where it runs
    (`distributed.*` keys spread the same run over other processes)."""
    placement = [o for o in overrides or [] if o.strip().startswith("distributed.")]
    if [o for o in overrides or [] if o not in placement] or config_file or fault:
        fail("--resume continues a run with its own config; overrides other than "
             "distributed.*, --config and --fault would make it another run (use `rlhflab verify` to rerun "
             "with a change)")
    if not (run / "config.toml").is_file():
        fail(f"{run}/config.toml not found: is {run} an rlhflab run directory?")
    return stage_config(run, "demo", None, placement or None)


def pretrain(
    overrides: Optional[list[str]] = OverridesArgument,
    out: Path = typer.Option(..., "--out", help="Run directory."),
    model: Optional[Path] = typer.Option(None, "--model", help="Your HF causal-LM directory to start from."),
    sft: Optional[Path] = typer.Option(None, "--sft", help="SFT records (prompt, completion; .jsonl/.parquet)."),
    skip_invalid: bool = SkipInvalidOption,
    preset: str = PresetOption,
    config_file: Optional[Path] = ConfigOption,
    quiet: bool = typer.Option(False, "--quiet"),
) -> None:
    """Stage 1: the tiny causal LM on the world's corpus, or SFT of your model on your file."""
    training_stack()
    from rlhflab.runs import RunDir
    from rlhflab.stages.pretrain import run_pretrain

    data = _data_overrides(model=model, sft=sft, skip_invalid=skip_invalid)
    config, cluster = _placed(stage_config(out, preset, config_file, [*(overrides or []), *data]))
    _run_stage("pretrain", RunDir(out), config, cluster, lambda run: run_pretrain(config, run, not quiet, cluster))


def reward(
    overrides: Optional[list[str]] = OverridesArgument,
    out: Path = typer.Option(..., "--out", help="Run directory (holding stage1_lm/ unless --model is given)."),
    model: Optional[Path] = typer.Option(None, "--model", help="HF causal-LM directory for the RM's trunk."),
    preferences: Optional[Path] = typer.Option(None, "--preferences", help="Preference records (prompt, chosen, "
                                               "rejected, or message lists; .jsonl/.parquet)."),
    skip_invalid: bool = SkipInvalidOption,
    preset: str = PresetOption,
    config_file: Optional[Path] = ConfigOption,
    quiet: bool = typer.Option(False, "--quiet"),
) -> None:
    """Stage 2: the reward model, on labelled comparisons of stage-1 samples or on your preference file."""
    training_stack()
    from rlhflab.runs import RunDir
    from rlhflab.stages.reward import run_reward

    run = RunDir(out)
    data = _data_overrides(reward_base=model, preferences=preferences, skip_invalid=skip_invalid)
    config, cluster = _placed(stage_config(out, preset, config_file, [*(overrides or []), *data]))
    if model is None:
        require_stage(run.stage1_lm, "pretrain")
    if preferences is None and model is not None:
        fail("--model needs --preferences (labelling samples needs the world's stage 1)")
    _run_stage("reward", run, config, cluster, lambda run: run_reward(config, run, not quiet, cluster))


def ppo(
    overrides: Optional[list[str]] = OverridesArgument,
    out: Optional[Path] = typer.Option(None, "--out", help="Run directory (holding stage1_lm/ and stage2_rm/ "
                                       "unless given)."),
    policy: Optional[Path] = typer.Option(None, "--policy", help="Your HF causal-LM directory to start from."),
    reward_model: Optional[Path] = typer.Option(None, "--reward-model", help="Your HF 1-label reward-model directory."),
    prompts: Optional[Path] = typer.Option(None, "--prompts", help="Prompt records (prompt; .jsonl/.parquet)."),
    skip_invalid: bool = SkipInvalidOption,
    preset: str = PresetOption,
    config_file: Optional[Path] = ConfigOption,
    fault: Optional[str] = FaultOption,
    resume: Optional[Path] = ResumeOption,
    quiet: bool = typer.Option(False, "--quiet"),
) -> None:
    """Stage 3: PPO against the reward model with a KL penalty to the starting policy."""
    training_stack()
    from rlhflab.faults.zoo import components_for
    from rlhflab.ppo.components import record_components
    from rlhflab.ppo.run import run_ppo
    from rlhflab.runs import RunDir

    data = _data_overrides(policy=policy, reward_model=reward_model, prompts=prompts, skip_invalid=skip_invalid)
    if resume is not None:
        out, config = resume, _resume_config(resume, [*(overrides or []), *data], config_file, fault)
    elif out is None:
        fail("give --out RUN (or --resume RUN)")
    run = RunDir(out)
    if resume is None:
        config = stage_config(out, preset, config_file, [*(overrides or []), *data], fault)
    if policy is None and not _run_sets_data(run, "policy"):
        require_stage(run.stage1_lm, "pretrain")
    if reward_model is None and not _run_sets_data(run, "reward_model"):
        require_stage(run.stage2_rm, "reward")
    config, cluster = _placed(config)
    components = components_for(config)  # checked when the config was loaded (build_config: with_fault)
    config = record_components(config, components)
    _run_stage("ppo", run, config, cluster, lambda run: run_ppo(
        config, run, components, show_progress=not quiet, resume=resume is not None, cluster=cluster),
        components, resume is not None)


STAGE_TITLES = {"pretrain": "stage 1", "reward": "stage 2", "ppo": "stage 3"}


def _run_stage(stage: str, run, config: PipelineConfig, cluster, train, components=None, resume: bool = False) -> None:
    """The tail every stage command shares: what the stage needs checked before anything is
    written (`preflight`), the resolved config written into the run (by the first process),
    `train(run)` with interruptions reported, and its result printed as a table."""
    from rlhflab.config import save_config
    from rlhflab.faults.zoo import components_for
    from rlhflab.preflight import preflight

    preflight(config, run, components or components_for(config), (stage,), resume)
    if cluster.is_main:
        save_config(config, run.create().config)
    with interruptible():
        result = train(run)
    if cluster.is_main:
        console.print(result_table(STAGE_TITLES[stage], result))


def _placed(config):
    """The cluster torchrun started (one process outside it) and the config with the
    strategy it runs under written in (`distributed.strategy`)."""
    from rlhflab.config import with_strategy
    from rlhflab.distributed import Cluster

    cluster = Cluster.from_environment()
    return with_strategy(config, cluster.world_size), cluster


def report(run: Path = typer.Argument(..., help="Run directory")) -> None:
    """(Re)write RUN/report.html: curves, findings with onsets, samples."""
    from rlhflab.doctor import read_and_diagnose, write_diagnosis, write_report

    table, diagnosis = read_and_diagnose(run, format_name="rlhflab")
    write_diagnosis(diagnosis, run / "diagnosis.json")
    console.print(f"wrote {write_report(run, table, diagnosis)}")
