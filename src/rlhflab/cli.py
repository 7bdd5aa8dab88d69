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


FaultOption = typer.Option(None, "--fault", help="Inject a named fault from the zoo (rlhflab faults list).")


def _config(preset: str, config_file: Optional[Path], overrides: Optional[list[str]],
            fault: Optional[str] = None) -> PipelineConfig:
    try:
        return load_config(preset, config_file, overrides or [], fault)
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
    fault: Optional[str] = FaultOption,
    quiet: bool = typer.Option(False, "--quiet", help="No progress bars."),
) -> None:
    """All three stages on the embedded reviews world, then the doctor and a summary."""
    from rlhflab.faults.zoo import components_for
    from rlhflab.pipeline import print_summary, run_pipeline

    config = _config(preset, config_file, overrides, fault)
    out = out or _default_out(preset)
    result = run_pipeline(config, out, components_for(config), show_progress=not quiet)
    print_summary(result.summary)
    console.print(f"run directory: {out}")


def _stage_config(run: Path, preset: str, config_file: Optional[Path], overrides: Optional[list[str]],
                  fault: Optional[str] = None) -> PipelineConfig:
    """A stage run into an existing run directory reuses its config unless one is given."""
    if (run / "config.toml").is_file() and config_file is None and not overrides and not fault:
        try:
            return config_from_run(run)
        except ConfigError as err:
            console.print(f"[red]config error:[/red] {err}")
            raise typer.Exit(2) from None
    return _config(preset, config_file, overrides, fault)


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
    fault: Optional[str] = FaultOption,
    quiet: bool = typer.Option(False, "--quiet"),
) -> None:
    """Stage 3: PPO against the reward model with a KL penalty to the stage-1 model."""
    from rlhflab.faults.zoo import components_for
    from rlhflab.ppo.trainer import run_ppo
    from rlhflab.runs import RunDir

    run = RunDir(out)
    _require(run.stage1_lm, "pretrain")
    _require(run.stage2_rm, "reward")
    config = _stage_config(out, preset, config_file, overrides, fault)
    save_config(config, run.create().config)
    console.print(run_ppo(config, run, components_for(config), show_progress=not quiet))


def print_diagnosis(diagnosis, run_name: str) -> None:
    """The findings as a rich table, then each one's causes, fix and verification command."""
    from rich.table import Table

    if diagnosis.healthy:
        console.print(f"[green]no finding[/green]: {diagnosis.source} looks healthy ({diagnosis.steps} steps)")
    else:
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
                fix = f" -> fix {c.fix.arguments()}" if c.fix else ""
                console.print(f"  {rank}. {c.component}: {c.explanation}{fix}")
            console.print(f"  verify: {f.verify_command(run_name)}")
    if diagnosis.skipped:
        console.print("[dim]not run for lack of metrics: "
                      + "; ".join(f"{r} (needs {', '.join(m)})" for r, m in diagnosis.skipped.items()) + "[/dim]")
    if diagnosis.unknown_metrics:
        console.print("[dim]metrics not understood: " + ", ".join(diagnosis.unknown_metrics) + "[/dim]")


def _parse_mapping(items: Optional[list[str]]) -> dict[str, str]:
    mapping = {}
    for item in items or []:
        if "=" not in item:
            console.print(f"[red]error:[/red] --map {item!r}: expected THEIR_NAME=canonical/name")
            raise typer.Exit(2)
        theirs, ours = item.split("=", 1)
        mapping[theirs] = ours
    return mapping


@app.command()
def doctor(
    path: Path = typer.Argument(..., help="Run directory, trainer_state.json, TensorBoard dir, .csv or .jsonl"),
    json_output: bool = typer.Option(False, "--json", help="Print diagnosis.json instead of the table."),
    mapping: Optional[list[str]] = typer.Option(None, "--map", help="Rename a column: THEIRS=canonical/name"),
) -> None:
    """Diagnose a run or another trainer's log: findings, evidence, ranked causes, fixes."""
    import json

    from rlhflab.doctor.diagnose import diagnose_path, write_diagnosis
    from rlhflab.doctor.readers import LogFormatError

    try:
        diagnosis = diagnose_path(path, _parse_mapping(mapping))
    except LogFormatError as err:
        console.print(f"[red]error:[/red] {err}")
        raise typer.Exit(2) from None
    if path.is_dir() and (path / "metrics" / "ppo.jsonl").is_file():
        write_diagnosis(diagnosis, path / "diagnosis.json")
    if json_output:
        typer.echo(json.dumps(diagnosis.to_json(), indent=2))
    else:
        print_diagnosis(diagnosis, str(path))


