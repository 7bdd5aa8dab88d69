"""Rendering for the terminal: a stage's result, a diagnosis, a comparison, an ablation, a
study's results, as rich tables and lines (or JSON where asked): what the library computed, shown."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import typer
from rich.markup import escape

from rlhflab.progress import console

if TYPE_CHECKING:
    from rich.table import Table


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
                if c.in_place:
                    fix += f" (already in place: {', '.join(c.in_place)})"
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


def print_formats() -> None:
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
    if summary.get("time"):
        took = summary["time"]
        console.print(f"time: {took['wall_s']:.0f} s; the arms' seed runs: " + ", ".join(
            f"{name} {seconds:.0f} s" for name, seconds in took["seed_runs_s"].items()))
    console.print(f"next: {summary['next']}")


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


def print_pair_results(study, json_output: bool, whose) -> None:

    from rich.table import Table

    from rlhflab.studies.pair_results import pair_results

    res = pair_results(study, whose)
    if json_output:
        typer.echo(json.dumps(res.to_json(), indent=2))
        return
    console.print(escape(res.answers_of))
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


def print_study_results(study, json_output: bool, whose) -> None:

    from rich.table import Table

    from rlhflab.studies.results import study_results

    res = study_results(study, whose)
    if json_output:
        typer.echo(json.dumps(res.to_json(), indent=2))
        return
    console.print(escape(res.answers_of))
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


def announce_study(study, added, links, title: str, items: str) -> None:
    for system in added:
        console.print(f"added {system.name} ({system.format}: {escape(system.source)})")
    console.print(f"{title}: {len(study.systems())} systems, {study.item_count()} {items}, {len(links)} rater links")


def print_links(links) -> None:
    """Each rater's link path, for a server the user runs elsewhere (--no-serve)."""
    for rater in links:
        typer.echo(f"{rater.name}\t/r/{rater.token}/")
