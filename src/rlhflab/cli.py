"""The `rlhflab` command line: parse, load the config, call a stage function.

Commands import what they need when they run: `rlhflab doctor` reads a log without
loading the training stack (torch, transformers), which the stages import.
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer
from rich.markup import escape

from rlhflab.progress import console

if TYPE_CHECKING:
    from rich.table import Table

    from rlhflab.config import PipelineConfig

app = typer.Typer(add_completion=False, no_args_is_help=True, help="A PPO-based RLHF pipeline you can see inside.")


def _training_stack() -> None:
    """Check that the training extra is installed; silence the libraries' per-load reports
    (our own progress bars and tables say what happens)."""
    try:
        from transformers.utils import logging
    except ImportError:
        console.print("[red]error:[/red] this command trains or loads models and needs the training stack: "
                      "pip install 'rlhflab\\[train]' (the doctor alone needs none of it)")
        raise typer.Exit(2) from None
    logging.set_verbosity_error()
    logging.disable_progress_bar()

PresetOption = typer.Option("demo", "--preset", help="smoke (under a minute), demo (default) or full.")
# A study's server (rlhflab rate, rlhflab pair).
HostOption = typer.Option("127.0.0.1", "--host", help="Address to listen on (default loopback only).")
PortOption = typer.Option(8765, "--port", help="Port (0: any free one).")
NoServeOption = typer.Option(False, "--no-serve", help="Build or open the study, print its links, and exit.")
ConfigOption = typer.Option(None, "--config", help="TOML config file (sections seed, world, pretrain, reward, ppo).")
OverridesArgument = typer.Argument(None, help="Dotted overrides, e.g. ppo.kl_coef=0.02", show_default=False)


FaultOption = typer.Option(None, "--fault", help="Inject a named fault from the zoo (rlhflab faults list).")
ResumeOption = typer.Option(None, "--resume", help="Continue this run from its last checkpoint, with its config.")
SkipInvalidOption = typer.Option(False, "--skip-invalid", help="Skip invalid data records and report their lines.")


def _config(preset: str, config_file: Optional[Path], overrides: Optional[list[str]],
            fault: Optional[str] = None, base: Optional[PipelineConfig] = None) -> PipelineConfig:
    from rlhflab.config import ConfigError, load_config
    from rlhflab.faults.zoo import with_fault

    try:
        return with_fault(load_config(preset, config_file, overrides or [], base), fault)
    except ConfigError as err:
        console.print(f"[red]config error:[/red] {escape(str(err))}")
        raise typer.Exit(2) from None


def _data_overrides(**paths: Optional[object]) -> list[str]:
    """Stage options (--model, --prompts, ...) as `data.*` overrides, so the run's config
    records every input."""
    return [f"data.{key}={value}" for key, value in paths.items() if value not in (None, False)]


def _default_out(preset: str) -> Path:
    import time

    return Path("runs") / f"{preset}-{time.strftime('%Y%m%d-%H%M%S')}"


@app.command()
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
    _training_stack()
    from rlhflab.faults.zoo import components_for
    from rlhflab.pipeline import print_summary, run_pipeline

    if resume is not None:
        config, out = _resume_config(resume, overrides, config_file, fault), resume
    else:
        config, out = _config(preset, config_file, overrides, fault), out or _default_out(preset)
    from rlhflab.distributed import Cluster

    cluster = Cluster.from_environment()
    with _input_errors(), _interruptible():
        result = run_pipeline(config, out, components_for(config), show_progress=not quiet,
                              resume=resume is not None, cluster=cluster)
    if not cluster.is_main:
        return
    print_summary(result.summary)
    console.print(f"run directory: {out}")


def _stage_config(run: Path, preset: str, config_file: Optional[Path], overrides: Optional[list[str]],
                  fault: Optional[str] = None) -> PipelineConfig:
    """A stage run into an existing run directory starts from that run's config (then the
    config file and overrides); a new run directory starts from the preset."""
    from rlhflab.config import ConfigError, config_from_run

    base = None
    if (run / "config.toml").is_file():
        try:
            base = config_from_run(run)
        except ConfigError as err:
            console.print(f"[red]config error:[/red] {escape(str(err))}")
            raise typer.Exit(2) from None
    return _config(preset, config_file, overrides, fault, base)


def _run_sets_data(run, key: str) -> bool:
    """Whether an existing run's config sets `data.<key>` (its own model directory)."""
    from rlhflab.config import ConfigError, config_from_run

    if not run.config.is_file():
        return False
    try:
        return bool(getattr(config_from_run(run.root).data, key))
    except ConfigError:
        return False


def _require(path: Path, what: str) -> None:
    if not path.is_dir():
        console.print(f"[red]error:[/red] {path} not found: run `rlhflab {what}` into this run directory first")
        raise typer.Exit(2)


def _resume_config(run: Path, overrides, config_file, fault) -> PipelineConfig:
    """A resumed run is the same run: its own config, nothing changed but where it runs
    (`distributed.*` keys spread the same run over other processes)."""
    placement = [o for o in overrides or [] if o.strip().startswith("distributed.")]
    if [o for o in overrides or [] if o not in placement] or config_file or fault:
        console.print("[red]error:[/red] --resume continues a run with its own config; overrides other than "
                      "distributed.*, --config and --fault would make it another run (use `rlhflab verify` to rerun "
                      "with a change)")
        raise typer.Exit(2)
    if not (run / "config.toml").is_file():
        console.print(f"[red]error:[/red] {run}/config.toml not found: is {run} an rlhflab run directory?")
        raise typer.Exit(2)
    return _stage_config(run, "demo", None, placement or None)


@contextmanager
def _interruptible():
    """SIGINT/SIGTERM during PPO: the trainer saved a checkpoint; say how to go on."""
    from rlhflab.ppo.run import Interrupted

    try:
        yield
    except Interrupted as stop:
        console.print(f"[yellow]interrupted:[/yellow] {stop}")
        raise typer.Exit(128 + stop.signum) from None


@contextmanager
def _input_errors():
    """A bad data file or model directory ends the command with its message and exit code 2."""
    from rlhflab.data.files import DataError
    from rlhflab.models.lm import ModelDirError

    try:
        yield
    except (DataError, ModelDirError) as err:
        console.print(f"[red]input error:[/red] {escape(str(err))}")
        raise typer.Exit(2) from None


@app.command()
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
    _training_stack()
    from rlhflab.runs import RunDir
    from rlhflab.stages.pretrain import run_pretrain

    data = _data_overrides(model=model, sft=sft, skip_invalid=skip_invalid)
    config, cluster = _placed(_stage_config(out, preset, config_file, [*(overrides or []), *data]))
    _run_stage("stage 1", RunDir(out), config, cluster, lambda run: run_pretrain(config, run, not quiet, cluster))


@app.command()
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
    _training_stack()
    from rlhflab.runs import RunDir
    from rlhflab.stages.reward import run_reward

    run = RunDir(out)
    if model is None:
        _require(run.stage1_lm, "pretrain")
    if preferences is None and model is not None:
        console.print("[red]error:[/red] --model needs --preferences (labelling samples needs the world's stage 1)")
        raise typer.Exit(2)
    data = _data_overrides(reward_base=model, preferences=preferences, skip_invalid=skip_invalid)
    config, cluster = _placed(_stage_config(out, preset, config_file, [*(overrides or []), *data]))
    _run_stage("stage 2", run, config, cluster, lambda run: run_reward(config, run, not quiet, cluster))


@app.command()
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
    _training_stack()
    from rlhflab.faults.zoo import components_for
    from rlhflab.ppo.components import record_components
    from rlhflab.ppo.run import run_ppo
    from rlhflab.runs import RunDir

    data = _data_overrides(policy=policy, reward_model=reward_model, prompts=prompts, skip_invalid=skip_invalid)
    if resume is not None:
        out, config = resume, _resume_config(resume, [*(overrides or []), *data], config_file, fault)
    elif out is None:
        console.print("[red]error:[/red] give --out RUN (or --resume RUN)")
        raise typer.Exit(2)
    run = RunDir(out)
    if policy is None and not _run_sets_data(run, "policy"):
        _require(run.stage1_lm, "pretrain")
    if reward_model is None and not _run_sets_data(run, "reward_model"):
        _require(run.stage2_rm, "reward")
    if resume is None:
        config = _stage_config(out, preset, config_file, [*(overrides or []), *data], fault)
    config, cluster = _placed(config)
    components = components_for(config)  # checked when the config was loaded (_config: with_fault)
    config = record_components(config, components)
    _run_stage("stage 3", run, config, cluster, lambda run: run_ppo(
        config, run, components, show_progress=not quiet, resume=resume is not None, cluster=cluster))


def _run_stage(title: str, run, config: PipelineConfig, cluster, train) -> None:
    """The tail every stage command shares: the resolved config written into the run (by
    the first process), `train(run)` with bad inputs and interruptions reported, and its
    result printed as a table."""
    from rlhflab.config import save_config

    if cluster.is_main:
        save_config(config, run.create().config)
    with _input_errors(), _interruptible():
        result = train(run)
    if cluster.is_main:
        console.print(result_table(title, result))


