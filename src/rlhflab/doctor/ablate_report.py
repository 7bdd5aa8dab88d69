"""`RUN/ablate/report.html`: an ablation for a person in a hurry. First the verdict in a few
sentences, then each arm's curves over the control's (mean over seeds, the control's onsets
marked), then the arms' table, then the run's findings."""

from __future__ import annotations

import html
import statistics
from pathlib import Path

from rlhflab.doctor.arms import Ranking, describe
from rlhflab.doctor.findings import Diagnosis
from rlhflab.doctor.report import STYLE, finish_panel, headline, headline_component, mark_onset, pyplot
from rlhflab.doctor.table import MetricTable

ARM_PANELS = (("gold reward (the truth)", "reward/gold_mean"), ("proxy reward", "reward/proxy_mean"),
              ("KL to the reference", "kl/mean"), ("entropy", "policy/entropy"),
              ("distinct-2", "response/distinct_2"), ("length", "response/length_mean"))


def _mean_curve(tables: list[MetricTable], metric: str) -> tuple[list[int], list[float]]:
    """The mean over runs at each step every run that reached it logged."""
    by_step: dict[int, list[float]] = {}
    for t in tables:
        s = t.get(metric)
        if s is None:
            continue
        for step, value in zip(s.steps, s.values):
            by_step.setdefault(step, []).append(value)
    steps = sorted(by_step)
    return steps, [statistics.fmean(by_step[s]) for s in steps]


def arm_panels(control: list[MetricTable], arms: dict[str, list[MetricTable]], onsets: dict[str, int],
               labels: dict[str, str]) -> list[tuple[str, str]] | None:
    """(title, base64 PNG) per metric: the control and each arm, mean over seeds; the
    control's findings' onsets as dotted lines. None without matplotlib."""
    plt = pyplot()
    if plt is None:
        return None
    images = []
    for title, metric in ARM_PANELS:
        if not any(t.get(metric) is not None for t in control):
            continue
        fig, ax = plt.subplots(figsize=(5.2, 2.8))
        steps, values = _mean_curve(control, metric)
        ax.plot(steps, values, color="black", linewidth=1.8, label=f"control ({len(control)} seeds)")
        highest = max(values, default=0.0)
        for name, tables in arms.items():
            steps, values = _mean_curve(tables, metric)
            ax.plot(steps, values, linewidth=1.1, label=labels.get(name, name))
            highest = max([highest, *values])
        for rule, step in onsets.items():
            mark_onset(ax, step, rule)
        if metric == "kl/mean" and highest > 50:
            ax.set_yscale("symlog")
        images.append((title, finish_panel(plt, fig, ax, title)))
    return images


def verdict_sentences(run_diagnosis: Diagnosis, ranking: Ranking, seeds: int) -> str:
    """What went wrong, from which step, which component, the fix, and what the ablation said."""
    first = headline(run_diagnosis)
    confirmed = ranking.confirmed
    if ranking.verdict == "confirmed":
        best = confirmed[0]
        agrees = "the doctor's first cause" if headline_component(run_diagnosis) == best.arm.component else "not " \
            "the doctor's first cause"
        ablation = (f"An ablation over {seeds} seeds a side confirmed the cause: {best.arm.component} "
                    f"({describe(best.arm)} removed every finding on every seed, p = {best.p_value:.2g}; {agrees}).")
    elif ranking.verdict == "no setting cures it":
        ablation = f"An ablation over {seeds} seeds a side: no setting cures it; {ranking.why}."
    else:
        ablation = f"The ablation over {seeds} seeds did not confirm a cause: {ranking.why}."
    return f"<p class='lead'>{html.escape(first)}</p><p class='lead'><b>{html.escape(ablation)}</b></p>"


