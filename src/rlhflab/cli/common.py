"""What the command families share: the training stack and studies extra checks, the options
several commands take, the config a command builds, and how an interruption ends a command."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer

from rlhflab.cli.errors import fail
from rlhflab.progress import console

if TYPE_CHECKING:
    from rlhflab.config import PipelineConfig


def training_stack() -> None:
    """Check that the training extra is installed; silence the libraries' per-load reports
    (our own progress bars and tables say what happens)."""
    try:
        from transformers.utils import logging
    except ImportError:
        fail("this command trains or loads models and needs the training stack: "
             "pip install 'rlhflab[train]' (the doctor alone needs none of it)")
    logging.set_verbosity_error()
    logging.disable_progress_bar()


PresetOption = typer.Option("demo", "--preset", help="smoke (under a minute), demo (default) or full.")
ConfigOption = typer.Option(None, "--config", help="TOML config file (sections seed, world, pretrain, reward, ppo).")
OverridesArgument = typer.Argument(None, help="Dotted overrides, e.g. ppo.kl_coef=0.02", show_default=False)
FaultOption = typer.Option(None, "--fault", help="Inject a named fault from the zoo (rlhflab faults list).")
ResumeOption = typer.Option(None, "--resume", help="Continue this run from its last checkpoint, with its config.")
SkipInvalidOption = typer.Option(False, "--skip-invalid", help="Skip invalid data records and report their lines.")
# A study's server (rlhflab rate, rlhflab pair).
HostOption = typer.Option("127.0.0.1", "--host", help="Address to listen on (default loopback only).")
PortOption = typer.Option(8765, "--port", help="Port (0: any free one).")
NoServeOption = typer.Option(False, "--no-serve", help="Build or open the study, print its links, and exit.")
AnswersOption = typer.Option(None, "--answers", help="Whose answers count: people, judges, judge:NAME or all "
                             "(default: people; the judges where no person has answered, said so).")


def build_config(preset: str, config_file: Optional[Path], overrides: Optional[list[str]],
                 fault: Optional[str] = None, base: Optional[PipelineConfig] = None) -> PipelineConfig:
    """The preset (or `base`), the config file, the overrides and the fault (a bad key or value
    is a ConfigError)."""
    from rlhflab.config import load_config
    from rlhflab.faults.zoo import with_fault

    return with_fault(load_config(preset, config_file, overrides or [], base), fault)


@contextmanager
def interruptible():
    """SIGINT/SIGTERM during PPO: the trainer saved a checkpoint; say how to go on."""
    from rlhflab.ppo.run import Interrupted

    try:
        yield
    except Interrupted as stop:
        console.print(f"[yellow]interrupted:[/yellow] {stop}")
        raise typer.Exit(128 + stop.signum) from None


def studies_extra() -> None:
    """Check that the studies extra is installed (the doctor's light install has none of it)."""
    import importlib

    missing = []
    for module in ("starlette", "uvicorn", "jinja2", "python_multipart", "numpy"):
        try:
            importlib.import_module(module)
        except ImportError:
            missing.append(module)
    if missing:
        fail(f"rating studies need the studies extra ({', '.join(missing)} missing): "
             "pip install 'rlhflab[studies]'")
