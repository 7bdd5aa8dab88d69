"""The `rlhflab` command line: parse, load the config, call the library; one module per
command family (stages, doctor, fixes, studies), one for rendering, one for errors.

Commands import what they need when they run: `rlhflab doctor` reads a log without
loading the training stack (torch, transformers), which the stages import.
"""

from __future__ import annotations

import typer

from rlhflab.cli import doctor, fixes, stages, studies
from rlhflab.cli.errors import guarded

app = typer.Typer(add_completion=False, no_args_is_help=True, help="A PPO-based RLHF pipeline you can see inside.")

# Every command, once, in the order `rlhflab --help` lists them; a command's help text is its
# docstring unless given here.
COMMANDS = (
    (stages.pipeline, {}), (stages.pretrain, {}), (stages.reward, {}), (stages.ppo, {}),
    (doctor.doctor, {}), (stages.report, {}),
    (fixes.verify, {}), (fixes.ablate, {}), (fixes.checkup, {}),
    (doctor.compare, {}),
    (studies.rate, {"help": studies.RATE_HELP}), (studies.sample, {"help": studies.SAMPLE_HELP}),
    (studies.pair, {"help": studies.PAIR_HELP}),
)
for command, options in COMMANDS:
    app.command(**options)(guarded(command))
for registered in fixes.faults_app.registered_commands:  # the group's commands, under the same policy
    registered.callback = guarded(registered.callback)
app.add_typer(fixes.faults_app, name="faults")


def main(argv: list[str] | None = None) -> None:
    """The console script: `rlhflab ...`, with compare's `--` kept (`doctor.AFTER_MARK`)."""
    import sys

    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["compare"]:  # every `--` cuts an arm: click would keep only the first
        args = [doctor.AFTER_MARK if a == "--" else a for a in args]
    app(args=args)
