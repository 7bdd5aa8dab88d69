"""The `rlhflab` command line: parse, load the config, call a stage function."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from rlhflab.config import ConfigError, PipelineConfig, config_from_run, load_config, save_config
from rlhflab.progress import console

app = typer.Typer(add_completion=False, no_args_is_help=True, help="A PPO-based RLHF pipeline you can see inside.")


@app.callback()
def _quiet_libraries() -> None:
    """A PPO-based RLHF pipeline you can see inside."""
    # Our own progress bars and tables say what happens; silence the per-load reports.
    from transformers.utils import logging

    logging.set_verbosity_error()
    logging.disable_progress_bar()

PresetOption = typer.Option("demo", "--preset", help="smoke (under a minute), demo (default) or full.")
ConfigOption = typer.Option(None, "--config", help="TOML config file (sections seed, world, pretrain, reward, ppo).")
OverridesArgument = typer.Argument(None, help="Dotted overrides, e.g. ppo.kl_coef=0.02", show_default=False)


def _config(preset: str, config_file: Optional[Path], overrides: Optional[list[str]]) -> PipelineConfig:
    try:
        return load_config(preset, config_file, overrides or [])
    except ConfigError as err:
        console.print(f"[red]config error:[/red] {err}")
        raise typer.Exit(2) from None


def _default_out(preset: str) -> Path:
    import time

    return Path("runs") / f"{preset}-{time.strftime('%Y%m%d-%H%M%S')}"


@app.command()
def pipeline(
    overrides: Optional[list[str]] = OverridesArgument,
    preset: str = PresetOption,
    config_file: Optional[Path] = ConfigOption,
    out: Optional[Path] = typer.Option(None, "--out", help="Run directory (default runs/<preset>-<time>)."),
    quiet: bool = typer.Option(False, "--quiet", help="No progress bars."),
) -> None:
    """All three stages on the embedded reviews world, then a summary."""
    from rlhflab.pipeline import print_summary, run_pipeline

    config = _config(preset, config_file, overrides)
    out = out or _default_out(preset)
    result = run_pipeline(config, out, show_progress=not quiet)
    print_summary(result.summary)
    console.print(f"run directory: {out}")


def _stage_config(run: Path, preset: str, config_file: Optional[Path], overrides: Optional[list[str]]) -> PipelineConfig:
    """A stage run into an existing run directory reuses its config unless one is given."""
    if (run / "config.toml").is_file() and config_file is None and not overrides:
        try:
            return config_from_run(run)
        except ConfigError as err:
            console.print(f"[red]config error:[/red] {err}")
            raise typer.Exit(2) from None
    return _config(preset, config_file, overrides)


def _require(path: Path, what: str) -> None:
    if not path.is_dir():
        console.print(f"[red]error:[/red] {path} not found: run `rlhflab {what}` into this run directory first")
        raise typer.Exit(2)


@app.command()
def pretrain(
    overrides: Optional[list[str]] = OverridesArgument,
    out: Path = typer.Option(..., "--out", help="Run directory."),
    preset: str = PresetOption,
    config_file: Optional[Path] = ConfigOption,
    quiet: bool = typer.Option(False, "--quiet"),
) -> None:
    """Stage 1: train the tiny causal LM on the world's corpus."""
    from rlhflab.runs import RunDir
    from rlhflab.stages.pretrain import run_pretrain

    config = _stage_config(out, preset, config_file, overrides)
    run = RunDir(out).create()
    save_config(config, run.config)
    result = run_pretrain(config, run, not quiet)
    console.print(result)


@app.command()
def reward(
    overrides: Optional[list[str]] = OverridesArgument,
    out: Path = typer.Option(..., "--out", help="Run directory holding stage1_lm/."),
    preset: str = PresetOption,
    config_file: Optional[Path] = ConfigOption,
    quiet: bool = typer.Option(False, "--quiet"),
) -> None:
    """Stage 2: train the reward model on labelled comparisons of stage-1 samples."""
    from rlhflab.runs import RunDir
    from rlhflab.stages.reward import run_reward

    run = RunDir(out)
    _require(run.stage1_lm, "pretrain")
    config = _stage_config(out, preset, config_file, overrides)
    save_config(config, run.create().config)
    console.print(run_reward(config, run, not quiet))


@app.command()
def ppo(
    overrides: Optional[list[str]] = OverridesArgument,
    out: Path = typer.Option(..., "--out", help="Run directory holding stage1_lm/ and stage2_rm/."),
    preset: str = PresetOption,
    config_file: Optional[Path] = ConfigOption,
    quiet: bool = typer.Option(False, "--quiet"),
) -> None:
    """Stage 3: PPO against the reward model with a KL penalty to the stage-1 model."""
    from rlhflab.ppo.trainer import run_ppo
    from rlhflab.runs import RunDir

    run = RunDir(out)
    _require(run.stage1_lm, "pretrain")
    _require(run.stage2_rm, "reward")
    config = _stage_config(out, preset, config_file, overrides)
    save_config(config, run.create().config)
    console.print(run_ppo(config, run, show_progress=not quiet))


if __name__ == "__main__":  # pragma: no cover
    app()