def _arms_table(ranking: Ranking) -> str:
    rows = []
    for o in ranking.outcomes:
        c = o.comparison
        truth = (f"{c.truth.change:+.3g} [{c.truth.low:+.3g}, {c.truth.high:+.3g}]" if c.truth is not None else "-")
        findings = ", ".join(f"{f.rule}: {f.status}" for f in c.findings)
        stopped = f" (seeds {', '.join(map(str, o.stopped))} stopped early)" if o.stopped else ""
        stopped += f" (a mask: {o.masked_by} reaches a higher truth)" if o.masked_by else ""
        p = "-" if o.p_value is None else f"{o.p_value:.2g}"
        rows.append(f"<tr><td>{html.escape(describe(o.arm))}</td><td>{o.arm.kind}</td>"
                    f"<td>{html.escape(o.arm.component)}</td><td><b>{c.verdict}</b>{' (confirmed)' if o.confirmed else ''}"
                    f"{stopped}</td><td>{html.escape(findings)}</td><td>{truth}</td><td>{p}</td>"
                    f"<td>{html.escape(', '.join(c.new_findings) or '-')}</td></tr>")
    return ("<table><tr><th>arm</th><th>kind</th><th>tests</th><th>against the control</th><th>findings</th>"
            "<th>truth's change (95%)</th><th>p (findings)</th><th>new findings</th></tr>" + "".join(rows) + "</table>")


def write_ablation_report(path: Path, run_table: MetricTable, run_diagnosis: Diagnosis, ranking: Ranking,
                          control: list[MetricTable], arms: dict[str, list[MetricTable]], summary: dict) -> Path:
    onsets: dict[str, int] = {}
    for f in run_diagnosis.findings:
        if f.severity in ("high", "medium"):
            onsets.setdefault(f.rule, f.onset_step)
    labels = {o.arm.name: describe(o.arm) for o in ranking.outcomes}
    images = arm_panels(control, arms, onsets, labels)
    figures = ("<p class='muted'>No plots: install matplotlib (pip install 'rlhflab[report]').</p>" if images is None
               else "".join(f"<img alt='{html.escape(t)}' src='data:image/png;base64,{p}'>" for t, p in images))
    counts = ", ".join(f"{rule} on {n} of {ranking.control_runs}" for rule, n in ranking.control_counts.items())
    plan = summary["plan"]
    skipped = "".join(f"<li>{html.escape(s)}</li>" for s in plan.get("skipped", []))
    findings = "".join(f"<li><b>{html.escape(f.title)}</b> (<code>{f.rule}</code>, {f.severity}, from step "
                       f"{f.onset_step}); causes: {html.escape(', '.join(c.component for c in f.causes))}</li>"
                       for f in run_diagnosis.findings)
    page = (f"<!doctype html><html><head><meta charset='utf-8'><title>rlhflab ablate: "
            f"{html.escape(summary['run'])}</title><style>{STYLE}</style></head><body>"
            f"<h1>rlhflab ablate: {html.escape(summary['run'])}</h1>"
            f"<h2>Verdict: {html.escape(ranking.verdict)}</h2>"
            f"{verdict_sentences(run_diagnosis, ranking, len(plan['seeds']))}"
            f"<p>Next: <code>{html.escape(summary['next'])}</code></p>"
            f"<h2>Curves: each arm over the control (mean over seeds {', '.join(map(str, plan['seeds']))})</h2>"
            f"<div class='grid'>{figures}</div>"
            f"<h2>Arms, best first</h2>{_arms_table(ranking)}"
            f"<p class='muted'>The control shows {html.escape(counts or 'no finding')}. {html.escape(plan['seeds_why'])}."
            f"</p>{_time_line(summary.get('time'))}" + (f"<p>Candidate fixes not run:</p><ul>{skipped}</ul>" if skipped else "")
            + f"<h2>The run's findings</h2><ul>{findings or '<li>none</li>'}</ul></body></html>")
    Path(path).write_text(page, encoding="utf-8")
    return Path(path)


def _time_line(took: dict | None) -> str:
    if not took:
        return ""
    arms = ", ".join(f"{name} {seconds:.0f} s" for name, seconds in took["seed_runs_s"].items())
    return (f"<p class='muted'>Time: {took['wall_s']:.0f} s of wall time; each arm's seed runs, summed: "
            f"{html.escape(arms)}.</p>")