def result_table(title: str, result) -> Table:
    """A stage's result (a dataclass or a dict, flat or of dicts) as a table: one row per
    value, one column per group of numbers (PPO's stage-1 model and policy), a row for any
    other group (why a run stopped); numbers to 4 significant digits."""
    from dataclasses import asdict, is_dataclass

    from rich.table import Table

    values = asdict(result) if is_dataclass(result) else dict(result)
    groups = {k: v for k, v in values.items()
              if isinstance(v, dict) and all(isinstance(x, (int, float)) for x in v.values())}
    plain = {k: (", ".join(f"{a} {b}" for a, b in v.items()) if isinstance(v, dict) else v)
             for k, v in values.items() if k not in groups}
    shown = lambda v: f"{v:.4g}" if isinstance(v, float) else str(v)  # noqa: E731
    table = Table(title=title)
    table.add_column("")
    if groups:
        names = sorted({key for group in groups.values() for key in group}, key=list(
            dict.fromkeys(key for group in groups.values() for key in group)).index)
        for group in groups:
            table.add_column(group, justify="right")
        for name in names:
            table.add_row(name, *(shown(group[name]) if name in group else "-" for group in groups.values()))
    else:
        table.add_column("value", justify="right")
    for name, value in plain.items():
        table.add_row(name, *([shown(value)] + [""] * (max(len(groups), 1) - 1)))
    return table


def _placed(config):
    """The cluster torchrun started (one process outside it) and the config with the
    strategy it runs under written in (`distributed.strategy`)."""
    from rlhflab.config import with_strategy
    from rlhflab.distributed import Cluster

    cluster = Cluster.from_environment()
    return with_strategy(config, cluster.world_size), cluster


def print_diagnosis(diagnosis) -> None:
    """The verdict and what could be checked, then the findings as a rich table, then each
    one's causes, fix (in the vocabulary of the trainer that wrote the log) and how to
    verify it."""
    from rich.table import Table

    from rlhflab.doctor import render_change, verify_command

    read = f"{diagnosis.steps} steps read as {diagnosis.trainer} ({diagnosis.format})"
    if diagnosis.verdict == "no_finding":
        console.print(f"[green]no finding[/green] of medium or high severity: {diagnosis.source} ({read})")
    elif diagnosis.verdict == "cannot_tell":
        console.print(f"[yellow]cannot tell[/yellow]: {diagnosis.source} ({read}); needs "
                      f"{escape(diagnosis.cannot_tell_reason())}")
    coverage = Table(title="what could be checked")
    for column in ("symptom family", "status", "steps", "rules, or what is missing"):
        coverage.add_column(column)
    for family, c in diagnosis.coverage.items():
        coverage.add_row(family, c.status.replace("_", " "), str(c.steps) if c.status == "checked" else "",
                         escape(c.detail))
    console.print(coverage)
    if diagnosis.findings:
        table = Table(title=f"doctor: {diagnosis.source}")
        for column in ("severity", "rule", "symptom", "onset", "finding", "likely cause"):
            table.add_column(column)
        for f in diagnosis.findings:
            cause = f.causes[0].component if f.causes else "?"
            table.add_row(f.severity, f.rule, f.symptom, str(f.onset_step), f.title, cause)
        console.print(table)
        for f in diagnosis.findings:
            console.print(f"[bold]{f.rule}[/bold] (step {f.onset_step}): {f.title}")
            for e in f.evidence:
                observed = ", ".join(f"{k}={v:.4g}" for k, v in e.observed.items())
                console.print(f"  evidence: {e.metric} {observed}; threshold: {e.threshold} [dim]({e.source})[/dim]")
            for rank, c in enumerate(f.causes, start=1):
                fix = (" -> fix " + ", ".join(render_change(diagnosis.vocabulary, ch) for ch in c.fix.changes)
                       if c.fix else "")
                console.print(f"  {rank}. {c.component}: {c.explanation}{escape(fix)}")
            console.print(f"  verify: {escape(verify_command(diagnosis, f))}")
    if diagnosis.skipped:
        console.print("[dim]not run for lack of metrics: "
                      + escape("; ".join(f"{r} (needs {', '.join(m)})" for r, m in diagnosis.skipped.items())) + "[/dim]")
    for g in diagnosis.guesses:
        taken = g["taken_for"] or "kept apart, meaning unknown"
        console.print(f"[dim]name read by guess: {escape(g['name'])} -> {escape(taken)}: {escape(g['why'])}[/dim]")
    if diagnosis.evaluation:
        console.print("[dim]evaluation metrics (kept apart): " + escape(", ".join(diagnosis.evaluation)) + "[/dim]")
    if diagnosis.unknown_metrics:
        console.print("[dim]metrics not understood: " + escape(", ".join(diagnosis.unknown_metrics)) + "[/dim]")
    for note in diagnosis.notes:
        console.print(f"[dim]note: {escape(note)}[/dim]")


def _list_formats() -> None:
    from rich.table import Table

    from rlhflab.doctor import DIALECTS, FORMATS

    files = Table(title="log files (recognised by content, in this order; force one with --format NAME)")
    for column in ("name", "reads", "trainers"):
        files.add_column(column)
    for fmt in FORMATS:
        files.add_row(fmt.name, fmt.description,
                      ", ".join(d.name for d in fmt.dialects) if fmt.dialects else "any (told by the names)")
    console.print(files)
    trainers = Table(title="trainers (their names, units and the keys fixes are written in)")
    for column in ("name", "logs", "names mapped"):
        trainers.add_column(column)
    for dialect in DIALECTS:
        trainers.add_row(dialect.name, dialect.description, str(len(dialect.columns)) if dialect.columns else "canonical")
    console.print(trainers)
    from rlhflab.doctor import SAMPLE_FORMATS

    samples = Table(title="sample files (--samples FILE, or found beside the log)")
    for column in ("name", "reads"):
        samples.add_column(column)
    for fmt in SAMPLE_FORMATS:
        samples.add_row(fmt.name, fmt.description)
    console.print(samples)


@app.command()
def doctor(
    path: Optional[Path] = typer.Argument(None, help="Run directory, trainer_state.json, TensorBoard dir, .csv or "
                                          ".jsonl"),
    json_output: bool = typer.Option(False, "--json", help="Print diagnosis.json instead of the table."),
    mapping: Optional[list[str]] = typer.Option(None, "--map", help="THEIRS=canonical/name (THEIRS=step names the "
                                                "step column), or a .toml mapping file that can also give units"),
    format_name: Optional[str] = typer.Option(None, "--format", help="Read the log with this format "
                                              "(see --list-formats) instead of recognising it."),
    samples: Optional[Path] = typer.Option(None, "--samples", help="The generated text beside the log: a sample "
                                           "file or dump directory (rlhflab, veRL, TRL, or any JSONL/CSV with "
                                           "--map THEIRS=sample/FIELD); default: those found beside the log."),
    html: Optional[Path] = typer.Option(None, "--html", help="Also write the report (curves, findings, the samples "
                                        "at each finding's onset) to this HTML file."),
    list_formats: bool = typer.Option(False, "--list-formats", help="List the log formats and exit."),
    rules_doc: Optional[Path] = typer.Option(None, "--rules-doc", help="Rewrite the generated tables in this markdown "
                                             "file (docs/doctor.md) from the rule registry, and exit."),
    follow: bool = typer.Option(False, "--follow", help="Follow a log that is still being written: tell each "
                                "finding when it first appears."),
    stop_on: str = typer.Option("", "--stop-on", help="With --follow: exit 1 as soon as one of these rules "
                                "(comma-separated) fires, so a wrapper script can stop the run."),
    interval: float = typer.Option(2.0, "--interval", help="With --follow: seconds between looks at the log."),
    idle_exit: Optional[float] = typer.Option(None, "--idle-exit", help="With --follow: stop following once the "
                                              "log has not changed for this many seconds (default: never)."),
    truth: Optional[str] = typer.Option(None, "--truth", help="STUDY[:SYSTEM]: read a rating study's mean rating "
                                        "per step bin as the run's gold (default for a run without a gold of its "
                                        "own: a study in RUN/studies/)."),
    plan: bool = typer.Option(False, "--plan", help="Print the ablation plan for the log's findings instead: one "
                              "command per candidate fix and seed, and the control, in the trainer's own syntax, "
                              "then the rlhflab compare that ranks them."),
    command: Optional[str] = typer.Option(None, "--command", help="With --plan: your launch command; a key it already "
                                          "sets is replaced."),
    seeds: Optional[int] = typer.Option(None, "--seeds", min=1, help="With --plan: seeds per arm (default: from "
                                        "the run's noise, at least 3)."),
    top: int = typer.Option(3, "--top", min=1, help="With --plan: the fixes of the doctor's top K causes."),
    plan_out: str = typer.Option("ablation", "--plan-out", help="With --plan: the directory the planned runs "
                                 "write under (ARM/seedK/ each)."),
    run: Optional[int] = typer.Option(None, "--run", min=1, help="A console holding several runs (a banner or a "
                                      "printed config before a step counter that started over): diagnose run N "
                                      "(1 = the first; default the last)."),
) -> None:
    """Diagnose a run or another trainer's log: findings, evidence, ranked causes, fixes.

    Exit code: 1 for a finding of medium or high severity; 0 for none, when at least 10
    steps and two symptom families could be checked; 3 ("cannot tell") when not; 2 for
    bad input. With --follow: 1 as soon as a --stop-on rule fires; at --idle-exit, the
    code of the last diagnosis; 130 when interrupted."""
    import json

    from rlhflab.doctor import LogFormatError, diagnosis_json, parse_map_options, read_and_diagnose, write_diagnosis

    if list_formats:
        _list_formats()
        return
    if rules_doc is not None:
        from rlhflab.doctor import write_rules_doc

        write_rules_doc(rules_doc)
        console.print(f"wrote the generated tables of {rules_doc} (rules, clues, spellings, impossible numbers, "
                      "file kinds, trainers)")
        return
    if path is None:
        console.print("[red]error:[/red] give a log to diagnose (or --list-formats)")
        raise typer.Exit(2)
    if follow:
        if truth is not None:
            console.print("[red]error:[/red] --truth is read once, not followed: diagnose without --follow")
            raise typer.Exit(2)
        _follow(path, parse_map_options(mapping), format_name, stop_on, interval, idle_exit)
    try:
        table, diagnosis = read_and_diagnose(path, parse_map_options(mapping), format_name, samples,
                                             truth=lambda table: _rated_truth(path, truth, table), run=run)
    except LogFormatError as err:
        console.print(f"[red]error:[/red] {escape(str(err))}")
        raise typer.Exit(2) from None
    if plan:
        _print_plan(table, diagnosis, command, seeds, top, plan_out, json_output, tuple(mapping or ()))
    if diagnosis.format == "rlhflab":
        write_diagnosis(diagnosis, path / "diagnosis.json")
    if html is not None:
        from rlhflab.doctor import write_report

        write_report(path if path.is_dir() else path.parent, table, diagnosis, out=html)
    if json_output:
        typer.echo(json.dumps(diagnosis_json(diagnosis), indent=2))
    else:
        print_diagnosis(diagnosis)
    raise typer.Exit(diagnosis.exit_code)


