"""Commands that test a fix or a component: `rlhflab verify`, `ablate`, `checkup`, `faults`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from rlhflab.cli.common import (
    ConfigOption,
    PresetOption,
    SkipInvalidOption,
    build_config,
    interruptible,
    studies_extra,
    training_stack,
)
from rlhflab.cli.errors import fail
from rlhflab.cli.render import print_ablation, print_comparison, print_links
from rlhflab.cli.stages import require_stage, stage_config
from rlhflab.cli.studies import judge_pairs, sample_one
from rlhflab.progress import console


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
    training_stack()
    from rlhflab.verify import verify as run_verify

    if not (run / "config.toml").is_file():
        fail(f"{run}/config.toml not found: not an rlhflab run directory")
    if judge is not None and not pair:
        fail("--judge answers a comparison study: give --pair too")
    if pair:
        _judge_checked(judge, template)
    result = run_verify(run, fix, out, show_progress=not quiet)
    console.print(f"verify {' '.join(fix)}: {run} -> {result.rerun}")
    if not result.comparison.findings:
        console.print("the original run had no finding")
    if pair:
        _verify_by_preference(run, result, judge, template)
        return
    print_comparison(result.comparison)


def _judge_checked(judge: Optional[str], template: Optional[Path]) -> None:
    """A study and its judge, checked before a rerun of minutes: the studies extra, the judge's spec."""
    studies_extra()
    if judge is not None:
        from rlhflab.judges.pairs import parse_pair_judge

        parse_pair_judge(judge, template)


def _verify_by_preference(run: Path, result, judge_spec: Optional[str], template: Optional[Path]) -> None:
    """verify --pair: both policies sampled on the run's held-out prompts, a comparison study
    of the two; with a judge, answered at once and its preference the verdict's truth."""
    studies_extra()
    training_stack()
    from rlhflab.doctor import compare_tables, read_and_diagnose
    from rlhflab.studies.pair_results import preference_change
    from rlhflab.studies.whose import Whose
    from rlhflab.verify import preference_study

    study, links, (before, after) = preference_study(Path(run), Path(result.rerun), sample_one)
    study_dir = study.directory
    if judge_spec is None:
        print_comparison(result.comparison)
        console.print(f"comparison study {study_dir}: {study.item_count()} pairs; serve it to people with: "
                      f"rlhflab pair {study_dir}; then: rlhflab compare {run} -- {result.rerun} --truth {study_dir}")
        print_links(links)
        return
    judge = judge_pairs(study, judge_spec, template, Path(run) / "stage1_lm")
    truth = preference_change(study, [before], [after], Whose(f"judge:{judge.name}"))
    comparison = compare_tables([read_and_diagnose(Path(run))[0]], [read_and_diagnose(Path(result.rerun))[0]],
                                truth=truth)
    print_comparison(comparison)
    raise typer.Exit(comparison.exit_code)


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
    training_stack()
    from rlhflab.ablate import ablate as run_ablate
    from rlhflab.runs import read_json

    if not (run / "config.toml").is_file() or not (run / "metrics" / "ppo.jsonl").is_file():
        fail(f"{run}: not an rlhflab run directory with a PPO stage (config.toml and "
             "metrics/ppo.jsonl)")
    if judge is not None:
        _judge_checked(judge, template)
    with interruptible():
        result = run_ablate(run, top, seeds, fix or [], jobs, resume, show_progress=not quiet, judge=judge,
                            template=template.read_text(encoding="utf-8") if template else None)
    summary = read_json(result.root / "ablate.json")
    if json_out:
        print(json.dumps(summary, indent=2))
    else:
        print_ablation(summary)
    console.print(f"report: {result.root / 'report.html'}")
    raise typer.Exit(result.ranking.exit_code)


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
    training_stack()
    from rich.table import Table

    from rlhflab.checkup import run_checkup
    from rlhflab.faults.zoo import components_for
    from rlhflab.preflight import preflight
    from rlhflab.runs import RunDir

    own = policy is not None or reward_model is not None
    if own and run is not None and "=" in run.name:  # no run dir: the first positional is an override
        overrides, run = [str(run), *(overrides or [])], None
    if own == (run is not None):
        fail("give a run directory, or --policy, --reward-model and --prompts")
    if own:
        if policy is None or reward_model is None or prompts is None:
            fail("own models need --policy DIR, --reward-model DIR and --prompts FILE")
        given = {"data.policy": policy, "data.reward_model": reward_model, "data.prompts": prompts,
                 "data.preferences": pairs, "data.skip_invalid": skip_invalid}
        own_overrides = [f"{k}={v}" for k, v in given.items() if v is not None]
        config = build_config(preset, config_file, [*(overrides or []), *own_overrides])
        run = out or Path(".")
        preflight(config, RunDir(run), components_for(config), ("reward", "ppo"))
        run.mkdir(parents=True, exist_ok=True)
    else:
        config = stage_config(run, "demo", None, overrides)  # the run's own config, and any overrides
        require_stage(run / "stage1_lm", "pretrain")
        require_stage(run / "stage2_rm", "reward")
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
        fail(f"{err.args[0]}")
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
    training_stack()
    from rlhflab.errors import writable_directory
    from rlhflab.faults.zoo import get_fault
    from rlhflab.faults_bench import run_bench

    for name in only or []:
        try:
            get_fault(name)
        except KeyError as err:
            fail(f"--fault {err.args[0]}")
    writable_directory(out)
    writable_directory(doc.parent)
    command = "rlhflab faults bench --preset " + preset + "".join(f" --seed {s}" for s in seeds) + "".join(
        f" --fault {f}" for f in only or []) + (" --rescore" if rescore else "")
    healthy, rows = run_bench(preset, seeds, out, only, doc, command, rescore)
    for r in healthy + rows:
        console.print(f"{r.name:40s} detected={r.detected!s:5s} first={r.first_component or '-':22s} "
                      f"log-only={r.log_only_component or '-':22s} "
                      f"findings={','.join(r.findings) or '-'} probes={','.join(r.failed_probes) or '-'} {r.seconds:.0f}s")
    console.print(f"wrote {doc}")