@app.command()
def report(run: Path = typer.Argument(..., help="Run directory")) -> None:
    """(Re)write RUN/report.html: curves, findings with onsets, samples."""
    from rlhflab.doctor.diagnose import diagnose_path, write_diagnosis
    from rlhflab.doctor.readers import LogFormatError, read_run
    from rlhflab.doctor.report import write_report

    try:
        diagnosis = diagnose_path(run)
        table = read_run(run)
    except LogFormatError as err:
        console.print(f"[red]error:[/red] {err}")
        raise typer.Exit(2) from None
    write_diagnosis(diagnosis, run / "diagnosis.json")
    console.print(f"wrote {write_report(run, table, diagnosis)}")


@app.command()
def verify(
    run: Path = typer.Argument(..., help="Run directory to verify a fix on"),
    fix: list[str] = typer.Option(..., "--fix", help="Dotted override, e.g. ppo.kl_coef=0.2 (repeatable)"),
    out: Optional[Path] = typer.Option(None, "--out", help="Rerun directory (default RUN-verify)"),
    quiet: bool = typer.Option(False, "--quiet"),
) -> None:
    """Rerun RUN's config with the same seeds and the fix; compare the diagnoses."""
    from rich.table import Table

    from rlhflab.doctor.verify import verify as run_verify

    if not (run / "config.toml").is_file():
        console.print(f"[red]error:[/red] {run}/config.toml not found: not an rlhflab run directory")
        raise typer.Exit(2)
    try:
        result = run_verify(run, fix, out, show_progress=not quiet)
    except ConfigError as err:
        console.print(f"[red]config error:[/red] {err}")
        raise typer.Exit(2) from None
    table = Table(title=f"verify {' '.join(fix)}: {run} -> {result.rerun}")
    for column in ("finding", "after the fix", "metric (end)", "before", "after"):
        table.add_column(column)
    for c in result.comparison:
        table.add_row(c.rule, "[green]gone[/green]" if c.gone else "[red]still there[/red]", c.metric,
                      f"{c.before:.4g}", f"{c.after:.4g}")
    console.print(table)
    if not result.comparison:
        console.print("the original run had no finding")
    if result.new_findings:
        console.print(f"[yellow]new findings after the fix:[/yellow] {', '.join(result.new_findings)}")


@app.command()
def checkup(
    run: Optional[Path] = typer.Argument(None, help="Run directory holding stage1_lm/ and stage2_rm/"),
    overrides: Optional[list[str]] = typer.Argument(None, help="Dotted overrides for own models, e.g. "
                                                    "ppo.response_length=64", show_default=False),
    policy: Optional[Path] = typer.Option(None, "--policy", help="Your HF causal-LM directory (with its tokenizer)."),
    reward_model: Optional[Path] = typer.Option(None, "--reward-model", help="Your HF 1-label reward-model directory."),
    prompts: Optional[Path] = typer.Option(None, "--prompts", help="Prompts (.jsonl/.parquet, field 'prompt')."),
    pairs: Optional[Path] = typer.Option(None, "--pairs", help="Held-out preference pairs to test the RM on."),
    out: Optional[Path] = typer.Option(None, "--out", help="Where checkup.json goes (own models; default: cwd)."),
    skip_invalid: bool = typer.Option(False, "--skip-invalid", help="Skip bad records of --prompts/--pairs."),
    preset: str = PresetOption,
    config_file: Optional[Path] = ConfigOption,
) -> None:
    """Component probes (KL 0 at start, ratio 1, logprob agreement, padding invariance, masks, GAE,
    reward model health, reward scale, EOS, prompt variety): pass/fail with the measured number.

    On a run directory: `rlhflab checkup RUN` (writes RUN/checkup.json). On your own models:
    `rlhflab checkup --policy DIR --reward-model DIR --prompts FILE [--pairs FILE] [k=v ...]`."""
    from rich.table import Table

    from rlhflab.doctor.probes import run_checkup
    from rlhflab.faults.zoo import components_for
    from rlhflab.runs import RunDir

    own = policy is not None or reward_model is not None
    if own and run is not None and "=" in run.name:  # no run dir: the first positional is an override
        overrides, run = [str(run), *(overrides or [])], None
    if own == (run is not None):
        console.print("[red]error:[/red] give a run directory, or --policy, --reward-model and --prompts")
        raise typer.Exit(2)
    if own:
        config = _config(preset, config_file, overrides)
        results, where = _checkup_own(config, policy, reward_model, prompts, pairs, out or Path("."), skip_invalid)
    else:
        _require(run / "stage1_lm", "pretrain")
        _require(run / "stage2_rm", "reward")
        config = _stage_config(run, "demo", None, None)  # the run's own config
        results, where = run_checkup(config, RunDir(run), components_for(config)), run
    table = Table(title=f"checkup: {where}")
    for column in ("probe", "component", "result", "measured", "tolerance", "what"):
        table.add_column(column)
    for r in results:
        table.add_row(r.name, r.component, "[green]pass[/green]" if r.passed else "[red]FAIL[/red]",
                      f"{r.measured:.3g}", r.tolerance, r.detail)
    console.print(table)
    console.print(f"wrote {Path(where) / 'checkup.json'}")
    if not all(r.passed for r in results):
        raise typer.Exit(1)