def _print_plan(table, diagnosis, command: Optional[str], seeds: Optional[int], top: int, out: str,
                json_output: bool, maps: tuple[str, ...]) -> None:
    """doctor --plan (doctor/plan.py): exit 0 with a plan checked, 1 when a planned command
    fails its check, 2 when no plan can be written."""
    import json

    from rlhflab.doctor import LAUNCHERS_BY_DIALECT, PlanError, check_plan, plan_for_log

    if diagnosis.format == "rlhflab":
        console.print(f"[red]error:[/red] rlhflab reruns its own runs: rlhflab ablate {diagnosis.source}")
        raise typer.Exit(2)
    try:
        planned = plan_for_log(table, diagnosis, command, seeds, top, out, maps)
    except PlanError as err:
        console.print(f"[red]error:[/red] {escape(str(err))}")
        raise typer.Exit(2) from None
    check = check_plan(LAUNCHERS_BY_DIALECT[table.settings.trainer], planned)
    if json_output:
        typer.echo(json.dumps(planned.to_json() | {"checked_by": check.checked_by, "check_errors": check.errors},
                              indent=2))
        raise typer.Exit(0 if check.ok else 1)
    # Plain text on stdout, every line not a command a shell comment: `--plan > plan.sh` runs.
    lines = [f"# ablation plan for {diagnosis.source} ({planned.trainer}): {len(planned.arms) - 1} candidate "
             f"fix(es) and the control, {len(planned.seeds)} seeds each",
             f"# seeds: {planned.seeds_why}"]
    lines += [f"# warning: {w}" for w in planned.warnings]
    for arm, changes in planned.arms.items():
        lines += ["", f"# {arm}: {', '.join(changes) or 'the run as it was'}"]
        lines += [r.command for r in planned.runs if r.arm == arm]
    lines += ["", "# then rank the arms, each against the control:", planned.compare, ""]
    lines += [f"# not planned: {s}" for s in planned.skipped] + [f"# note: {n}" for n in planned.notes]
    if check.ok:
        lines.append(f"# checked: every setting the plan adds, by {check.checked_by}")
    lines += [f"# CHECK FAILED ({check.checked_by}): {e}" for e in check.errors]
    typer.echo("\n".join(lines))
    raise typer.Exit(0 if check.ok else 1)


def _rated_truth(log: Path, truth: Optional[str], table):
    """The rated truth `--truth` names (a study that cannot be read is bad input, exit 2), or
    one found in the run (`studies.truth.found_truth`), or None."""
    from rlhflab.studies.store import DATABASE_FILE

    if truth is None:
        if not (log.is_dir() and any((log / "studies").glob(f"*/{DATABASE_FILE}"))):
            return None
        try:
            from rlhflab.studies.truth import found_truth
        except ImportError:  # the studies extra is absent: diagnose without the study
            table.notes.append(f"a rating study is in {log / 'studies'}; reading it needs pip install 'rlhflab[studies]'")
            return None
        return found_truth(log, table)
    _studies_extra()
    from rlhflab.studies.design import StudyError
    from rlhflab.studies.truth import named_truth

    try:
        return named_truth(log, truth)
    except StudyError as err:
        console.print(f"[red]error:[/red] --truth: {escape(str(err))}")
        raise typer.Exit(2) from None


def _follow(path: Path, mapping, format_name: Optional[str], stop_on: str, interval: float,
            idle_exit: Optional[float]) -> None:
    """`doctor --follow`: tell findings as they appear; exits with the code the docstring of `doctor` gives."""
    from rlhflab.doctor import LogFormatError, Watch, follow, stop_rules

    try:
        watch = Watch(stop_rules(stop_on))
    except ValueError as err:
        console.print(f"[red]error:[/red] --stop-on: {escape(str(err))}")
        raise typer.Exit(2) from None
    console.print(f"following {path} (every {interval:g} s{'; stop on ' + stop_on if stop_on else ''}); Ctrl-C ends")
    try:
        followed = follow(path, watch, mapping, format_name, interval, idle_exit, emit=lambda line: console.print(
            escape(line), highlight=False))
    except LogFormatError as err:
        console.print(f"[red]error:[/red] {escape(str(err))}")
        raise typer.Exit(2) from None
    except KeyboardInterrupt:
        if watch.diagnosis is not None:
            print_diagnosis(watch.diagnosis)
        raise typer.Exit(130) from None
    print_diagnosis(followed.watch.diagnosis)
    if followed.reason == "stop":
        finding = followed.watch.stopped_by
        console.print(f"[red]stop:[/red] {finding.rule} fired at step {finding.onset_step} (--stop-on)")
        raise typer.Exit(1)
    raise typer.Exit(followed.watch.diagnosis.exit_code)


@app.command()
def report(run: Path = typer.Argument(..., help="Run directory")) -> None:
    """(Re)write RUN/report.html: curves, findings with onsets, samples."""
    from rlhflab.doctor import LogFormatError, read_and_diagnose, write_diagnosis, write_report

    try:
        table, diagnosis = read_and_diagnose(run, format_name="rlhflab")
    except LogFormatError as err:
        console.print(f"[red]error:[/red] {escape(str(err))}")
        raise typer.Exit(2) from None
    write_diagnosis(diagnosis, run / "diagnosis.json")
    console.print(f"wrote {write_report(run, table, diagnosis)}")


@app.command()
def verify(
    run: Path = typer.Argument(..., help="Run directory to verify a fix on"),
    fix: list[str] = typer.Option(..., "--fix", help="Dotted override, e.g. ppo.kl_coef=0.2 (repeatable)"),
    out: Optional[Path] = typer.Option(None, "--out", help="Rerun directory (default RUN-verify)"),
    quiet: bool = typer.Option(False, "--quiet"),
    pair: bool = typer.Option(False, "--pair", help="Then a comparison study of both policies on the run's held-out "
                              "prompts (RERUN/studies/pairs): its links printed, or with --judge answered at once "
                              "and its preference the truth of the verdict."),
    judge: Optional[str] = typer.Option(None, "--judge", help="With --pair: KIND:PATH, as for rlhflab pair "
                                        "(rm:DIR, lm:DIR with --template, world:RUN)."),
    template: Optional[Path] = typer.Option(None, "--template", help="With --judge lm:DIR: the pairwise template."),
) -> None:
    """Rerun RUN's config with the same seeds and the fix; compare the diagnoses."""
    _training_stack()
    from rlhflab.config import ConfigError
    from rlhflab.verify import verify as run_verify

    if not (run / "config.toml").is_file():
        console.print(f"[red]error:[/red] {run}/config.toml not found: not an rlhflab run directory")
        raise typer.Exit(2)
    try:
        result = run_verify(run, fix, out, show_progress=not quiet)
    except ConfigError as err:
        console.print(f"[red]config error:[/red] {escape(str(err))}")
        raise typer.Exit(2) from None
    console.print(f"verify {' '.join(fix)}: {run} -> {result.rerun}")
    if not result.comparison.findings:
        console.print("the original run had no finding")
    if judge is not None and not pair:
        console.print("[red]error:[/red] --judge answers a comparison study: give --pair too")
        raise typer.Exit(2)
    if pair:
        _verify_by_preference(run, result, judge, template)
        return
    print_comparison(result.comparison)


