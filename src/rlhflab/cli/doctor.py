"""`rlhflab doctor` (a diagnosis, a plan for another trainer, a followed log) and `rlhflab compare`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape

from rlhflab.cli.common import AnswersOption, studies_extra
from rlhflab.cli.errors import fail, reported, writable_parent
from rlhflab.cli.render import print_ablation, print_comparison, print_diagnosis, print_formats
from rlhflab.progress import console


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
    answers: Optional[str] = AnswersOption,
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

    from rlhflab.doctor import diagnosis_json, parse_map_options, read_and_diagnose, write_diagnosis

    if list_formats:
        print_formats()
        return
    if rules_doc is not None:
        from rlhflab.doctor import write_rules_doc

        write_rules_doc(rules_doc)
        console.print(f"wrote the generated tables of {rules_doc} (rules, clues, spellings, impossible numbers, "
                      "file kinds, trainers)")
        return
    if path is None:
        fail("give a log to diagnose (or --list-formats)")
    if follow:
        if truth is not None:
            fail("--truth is read once, not followed: diagnose without --follow")
        _follow(path, parse_map_options(mapping), format_name, stop_on, interval, idle_exit)
    if html is not None:
        writable_parent(html)
    table, diagnosis = read_and_diagnose(path, parse_map_options(mapping), format_name, samples,
                                         truth=lambda table: _rated_truth(path, truth, table, answers), run=run)
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

    from rlhflab.doctor import LAUNCHERS_BY_DIALECT, check_plan, plan_for_log

    if diagnosis.format == "rlhflab":
        fail(f"rlhflab reruns its own runs: rlhflab ablate {diagnosis.source}")
    planned = plan_for_log(table, diagnosis, command, seeds, top, out, maps)
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


def _rated_truth(log: Path, truth: Optional[str], table, answers: Optional[str] = None):
    """The rated truth `--truth` names (a study that cannot be read is bad input, exit 2), or
    one found in the run (`studies.truth.found_truth`), or None."""
    from rlhflab.studies.store import DATABASE_FILE

    if truth is None:
        if not (log.is_dir() and any((log / "studies").glob(f"*/{DATABASE_FILE}"))):
            return None
        try:
            from rlhflab.studies.as_truth import found_truth
        except ImportError:  # the studies extra is absent: diagnose without the study
            table.notes.append(f"a rating study is in {log / 'studies'}; reading it needs pip install 'rlhflab[studies]'")
            return None
        return found_truth(log, table)
    studies_extra()
    from rlhflab.studies.as_truth import named_truth
    from rlhflab.studies.design import StudyError

    with reported(StudyError, prefix="--truth: "):
        return named_truth(log, truth, table, answers)


def _follow(path: Path, mapping, format_name: Optional[str], stop_on: str, interval: float,
            idle_exit: Optional[float]) -> None:
    """`doctor --follow`: tell findings as they appear; exits with the code the docstring of `doctor` gives."""
    from rlhflab.doctor import Watch, follow, stop_rules

    with reported(ValueError, prefix="--stop-on: "):
        watch = Watch(stop_rules(stop_on))
    console.print(f"following {path} (every {interval:g} s{'; stop on ' + stop_on if stop_on else ''}); Ctrl-C ends")
    try:
        followed = follow(path, watch, mapping, format_name, interval, idle_exit, emit=lambda line: console.print(
            escape(line), highlight=False))
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


# `rlhflab compare BEFORE... -- AFTER...`: click drops a `--` from the arguments it hands on,
# so `main` replaces the first one after `compare` by this marker before the app parses them.
AFTER_MARK = "::after::"


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
    answers: Optional[str] = AnswersOption,
    rank: bool = typer.Option(False, "--rank", help="Rank the groups after BEFORE as arms, as with several, even "
                              "when there is one (a cure confirmed or not, as rlhflab ablate says it)."),
) -> None:
    """Compare runs before and after a fix, in their noise: each finding of the before side gone, weaker or
    still there; new findings; the change of the truth (gold or held-out score, else the proxy, said) with
    its interval; the settings that differ; a verdict. With several `--` groups, each group is one arm (its
    runs are its seeds), compared with BEFORE the same way and ranked as `rlhflab ablate` ranks its arms.

    Exit code: 0 fixed (several arms: a confirmed cure); 1 not fixed or worse (several arms: no arm cures
    it); 3 partly fixed or cannot tell (several arms: not confirmed, cannot tell); 2 bad input."""

    from rlhflab.doctor import compare_tables, parse_map_options, read_log

    groups = split_at_marks(runs)
    if len(groups) < 2 or not all(groups):
        fail("give the runs before the fix, then --, then the runs after it: "
             "rlhflab compare BEFORE... -- AFTER... (or BEFORE... -- ARM1... -- ARM2... for several arms)")
    if html_path is not None:
        writable_parent(html_path)
    with reported(ValueError):
        user_map = parse_map_options(mapping or [])
    tables = [[read_log(Path(r), user_map) for r in group] for group in groups]
    if len(groups) > 2 or rank:
        _compare_arms(groups, tables, truth, json_output, html_path, answers)
        return
    before, after = tables
    change = study_truth_change(truth, groups[0], groups[1], before, after, answers) if truth is not None else None
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
                  html_path: Optional[Path], answers: Optional[str]) -> None:
    """`rlhflab compare BEFORE -- ARM1 -- ARM2 ...`: each arm against BEFORE, ranked (doctor/arms.py)."""

    from rlhflab.doctor import arm_names, diagnose, observed_arm, rank_arms

    control, arm_groups = tables[0], tables[1:]
    names = arm_names([Path(group[0]) for group in groups])
    arms = [(observed_arm(name, control, runs), runs) for name, runs in zip(names, arm_groups)]
    truths = None
    if truth is not None:
        truths = {name: study_truth_change(truth, groups[0], runs, control, arm_tables, answers)
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


def study_truth_change(directory: Path, before_runs: list[str], after_runs: list[str], before, after,
                       answers: Optional[str] = None):
    """compare --truth: the change the study measures between the runs (`studies.truth.study_truth_change`)."""
    studies_extra()
    from rlhflab.studies.as_truth import study_truth_change
    from rlhflab.studies.design import StudyError

    with reported(StudyError, prefix="--truth: "):
        return study_truth_change(directory, before_runs, after_runs, before, after, answers)