def _checkup_own(config, policy, reward_model, prompts, pairs, out: Path, skip_invalid: bool):
    """Load and validate the user's models and files, then probe them."""
    from rlhflab.data.files import DataError, load_preferences, load_prompts
    from rlhflab.data.prompt_pool import PromptPool
    from rlhflab.doctor.probes import checkup_models
    from rlhflab.models.lm import ModelDirError, load_tokenizer

    if policy is None or reward_model is None or prompts is None:
        console.print("[red]error:[/red] own models need --policy DIR, --reward-model DIR and --prompts FILE")
        raise typer.Exit(2)
    try:
        tokenizer = load_tokenizer(policy)
        prompt_set = load_prompts(prompts, skip_invalid=skip_invalid)
        pair_set = load_preferences(pairs, skip_invalid=skip_invalid, tokenizer=tokenizer) if pairs else None
    except (DataError, ModelDirError) as err:
        console.print(f"[red]input error:[/red] {err}")
        raise typer.Exit(2) from None
    for loaded in (prompt_set, pair_set):
        if loaded is not None and loaded.skipped:
            console.print(f"[yellow]skipped:[/yellow] {loaded.summary()}")
    out.mkdir(parents=True, exist_ok=True)
    results = checkup_models(config, policy, reward_model, PromptPool([r.prompt for r in prompt_set.records]),
                             pair_set.records if pair_set else (), out)
    return results, out


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
        table.add_row(f.name, f.component, f.symptom, f.models)
    console.print(table)


@faults_app.command("show")
def faults_show(name: str = typer.Argument(..., help="Fault name")) -> None:
    """One fault in full, with what it replaces and its config."""
    import inspect

    from rlhflab.faults.zoo import get_fault

    try:
        fault = get_fault(name)
    except KeyError as err:
        console.print(f"[red]error:[/red] {err.args[0]}")
        raise typer.Exit(2) from None
    console.print(f"[bold]{fault.name}[/bold]  component: {fault.component}\n"
                  f"models: {fault.models}\nexpected symptom: {fault.symptom}\nreplaces: {fault.replaces}")
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
) -> None:
    """Run the healthy pipeline and every fault, then the checkup and the doctor; score them."""
    from rlhflab.faults.bench import run_bench

    command = "rlhflab faults bench --preset " + preset + "".join(f" --seed {s}" for s in seeds) + "".join(
        f" --fault {f}" for f in only or [])
    healthy, rows = run_bench(preset, seeds, out, only, doc, command)
    for r in healthy + rows:
        console.print(f"{r.name:40s} detected={r.detected!s:5s} first={r.first_component or '-':22s} "
                      f"log-only={r.log_only_component or '-':22s} "
                      f"findings={','.join(r.findings) or '-'} probes={','.join(r.failed_probes) or '-'} {r.seconds:.0f}s")
    console.print(f"wrote {doc}")


if __name__ == "__main__":  # pragma: no cover
    app()