def _verify_by_preference(run: Path, result, judge_spec: Optional[str], template: Optional[Path]) -> None:
    """verify --pair: both policies sampled on the run's held-out prompts, a comparison study
    of the two; with a judge, answered at once and its preference the verdict's truth."""
    _studies_extra()
    _training_stack()
    from rlhflab.doctor import compare_tables, read_and_diagnose
    from rlhflab.studies.design import StudyError
    from rlhflab.studies.pair_results import preference_change
    from rlhflab.verify import preference_study

    try:
        study, links, (before, after) = preference_study(Path(run), Path(result.rerun), _sample_one)
    except StudyError as err:
        console.print(f"[red]error:[/red] {escape(str(err))}")
        raise typer.Exit(2) from None
    study_dir = study.directory
    if judge_spec is None:
        print_comparison(result.comparison)
        console.print(f"comparison study {study_dir}: {study.item_count()} pairs; serve it to people with: "
                      f"rlhflab pair {study_dir}; then: rlhflab compare {run} -- {result.rerun} --truth {study_dir}")
        _print_links(links)
        return
    _judge_pairs(study, judge_spec, template, Path(run) / "stage1_lm")
    try:
        truth = preference_change(study, [before], [after], kinds=("judge",))
    except StudyError as err:
        console.print(f"[red]error:[/red] {escape(str(err))}")
        raise typer.Exit(2) from None
    comparison = compare_tables([read_and_diagnose(Path(run))[0]], [read_and_diagnose(Path(result.rerun))[0]],
                                truth=truth)
    print_comparison(comparison)
    raise typer.Exit(comparison.exit_code)


@app.command()
def ablate(
    run: Path = typer.Argument(..., help="Run directory to ablate"),
    top: int = typer.Option(3, "--top", min=1, help="Candidate fixes: those of the doctor's top K causes."),
    seeds: Optional[int] = typer.Option(None, "--seeds", min=1, help="Seeds per arm (default: from the measured "
                                        "seed spread and the run's size; a warning when fewer)."),
    fix: Optional[list[str]] = typer.Option(None, "--fix", help="An arm of your own: key=value[,key=value] "
                                            "(repeatable)."),
    jobs: int = typer.Option(1, "--jobs", min=1, help="Seeds run at once, each with cores/jobs torch threads."),
    resume: bool = typer.Option(False, "--resume", help="Continue an ablation that was cut (or add seeds)."),
    json_out: bool = typer.Option(False, "--json", help="Print ablate.json."),
    quiet: bool = typer.Option(False, "--quiet"),
    judge: Optional[str] = typer.Option(None, "--judge", help="KIND:PATH (as for rlhflab pair): each arm's truth is "
                                        "its preference over the control, a judge comparing their first seeds' "
                                        "policies on the run's held-out prompts."),
    template: Optional[Path] = typer.Option(None, "--template", help="With --judge lm:DIR: the pairwise template."),
) -> None:
    """The doctor's candidate fixes, one at a time, over seeds, against a control: the confirmed
    cause, or "no setting cures it". Writes RUN/ablate/ (ablate.json, report.html)."""
    _training_stack()
    from rlhflab.ablate import AblateError
    from rlhflab.ablate import ablate as run_ablate
    from rlhflab.config import ConfigError
    from rlhflab.runs import read_json

    if not (run / "config.toml").is_file() or not (run / "metrics" / "ppo.jsonl").is_file():
        console.print(f"[red]error:[/red] {run}: not an rlhflab run directory with a PPO stage (config.toml and "
                      "metrics/ppo.jsonl)")
        raise typer.Exit(2)
    try:
        with _interruptible():
            result = run_ablate(run, top, seeds, fix or [], jobs, resume, show_progress=not quiet, judge=judge,
                                template=template.read_text(encoding="utf-8") if template else None)
    except (ConfigError, AblateError) as err:
        console.print(f"[red]error:[/red] {escape(str(err))}")
        raise typer.Exit(2) from None
    summary = read_json(result.root / "ablate.json")
    if json_out:
        print(json.dumps(summary, indent=2))
    else:
        print_ablation(summary)
    console.print(f"report: {result.root / 'report.html'}")
    raise typer.Exit(result.ranking.exit_code)


def print_ablation(summary: dict, what: str = "ablation of") -> None:
    from rich.table import Table

    table = Table(title=f"{what} {summary['run']} ({len(summary['plan']['seeds'])} seeds a side), best first")
    for column in ("arm", "against the control", "findings", "truth's change (95%)"):
        table.add_column(column)
    for a in summary["arms"]:
        truth = a["comparison"]["truth"]
        change = f"{truth['change']:+.3g} [{truth['low']:+.3g}, {truth['high']:+.3g}]" if truth else "-"
        findings = ", ".join(f"{f['rule']}: {f['status']}" for f in a["comparison"]["findings"])
        label = ", ".join(a["arm"]["changes"])
        if a["arm"]["kind"] == "observed":  # runs given to compare: named, with the settings their logs show
            label = a["arm"]["name"] + (f" ({label})" if label else "")
        table.add_row(escape(label), a["verdict"] + (" (confirmed)" if a["confirmed"] else ""), findings, change)
    console.print(table)
    console.print(f"[bold]verdict: {summary['verdict']}[/bold]: {summary['why']}")
    console.print(f"next: {summary['next']}")


@app.command()
def checkup(
    run: Optional[Path] = typer.Argument(None, help="Run directory holding stage1_lm/ and stage2_rm/"),
    overrides: Optional[list[str]] = typer.Argument(None, help="Dotted overrides for own models, e.g. "
                                                    "ppo.response_length=64", show_default=False),
    policy: Optional[Path] = typer.Option(None, "--policy", help="Your HF causal-LM directory (with its tokenizer)."),
    reward_model: Optional[Path] = typer.Option(None, "--reward-model", help="Your HF 1-label reward-model directory."),
    prompts: Optional[Path] = typer.Option(None, "--prompts", help="Prompts (.jsonl/.parquet, field 'prompt')."),
    pairs: Optional[Path] = typer.Option(None, "--pairs", help="Preference pairs; the RM is tested on their "
                                         "held-out share (data.heldout_fraction)."),
    out: Optional[Path] = typer.Option(None, "--out", help="Where checkup.json goes (own models; default: cwd)."),
    skip_invalid: bool = SkipInvalidOption,
    preset: str = PresetOption,
    config_file: Optional[Path] = ConfigOption,
) -> None:
    """Probes of what must hold in any correct PPO-RLHF implementation (logprobs and ratio, gradients,
    credit, masks, the update's direction, the reference, the reward model), run through one real
    iteration: pass/fail with the measured number; settings outside published ranges as warnings.

    On a run directory: `rlhflab checkup RUN` (writes RUN/checkup.json). On your own models, for another
    trainer: `rlhflab checkup --policy DIR --reward-model DIR --prompts FILE [--pairs FILE] [k=v ...]`
    runs the probes of the models and lists those of rlhflab's own trainer as not run."""
    _training_stack()
    from rich.table import Table

    from rlhflab.checkup import run_checkup
    from rlhflab.faults.zoo import components_for
    from rlhflab.runs import RunDir

    own = policy is not None or reward_model is not None
    if own and run is not None and "=" in run.name:  # no run dir: the first positional is an override
        overrides, run = [str(run), *(overrides or [])], None
    if own == (run is not None):
        console.print("[red]error:[/red] give a run directory, or --policy, --reward-model and --prompts")
        raise typer.Exit(2)
    if own:
        if policy is None or reward_model is None or prompts is None:
            console.print("[red]error:[/red] own models need --policy DIR, --reward-model DIR and --prompts FILE")
            raise typer.Exit(2)
        given = {"data.policy": policy, "data.reward_model": reward_model, "data.prompts": prompts,
                 "data.preferences": pairs, "data.skip_invalid": skip_invalid}
        own_overrides = [f"{k}={v}" for k, v in given.items() if v is not None]
        config = _config(preset, config_file, [*(overrides or []), *own_overrides])
        run = out or Path(".")
        run.mkdir(parents=True, exist_ok=True)
    else:
        _require(run / "stage1_lm", "pretrain")
        _require(run / "stage2_rm", "reward")
        config = _stage_config(run, "demo", None, None)  # the run's own config
    with _input_errors():
        found = run_checkup(config, RunDir(run), components_for(config), trainer=not own)
    table = Table(title=f"checkup: {run}")
    for column in ("probe", "state", "component", "result", "measured", "tolerance", "what"):
        table.add_column(column)
    for r in found.results:
        table.add_row(r.name, r.state, r.component, "[green]pass[/green]" if r.passed else "[red]FAIL[/red]",
                      f"{r.measured:.3g}", r.tolerance, r.detail)
    console.print(table)
    for state, how in found.states.items():
        console.print(f"state {state}: {how}")
    console.print(f"cleared: {', '.join(found.cleared) or 'none'}")
    for name, why in found.skipped.items():
        console.print(f"not run: {name}: {why}")
    for s in found.warnings:
        console.print(f"[yellow]warning:[/yellow] {s.setting} = {s.value:g} is outside {s.supported} ({s.source})"
                      + (f"; {s.note}" if s.note else ""))
    console.print(f"wrote {run / 'checkup.json'}")
    if not all(r.passed for r in found.results):
        raise typer.Exit(1)


faults_app = typer.Typer(no_args_is_help=True, help="The fault zoo: named wrong components that reproduce failures.")
app.add_typer(faults_app, name="faults")


@faults_app.command("list")
def faults_list() -> None:
    """Every fault: name, component, expected symptom, and the real-world bug it models."""
    from rich.table import Table

    from rlhflab.faults.zoo import FAULTS

    table = Table(title="fault zoo")
    for column in ("name", "component", "expected symptom", "models"):
        table.add_column(column)
    for f in FAULTS:
        table.add_row(f.name, f.component, f.symptom, f.reproduces)
    console.print(table)


@faults_app.command("show")
def faults_show(name: str = typer.Argument(..., help="Fault name")) -> None:
    """One fault in full, with what it replaces and its config."""
    import inspect

    from rlhflab.config import load_config
    from rlhflab.faults.zoo import get_fault

    try:
        fault = get_fault(name)
    except KeyError as err:
        console.print(f"[red]error:[/red] {escape(err.args[0])}")
        raise typer.Exit(2) from None
    console.print(f"[bold]{fault.name}[/bold]  component: {fault.component}\n"
                  f"models: {fault.reproduces}\nexpected symptom: {fault.symptom}\nreplaces: {fault.replaces}")
    config = fault.config(load_config("demo"))
    if config:
        console.print("config: " + " ".join(f"{k}={v}" for k, v in config.items()) + " (on the demo preset)")
    for field_name, function in fault.code.items():
        console.print(f"code: {field_name} = {function.__name__}: {inspect.getdoc(function)}")


@faults_app.command("bench")
def faults_bench(
    preset: str = typer.Option("smoke", "--preset", help="Size of every run: smoke or demo."),
    seeds: list[int] = typer.Option([0, 1, 2], "--seed", help="Seeds of the healthy runs (repeatable)."),
    only: Optional[list[str]] = typer.Option(None, "--fault", help="Bench only these faults (repeatable)."),
    out: Path = typer.Option(Path("runs/faults-bench"), "--out", help="Where the runs go."),
    doc: Path = typer.Option(Path("docs/faults.md"), "--doc", help="Markdown table to write."),
    rescore: bool = typer.Option(False, "--rescore", help="Check and diagnose the runs already in --out again, "
                                 "without training them (after a change to the doctor or the checkup)."),
) -> None:
    """Run the healthy pipeline and every fault, then the checkup and the doctor; score them."""
    _training_stack()
    from rlhflab.faults_bench import run_bench

    command = "rlhflab faults bench --preset " + preset + "".join(f" --seed {s}" for s in seeds) + "".join(
        f" --fault {f}" for f in only or []) + (" --rescore" if rescore else "")
    healthy, rows = run_bench(preset, seeds, out, only, doc, command, rescore)
    for r in healthy + rows:
        console.print(f"{r.name:40s} detected={r.detected!s:5s} first={r.first_component or '-':22s} "
                      f"log-only={r.log_only_component or '-':22s} "
                      f"findings={','.join(r.findings) or '-'} probes={','.join(r.failed_probes) or '-'} {r.seconds:.0f}s")
    console.print(f"wrote {doc}")


# `rlhflab compare BEFORE... -- AFTER...`: click drops a `--` from the arguments it hands on,
# so `main` replaces the first one after `compare` by this marker before the app parses them.
AFTER_MARK = "::after::"


@app.command()
def compare(
    runs: list[str] = typer.Argument(..., help="BEFORE... -- AFTER...: run directories or logs of any format the "
                                     "doctor reads, before the fix, then after it; BEFORE... -- ARM1... -- ARM2...: "
                                     "several arms, each against BEFORE, ranked"),
    json_output: bool = typer.Option(False, "--json", help="Print the comparison as JSON."),
    html_path: Optional[Path] = typer.Option(None, "--html", help="Write both sides' curves, overlaid, with the "
                                             "findings marked, to this file."),
    mapping: Optional[list[str]] = typer.Option(None, "--map", help="As for `rlhflab doctor`, for both sides."),
    truth: Optional[Path] = typer.Option(None, "--truth", help="A study holding both sides as systems: a rating "
                                         "study (the change of their mean rating, its interval from resampling "
                                         "items and raters) or a comparison study (rlhflab pair: the after side's "
                                         "win rate, Wilson's interval; before preferred makes it worse)."),
    rank: bool = typer.Option(False, "--rank", help="Rank the groups after BEFORE as arms, as with several, even "
                              "when there is one (a cure confirmed or not, as rlhflab ablate says it)."),
) -> None:
    """Compare runs before and after a fix, in their noise: each finding of the before side gone, weaker or
    still there; new findings; the change of the truth (gold or held-out score, else the proxy, said) with
    its interval; the settings that differ; a verdict. With several `--` groups, each group is one arm (its
    runs are its seeds), compared with BEFORE the same way and ranked as `rlhflab ablate` ranks its arms.

    Exit code: 0 fixed (several arms: a confirmed cure); 1 not fixed or worse (several arms: no arm cures
    it); 3 partly fixed or cannot tell (several arms: not confirmed, cannot tell); 2 bad input."""
    import json

    from rlhflab.doctor import LogFormatError, compare_tables, parse_map_options, read_log

    groups = split_at_marks(runs)
    if len(groups) < 2 or not all(groups):
        console.print("[red]error:[/red] give the runs before the fix, then --, then the runs after it: "
                      "rlhflab compare BEFORE... -- AFTER... (or BEFORE... -- ARM1... -- ARM2... for several arms)")
        raise typer.Exit(2)
    try:
        user_map = parse_map_options(mapping or [])
        tables = [[read_log(Path(r), user_map) for r in group] for group in groups]
    except (LogFormatError, ValueError) as err:
        console.print(f"[red]error:[/red] {escape(str(err))}")
        raise typer.Exit(2) from None
    if len(groups) > 2 or rank:
        _compare_arms(groups, tables, truth, json_output, html_path)
        return
    before, after = tables
    change = _study_truth_change(truth, groups[0], groups[1], before, after) if truth is not None else None
    result = compare_tables(before, after, truth=change)
    if html_path is not None:
        from rlhflab.doctor import write_compare_report

        write_compare_report(html_path, before[0], after[0], result)
    if json_output:
        print(json.dumps(result.to_json(), indent=1, default=str))
    else:
        print_comparison(result)
    raise typer.Exit(result.exit_code)


def split_at_marks(runs: list[str]) -> list[list[str]]:
    """compare's arguments cut at each `--` (kept as AFTER_MARK by `main`)."""
    groups: list[list[str]] = [[]]
    for run in runs:
        if run == AFTER_MARK:
            groups.append([])
        else:
            groups[-1].append(run)
    return groups


def _compare_arms(groups: list[list[str]], tables, truth: Optional[Path], json_output: bool,
                  html_path: Optional[Path]) -> None:
    """`rlhflab compare BEFORE -- ARM1 -- ARM2 ...`: each arm against BEFORE, ranked (doctor/arms.py)."""
    import json

    from rlhflab.doctor import arm_names, diagnose, observed_arm, rank_arms

    control, arm_groups = tables[0], tables[1:]
    names = arm_names([Path(group[0]) for group in groups])
    arms = [(observed_arm(name, control, runs), runs) for name, runs in zip(names, arm_groups)]
    truths = None
    if truth is not None:
        truths = {name: _study_truth_change(truth, groups[0], runs, control, arm_tables)
                  for name, runs, arm_tables in zip(names, groups[1:], arm_groups)}
    ranking = rank_arms(control, arms, truths=truths)
    summary = {"run": ", ".join(groups[0]), "plan": {"seeds": list(range(len(control))), "skipped": [],
                                                   "seeds_why": f"{len(control)} runs before, as given"},
               **ranking.to_json(), "arms_given": dict(zip(names, groups[1:])), "next": ranking.next_step()}
    if html_path is not None:
        from rlhflab.doctor import write_ablation_report

        write_ablation_report(html_path, control[0], diagnose(control[0]), ranking, control,
                              {name: runs for name, runs in zip(names, arm_groups)}, summary)
    if json_output:
        print(json.dumps(summary, indent=1, default=str))
    else:
        print_ablation(summary, "arms against")
    raise typer.Exit(ranking.exit_code)


RATE_HELP = """Blind ratings of a run's samples across its steps, served on a local page.

    rlhflab rate RUN                        # build RUN/studies/ratings and serve it
    rlhflab rate a=run1 b=gens.jsonl --study DIR --map text=sample/response
    rlhflab rate DIR --results [--json]     # mean rating per system and step bin

Each source is [NAME=]PATH: a run or any sample file the doctor reads. Reopening a study
serves the same rater links; --add adds sources to it. Exit code 2 for bad input."""


@app.command(help=RATE_HELP)
def rate(
    sources: Optional[list[str]] = typer.Argument(None, help="[NAME=]PATH of each run or sample file (or a study "
                                                 "directory)", show_default=False),
    study: Optional[Path] = typer.Option(None, "--study", help="The study's directory (default for one rlhflab run: "
                                         "RUN/studies/ratings)."),
    mapping: Optional[list[str]] = typer.Option(None, "--map", help="THEIRS=sample/FIELD for sample files "
                                                "(as for the doctor)"),
    add: bool = typer.Option(False, "--add", help="Add these sources to an existing study."),
    results: bool = typer.Option(False, "--results", help="Print the study's results and exit."),
    json_output: bool = typer.Option(False, "--json", help="With --results: print them as JSON."),
    scale: Optional[str] = typer.Option(None, "--scale", help="The rating scale LOW-HIGH (default 1-7), plus "
                                        "'unreadable/broken'."),
    bins: Optional[int] = typer.Option(None, "--bins", help="Step bins per system (default 10)."),
    per_bin: Optional[int] = typer.Option(None, "--per-bin", help="Distinct samples drawn per bin (default 8)."),
    ratings_per_item: Optional[int] = typer.Option(None, "--ratings-per-item", help="Raters per item at least "
                                                   "(default 2)."),
    repeat_every: Optional[int] = typer.Option(None, "--repeat-every", help="A repeated item after this many new "
                                               "ones, for consistency (default 10; 0: never)."),
    seed: Optional[int] = typer.Option(None, "--seed", help="Seeds the draw of items (default 0)."),
    raters: Optional[int] = typer.Option(None, "--raters", help="Rater links (one per person; default: ratings "
                                         "per item). Reopening with more adds links."),
    host: str = HostOption,
    port: int = PortOption,
    no_serve: bool = NoServeOption,
    judges: Optional[list[str]] = typer.Option(None, "--judge", help="KIND:DIR: rate every item with a local model "
                                               "and exit: rm (a reward model dir), classifier (any sequence "
                                               "classifier), lm (a causal LM asked with --template)."),
    template: Optional[Path] = typer.Option(None, "--template", help="With --judge lm:DIR: the prompt, with "
                                            "{prompt}, {response} (and {low}, {high}), ending where the rating's "
                                            "number follows."),
    label: Optional[str] = typer.Option(None, "--label", help="With --judge classifier:DIR: the label whose "
                                        "probability is the score (default: the last)."),
    tokenizer: Optional[Path] = typer.Option(None, "--tokenizer", help="With --judge rm:DIR for a reward model "
                                             "saved without a tokenizer: the directory of the one it reads."),
    export: Optional[str] = typer.Option(None, "--export", help="label-studio or argilla: write the study's items "
                                         "(blind, shuffled) as that tool's tasks or records to --out, and exit."),
    out: Optional[Path] = typer.Option(None, "--out", help="With --export: the file to write."),
    import_file: Optional[Path] = typer.Option(None, "--import", help="A Label Studio JSON export or Argilla records "
                                               "of this study's items: their ratings join the study's, and exit."),
) -> None:
    _studies_extra()
    from rlhflab.doctor import LogFormatError, parse_map_options
    from rlhflab.studies.build import open_or_build, open_rating_study, parse_sources, study_directory
    from rlhflab.studies.design import StudyError, parse_scale

    try:
        study, sources = _study_or_sources(study, sources)
        parsed = parse_sources(sources or [])
        directory = study_directory(study, parsed)
        if results:
            _print_study_results(open_rating_study(directory), json_output)
            return
        asked = {k: v for k, v in dict(bins=bins, per_bin=per_bin, ratings_per_item=ratings_per_item,
                                       repeat_every=repeat_every, seed=seed).items() if v is not None}
        if scale is not None:
            asked["scale_min"], asked["scale_max"] = parse_scale(scale)
        opened, added = open_or_build(directory, parsed, asked, add, parse_map_options(mapping).for_samples())
        links = opened.ensure_raters(raters or opened.design.ratings_per_item)
    except (StudyError, LogFormatError) as err:
        console.print(f"[red]error:[/red] {escape(str(err))}")
        raise typer.Exit(2) from None
    _announce_study(opened, added, links, f"study {directory}", "items")
    if judges:
        _run_judges(opened, judges, template, label, tokenizer)
        return
    if export is not None or import_file is not None:
        _interchange(opened, export, out, import_file)
        return
    if no_serve:
        _print_links(links)
        return
    _serve_study(opened, links, host, port)


SAMPLE_HELP = """A local model's responses to a prompt file, as a sample file.

    rlhflab sample MODEL_DIR --prompts FILE --out SAMPLES.jsonl   # any HF causal LM, or a LoRA adapter dir
    rlhflab sample RUN                     # RUN/samples/stage1.jsonl and policy.jsonl, the run's settings

Prompt files hold `prompt` records (strings, or messages through the model's chat template).
Seeded: each prompt's response has a random stream of its own. The settings are written beside
the samples (SAMPLES.jsonl.settings.json); a rerun resumes, skipping prompts already written.
Exit code 2 for bad input."""


@app.command(help=SAMPLE_HELP)
def sample(
    source: Path = typer.Argument(..., help="A model directory (or LoRA adapter directory), or an rlhflab run."),
    prompts: Optional[Path] = typer.Option(None, "--prompts", help="Prompt file (.jsonl/.parquet of `prompt`); "
                                           "a run's default: its held-out prompts."),
    out: Optional[Path] = typer.Option(None, "--out", help="The sample file to write (JSONL); a run's default: "
                                       "RUN/samples/{stage1,policy}.jsonl."),
    temperature: Optional[float] = typer.Option(None, "--temperature", help="Sampling temperature (default 1, or "
                                                "the run's ppo.temperature)."),
    max_new_tokens: Optional[int] = typer.Option(None, "--max-new-tokens", min=1, help="Tokens per response at most "
                                                 "(default 32, or the run's ppo.response_length)."),
    seed: Optional[int] = typer.Option(None, "--seed", help="Seed (default 0, or the run's seed)."),
    batch_size: int = typer.Option(16, "--batch-size", min=1, help="Prompts sampled at once."),
    device: str = typer.Option("auto", "--device", help="cpu, cuda, cuda:N, or auto (a GPU where there is one)."),
) -> None:
    _training_stack()
    from dataclasses import replace

    from rlhflab.runs import RunDir
    from rlhflab.sample import SampleError, SamplingSettings, load_model, prompts_from_file, run_sampling

    asked = {k: v for k, v in dict(temperature=temperature, max_new_tokens=max_new_tokens, seed=seed).items()
             if v is not None}
    try:
        if RunDir(source).config.is_file():
            models, run_prompts, settings, gold = run_sampling(source)
            jobs = [(path, source / "samples" / f"{name}.jsonl") for name, path in models.items()]
            if out is not None:
                raise SampleError("--out is for a model directory; a run's samples go to RUN/samples/")
        else:
            if prompts is None or out is None:
                raise SampleError("sampling a model directory needs --prompts FILE and --out SAMPLES.jsonl")
            jobs, run_prompts, settings, gold = [(source, out)], None, SamplingSettings(), None
        settings = replace(settings, batch_size=batch_size, device=device, **asked)
        for model_dir, target in jobs:
            model, tokenizer = load_model(model_dir)
            texts = prompts_from_file(prompts, tokenizer) if prompts is not None else run_prompts
            _sample_one(model, tokenizer, texts, target, settings, str(model_dir),
                        str(prompts) if prompts is not None else "the run's held-out prompts", gold)
    except SampleError as err:
        console.print(f"[red]error:[/red] {escape(str(err))}")
        raise typer.Exit(2) from None


def _sample_one(model, tokenizer, texts, target: Path, settings, model_name: str, prompts_name: str, gold) -> None:
    from rlhflab.progress import progress_bar
    from rlhflab.sample import sample_to_file, settings_path

    target.parent.mkdir(parents=True, exist_ok=True)
    with progress_bar(f"sample {target.name}", len(texts)) as bar:
        done = sample_to_file(model, tokenizer, texts, target, settings, model_name=model_name,
                              prompts_name=prompts_name, gold=gold, advance=bar.advance)
    resumed = f" ({done.already} already there)" if done.already else ""
    console.print(f"wrote {done.written} responses to {escape(str(target))}{resumed}; settings in "
                  f"{escape(str(settings_path(target)))}")


PAIR_HELP = """Blind side-by-side comparisons of two or more systems' responses to the same prompts.

    rlhflab pair A B [C ...] --study DIR     # build the study and serve it to raters
    rlhflab pair DIR --results [--json]      # win rates, strengths, the side's pull, raters
    rlhflab pair DIR --export prefs.jsonl    # prompt/chosen/rejected for rlhflab reward --preferences

Each system is [NAME=]PATH: a sample file (any the doctor reads), an rlhflab run (its
policy, sampled on --prompts FILE or else its held-out prompts), or a model directory
(sampled on --prompts FILE).
With K systems every prompt gets all K(K-1)/2 pairs; which side each response is shown on is
drawn per item and kept. Exit code 2 for bad input."""


@app.command(help=PAIR_HELP)
def pair(
    sources: Optional[list[str]] = typer.Argument(None, help="[NAME=]PATH of each system (or a study directory)",
                                                 show_default=False),
    study: Optional[Path] = typer.Option(None, "--study", help="The study's directory."),
    prompts: Optional[Path] = typer.Option(None, "--prompts", help="Prompt file the model directories and runs "
                                           "given are sampled on (rlhflab sample); runs' default: their held-out "
                                           "prompts."),
    mapping: Optional[list[str]] = typer.Option(None, "--map", help="THEIRS=sample/FIELD for sample files"),
    prompts_drawn: Optional[int] = typer.Option(None, "--prompts-drawn", help="Prompts compared (default: every "
                                                "prompt all systems answered)."),
    ratings_per_item: Optional[int] = typer.Option(None, "--ratings-per-item", help="Raters per item at least "
                                                   "(default 3: an odd number has a majority)."),
    repeat_every: Optional[int] = typer.Option(None, "--repeat-every", help="A repeated item after this many new "
                                               "ones, for consistency (default 10; 0: never)."),
    seed: Optional[int] = typer.Option(None, "--seed", help="Seeds the draw of prompts and sides (default 0)."),
    raters: Optional[int] = typer.Option(None, "--raters", help="Rater links (default: ratings per item)."),
    results: bool = typer.Option(False, "--results", help="Print the study's results and exit."),
    json_output: bool = typer.Option(False, "--json", help="With --results: print them as JSON."),
    export: Optional[Path] = typer.Option(None, "--export", help="Write the comparisons as prompt/chosen/rejected "
                                          "records to this file (one per item, by majority), and exit."),
    per_judgement: bool = typer.Option(False, "--per-judgement", help="With --export: one record per decisive "
                                       "answer instead of one per item."),
    host: str = HostOption,
    port: int = PortOption,
    no_serve: bool = NoServeOption,
    judges: Optional[list[str]] = typer.Option(None, "--judge", help="KIND:PATH: answer every pair with a judge and "
                                               "exit: rm (a reward model dir: the higher score wins), lm (a causal "
                                               "LM asked with --template, both orders), world (a world run's "
                                               "simulated labeler)."),
    template: Optional[Path] = typer.Option(None, "--template", help="With --judge lm:DIR: the prompt, with "
                                            "{prompt}, {first}, {second}, ending where the letter A or B follows."),
) -> None:
    _studies_extra()
    from rlhflab.doctor import LogFormatError, parse_map_options
    from rlhflab.studies.build import parse_sources
    from rlhflab.studies.design import StudyError
    from rlhflab.studies.pairs import build_pair_study
    from rlhflab.studies.store import Study

    try:
        study, sources = _study_or_sources(study, sources)
        if study is None:
            raise StudyError("give the study's directory with --study DIR")
        if results or export is not None:
            opened = Study.open(study)
            if opened.design.kind != "pair":
                raise StudyError(f"{study}: a rating study (rlhflab rate {study} --results)")
            if results:
                _print_pair_results(opened, json_output)
            else:
                _export_pairs(opened, export, per_judgement)
            return
        parsed = _sampled_sources(parse_sources(sources or []), prompts, study)
        asked = {k: v for k, v in dict(prompts_drawn=prompts_drawn, ratings_per_item=ratings_per_item,
                                       repeat_every=repeat_every, seed=seed).items() if v is not None}
        opened, added = build_pair_study(study, parsed, asked, parse_map_options(mapping).for_samples())
        links = opened.ensure_raters(raters or opened.design.ratings_per_item)
    except (StudyError, LogFormatError) as err:
        console.print(f"[red]error:[/red] {escape(str(err))}")
        raise typer.Exit(2) from None
    _announce_study(opened, added, links, f"pair study {study}", "pairs to compare")
    if judges:
        for spec in judges:
            _judge_pairs(opened, spec, template)
        console.print("as the judge(s) answered (people's answers, where there are any: rlhflab pair STUDY --results):")
        _print_pair_results(opened, json_output=False, kinds=("judge",))
        return
    if no_serve:
        _print_links(links)
        return
    _serve_study(opened, links, host, port)


def _announce_study(study, added, links, title: str, items: str) -> None:
    for system in added:
        console.print(f"added {system.name} ({system.format}: {escape(system.source)})")
    console.print(f"{title}: {len(study.systems())} systems, {study.item_count()} {items}, {len(links)} rater links")


def _print_links(links) -> None:
    """Each rater's link path, for a server the user runs elsewhere (--no-serve)."""
    for rater in links:
        typer.echo(f"{rater.name}\t/r/{rater.token}/")


def _judge_pairs(study, spec: str, template: Optional[Path], tokenizer: Optional[Path] = None):
    """`--judge KIND:PATH`: every pair answered by the judge (judges/pairs.py), its position bias said."""
    from rlhflab.judges.pairs import judge_pairs, make_pair_judge
    from rlhflab.studies.design import StudyError

    try:
        if not spec.startswith("world:"):
            _training_stack()
        judge = make_pair_judge(spec, study, template.read_text(encoding="utf-8") if template else None, tokenizer)
        from rlhflab.progress import progress_bar

        with progress_bar(f"judge {judge.name}", study.item_count()) as bar:
            report = judge_pairs(study, judge, bar.advance)
    except (StudyError, OSError, ValueError) as err:
        console.print(f"[red]error:[/red] --judge {escape(spec)}: {escape(str(err))}")
        raise typer.Exit(2) from None
    rate, low, high, decisive = report.position_bias()
    if rate is not None:
        asked = "both orders asked, an answer kept where they agree" if judge.reads_order else "one order asked"
        console.print(f"{escape(judge.name)}: chose the first shown in {rate:.0%} [{low:.0%}, {high:.0%}] of "
                      f"{decisive} decisive answers ({asked})")
    return judge


def _sampled_sources(sources, prompts: Optional[Path], study: Path):
    """Each source as a sample file (`sample.sampled_sources`), sampling printed as it goes."""
    from rlhflab.runs import RunDir

    models = [s for s in sources if RunDir(s.path).config.is_file() or (s.path / "config.json").is_file()
              or (s.path / "adapter_config.json").is_file()]
    if not models:
        return list(sources)  # sample files only: the light install reads them
    _training_stack()
    from rlhflab.sample import sampled_sources

    return sampled_sources(sources, prompts, study, _sample_one)


def _print_pair_results(study, json_output: bool, kinds: Optional[tuple[str, ...]] = None) -> None:
    import json

    from rich.table import Table

    from rlhflab.studies.pair_results import pair_results

    res = pair_results(study) if kinds is None else pair_results(study, kinds)
    if json_output:
        typer.echo(json.dumps(res.to_json(), indent=2))
        return
    fmt = lambda v, spec=".2f": "-" if v is None else format(v, spec)  # noqa: E731
    table = Table(title="each pair: A's win rate over B (one majority vote per item)")
    for column in ("A", "B", "items", "A wins", "B wins", "win rate", "95% interval", "ties", "both bad", "split",
                   "unjudged"):
        table.add_column(column)
    for p in res.pairs:
        table.add_row(p.a, p.b, str(p.items), str(p.wins), str(p.losses), fmt(p.rate),
                      "-" if p.low is None else f"[{p.low:.2f}, {p.high:.2f}]" + (" no preference" if p.no_preference
                                                                                   else ""),
                      fmt(p.tie_rate, ".0%"), fmt(p.both_bad_rate, ".0%"), str(p.split), str(p.unjudged))
    console.print(table)
    if res.strengths:
        strengths = Table(title="Bradley-Terry strengths (log scale, mean 0)")
        for column in ("system", "strength", "95% interval"):
            strengths.add_column(column)
        for s in sorted(res.strengths, key=lambda s: -s.strength):
            strengths.add_row(s.system, f"{s.strength:+.3f}", f"[{s.low:+.3f}, {s.high:+.3f}]")
        console.print(strengths)
        console.print(f"[dim]{escape(res.strengths_method)}[/dim]")
    side = res.side
    if side.rate is not None:
        console.print(f"the left side chosen in {side.left} of {side.decisive} decisive answers: {side.rate:.2f} "
                      f"[{side.low:.2f}, {side.high:.2f}] (0.5: no pull of the side)")
    raters = Table(title="raters")
    for column in ("rater", "kind", "answered", "with others", "agrees with their majority", "repeats", "same again"):
        raters.add_column(column)
    for r in res.raters:
        raters.add_row(r.name, r.kind, str(r.answered), str(r.with_others), fmt(r.agreement), str(r.repeats),
                       fmt(r.repeat_same))
    console.print(raters)
    if res.judges:
        judged = Table(title="judges against the people's majority per item")
        for column in ("judge", "items", "agreement", "95% interval"):
            judged.add_column(column)
        for j in res.judges:
            judged.add_row(j.name, str(j.items), fmt(j.agreement), "-" if j.low is None else f"[{j.low:.2f}, {j.high:.2f}]")
        console.print(judged)
    console.print(f"[dim]{escape(res.method)}[/dim]")
    for note in res.notes:
        console.print(f"[dim]note: {escape(note)}[/dim]")


def _export_pairs(study, out: Path, per_judgement: bool) -> None:
    from rlhflab.studies.pair_results import export_preferences

    exported = export_preferences(study, out, per_judgement)
    dropped = ", ".join(f"{n} {why}" for why, n in sorted(exported.dropped.items())) or "none"
    console.print(f"wrote {exported.written} preference records to {escape(str(out))} (dropped: {dropped}); train "
                  f"on them with: rlhflab reward --preferences {escape(str(out))}")




def _run_judges(study, judges: list[str], template: Optional[Path], label: Optional[str],
                tokenizer: Optional[Path]) -> None:
    """`rate --judge KIND:DIR ...`: each judge rates every item (resuming), then the agreement."""
    from rlhflab.studies.design import StudyError

    _training_stack()
    from rlhflab.judges.ratings import judge_study, make_judge
    from rlhflab.progress import progress_bar

    for spec in judges:
        try:
            judge = make_judge(spec, study, template, label, tokenizer)
            with progress_bar(f"judge {judge.name}", study.item_count()) as bar:
                judge_study(study, judge, bar.advance)
        except (StudyError, OSError, ValueError) as err:
            console.print(f"[red]error:[/red] --judge {escape(spec)}: {escape(str(err))}")
            raise typer.Exit(2) from None
    _print_study_results(study, json_output=False)


def _interchange(study, export: Optional[str], out: Optional[Path], import_file: Optional[Path]) -> None:
    """`rate --export TOOL --out FILE` and `rate --import FILE`."""
    from rlhflab.studies.design import StudyError
    from rlhflab.studies.interchange import TOOLS, export_items, import_ratings

    try:
        if export is not None:
            if export not in TOOLS or out is None:
                raise StudyError(f"--export takes one of {', '.join(TOOLS)} and needs --out FILE")
            for path in export_items(study, export, out):
                console.print(f"wrote {escape(str(path))}")
        if import_file is not None:
            imported = import_ratings(study, import_file)
            console.print(f"imported {imported.recorded} ratings ({imported.duplicates} already held)")
            for line in imported.skipped:
                console.print(f"[yellow]skipped:[/yellow] {escape(line)}")
    except (StudyError, OSError) as err:
        console.print(f"[red]error:[/red] {escape(str(err))}")
        raise typer.Exit(2) from None


def _study_or_sources(study: Optional[Path], sources: Optional[list[str]]) -> tuple[Optional[Path], list[str]]:
    """`rlhflab rate STUDY` and `rlhflab pair STUDY`: a lone argument that is a study's
    directory is the study, not a source to build one from."""
    from rlhflab.studies.store import Study

    if study is None and sources and len(sources) == 1 and Study.exists(Path(sources[0])):
        return Path(sources[0]), []
    return study, list(sources or [])


def _studies_extra() -> None:
    """Check that the studies extra is installed (the doctor's light install has none of it)."""
    import importlib

    missing = []
    for module in ("starlette", "uvicorn", "jinja2", "python_multipart", "numpy"):
        try:
            importlib.import_module(module)
        except ImportError:
            missing.append(module)
    if missing:
        console.print(f"[red]error:[/red] rating studies need the studies extra ({', '.join(missing)} missing): "
                      "pip install 'rlhflab\\[studies]'")
        raise typer.Exit(2)


def _serve_study(study, links, host: str, port: int) -> None:
    from rlhflab.studies.serve import base_url, bind, is_loopback, rater_link, serve

    if not is_loopback(host):
        console.print(f"[yellow]warning:[/yellow] listening on {escape(host)}: traffic is plain HTTP, so the rater "
                      "links and ratings cross the network unencrypted (put it behind TLS, or keep the default "
                      "127.0.0.1)")
    try:
        sock = bind(host, port)
    except OSError as err:
        console.print(f"[red]error:[/red] {escape(str(err))}")
        raise typer.Exit(2) from None
    for rater in links:
        typer.echo(f"{rater.name}: {rater_link(base_url(sock), rater)}")
    serve(study, sock, announce=lambda line: console.print(escape(line)))  # uvicorn ends on Ctrl-C by itself


def _print_study_results(study, json_output: bool) -> None:
    import json

    from rich.table import Table

    from rlhflab.studies.results import study_results

    res = study_results(study)
    if json_output:
        typer.echo(json.dumps(res.to_json(), indent=2))
        return
    table = Table(title=f"mean rating on {res.scale[0]}-{res.scale[1]} per system and step bin")
    for column in ("system", "bin", "steps", "items", "n", "mean", "95% interval", "unreadable"):
        table.add_column(column)
    for b in res.bins:
        table.add_row(b.system, str(b.bin), f"{b.first_step}-{b.last_step}", str(b.items), str(b.n),
                      "-" if b.mean is None else f"{b.mean:.2f}",
                      "-" if b.low is None else f"[{b.low:.2f}, {b.high:.2f}]",
                      "-" if b.unreadable_rate is None else f"{b.unreadable_rate:.0%}")
    console.print(table)
    alpha = "not measurable" if res.alpha is None else f"{res.alpha:.3f}"
    console.print(f"agreement: ordinal Krippendorff's alpha {alpha} over {res.alpha_ratings} ratings")
    raters = Table(title="raters")
    for column in ("rater", "kind", "rated", "unreadable", "repeats", "same again", "within 1", "mean |diff|"):
        raters.add_column(column)
    for r in res.raters:
        raters.add_row(r.name, r.kind, str(r.rated), str(r.unreadable), str(r.repeats),
                       *("-" if v is None else f"{v:.2f}" for v in (r.repeat_exact, r.repeat_within_one,
                                                                    r.repeat_mean_abs_diff)))
    console.print(raters)
    if res.judges:
        judges = Table(title="judges against the people's mean rating per item")
        for column in ("judge", "items", "Spearman", "95% interval"):
            judges.add_column(column)
        for j in res.judges:
            judges.add_row(j.name, str(j.items), "-" if j.spearman is None else f"{j.spearman:.3f}",
                           "-" if j.low is None else f"[{j.low:.3f}, {j.high:.3f}]")
        console.print(judges)
    console.print(f"[dim]{escape(res.method)}[/dim]")
    for note in res.notes:
        console.print(f"[dim]note: {escape(note)}[/dim]")


def _study_truth_change(directory: Path, before_runs: list[str], after_runs: list[str], before, after):
    """compare --truth: the change the study measures between the runs (`studies.truth.study_truth_change`)."""
    _studies_extra()
    from rlhflab.studies.design import StudyError
    from rlhflab.studies.truth import study_truth_change

    try:
        return study_truth_change(directory, before_runs, after_runs, before, after)
    except StudyError as err:
        console.print(f"[red]error:[/red] --truth: {escape(str(err))}")
        raise typer.Exit(2) from None


def print_comparison(result) -> None:
    from rich.table import Table

    table = Table(title="findings before the fix, after it")
    for column in ("rule", "after the fix", "evidence metric", "before", "after"):
        table.add_column(column)
    for f in result.findings:
        table.add_row(f.rule, f.status, f.metric, f"{f.before:.4g}", f"{f.after:.4g}")
    console.print(table)
    if result.new_findings:
        console.print("new findings after the fix: " + ", ".join(result.new_findings))
    t = result.truth
    if t is not None and t.metric == "preference":
        held = "a preference" if t.significant else "no preference beyond its interval"
        headline, _, rest = t.method.partition("; ")
        console.print(f"truth ({escape(t.which)}): {escape(headline)}: {held} [dim]({escape(rest)})[/dim]")
    elif t is not None:
        matched = f"; at matched steps {t.at_matched_steps:+.4g}" if t.at_matched_steps is not None else ""
        held = {True: "a change", False: "within its noise", None: "cannot tell"}[t.significant]
        console.print(f"truth ({t.metric}, the {t.which}): {t.before_end:.4g} -> {t.after_end:.4g}, change "
                      f"{t.change:+.4g} [{t.low:+.4g}, {t.high:+.4g}]{matched}: {held} [dim]({escape(t.method)})[/dim]")
    for name, (b, a) in result.settings.items():
        console.print(f"setting {name}: {b} -> {a}")
    console.print(f"[bold]verdict: {result.verdict}[/bold] ({escape(result.why)})")


def main(argv: list[str] | None = None) -> None:
    """The console script: `rlhflab ...`, with compare's `--` kept (`AFTER_MARK`)."""
    import sys

    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["compare"]:  # every `--` cuts an arm: click would keep only the first
        args = [AFTER_MARK if a == "--" else a for a in args]
    app(args=args)


if __name__ == "__main__":  # pragma: no cover
    main()
