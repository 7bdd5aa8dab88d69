"""`RUN/report.html`: one self-contained page (plots embedded as PNG) of a run's curves,
the doctor's findings with their onsets marked, sample responses from early, middle and
late training, and, after `rlhflab verify`, the before/after comparison."""

from __future__ import annotations

import base64
import html
import io
import json
from pathlib import Path

from rlhflab.doctor.findings import Diagnosis
from rlhflab.doctor.formats import render_change, verify_command
from rlhflab.doctor.sample_measures import samples_at
from rlhflab.doctor.table import MetricTable
from rlhflab.doctor.truth import GOLD, RatedTruth
from rlhflab.runs import RunDir

PANELS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("reward", ("reward/proxy_mean", "reward/gold_mean", "reward/total_mean")),
    ("KL to the reference", ("kl/mean", "kl/k3_mean")),
    ("KL coefficient", ("kl/coef",)),
    ("entropy", ("policy/entropy",)),
    ("diversity", ("response/distinct_1", "response/distinct_2", "response/self_bleu", "response/identical_frac")),
    ("length and EOS", ("response/length_mean", "response/eos_rate")),
    ("the samples' text", ("text/opening_share", "text/near_duplicate_frac", "text/distinct_2", "text/repetition")),
    ("PPO update", ("policy/clipfrac", "policy/approxkl", "policy/ratio_mean", "value/clipfrac")),
    ("critic", ("value/explained_variance", "value/loss")),
)


def png(fig) -> str:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=90, bbox_inches="tight")
    return base64.b64encode(buffer.getvalue()).decode()


def pyplot():
    """matplotlib's pyplot on a file backend, or None when matplotlib is not installed (the
    doctor installs without it)."""
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_panels(table: MetricTable, diagnosis: Diagnosis,
                compare: MetricTable | None = None) -> list[tuple[str, str]] | None:
    """(title, base64 PNG) per panel that has data; finding onsets drawn as vertical lines.
    None without matplotlib."""
    plt = pyplot()
    if plt is None:
        return None
    images = []
    for title, metrics in PANELS:
        present = [m for m in metrics if table.get(m, any_unit=True) is not None]
        if not present:
            continue
        fig, ax = plt.subplots(figsize=(5.2, 2.8))
        for metric in present:
            if metric == GOLD and table.truth is not None:
                _plot_rated(ax, table.truth)
                continue
            s = table.get(metric, any_unit=True)
            line, = ax.plot(s.steps, s.values, label=metric, linewidth=1.2)
            if compare is not None and compare.get(metric) is not None:
                c = compare.get(metric)
                ax.plot(c.steps, c.values, "--", color=line.get_color(), linewidth=1.0, label=f"{metric} (after fix)")
        for finding in diagnosis.findings:
            if any(e.metric in metrics for e in finding.evidence):
                mark_onset(ax, finding.onset_step, finding.rule)
        if title == "KL to the reference" and max(table.get("kl/mean").values, default=0) > 50:
            ax.set_yscale("symlog")
        images.append((title, finish_panel(plt, fig, ax, title)))
    return images


def mark_onset(ax, step: int, rule: str) -> None:
    """A finding's onset: a dotted line with the rule's name."""
    ax.axvline(step, color="crimson", linestyle=":", linewidth=1.2)
    ax.text(step, ax.get_ylim()[1], f" {rule}", color="crimson", fontsize=7, va="top", rotation=90)


def finish_panel(plt, fig, ax, title: str) -> str:
    """A panel's title, axis and legend, as a base64 PNG; the figure is closed."""
    ax.set_title(title, fontsize=10)
    ax.set_xlabel("PPO iteration", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.legend(fontsize=6, loc="best")
    image = png(fig)
    plt.close(fig)
    return image


def _plot_rated(ax, truth: RatedTruth) -> None:
    """The rated truth on its own axis (a rating scale, not the proxy's unit): each bin's mean
    rating at its mean step, with its 95% interval."""
    twin = ax.twinx()
    points = truth.points
    twin.errorbar([p.step for p in points], [p.mean for p in points],
                  yerr=[[p.mean - p.low for p in points], [p.high - p.mean for p in points]],
                  fmt="o-", color="black", markersize=3, linewidth=1.0, capsize=2, label="rated (95% interval)")
    twin.set_ylim(truth.scale[0] - 0.2, truth.scale[1] + 0.2)
    twin.set_ylabel(f"mean rating ({truth.scale[0]}-{truth.scale[1]})", fontsize=7)
    twin.tick_params(labelsize=7)
    twin.legend(fontsize=6, loc="lower right")


def _rated_at(table: MetricTable, step: int) -> str:
    """The rated items of the study's bin that holds a finding's onset."""
    point = table.truth.point_at(step) if table.truth is not None else None
    if point is None:
        return ""
    rows = "".join(f"<tr><td>{e.rating:.2f}</td><td>{e.step}</td><td>{html.escape(e.prompt)}</td>"
                   f"<td>{html.escape(e.response)}</td></tr>" for e in point.examples)
    return (f"<details open><summary>Rated samples of steps {point.first_step}-{point.last_step}: mean rating "
            f"{point.mean:.2f} [{point.low:.2f}, {point.high:.2f}], {point.n} ratings</summary>"
            f"<table><tr><th>rating</th><th>step</th><th>prompt</th><th>response</th></tr>{rows}</table></details>")


def _samples_section(table: MetricTable) -> str:
    """Responses from early, middle and late training (the first four of each step)."""
    samples = [s for sample_set in table.samples if sample_set.split == "train" for s in sample_set.samples]
    if not samples:
        return ""
    steps = sorted({s.step for s in samples})
    picks = {"early": steps[0], "middle": steps[len(steps) // 2], "late": steps[-1]}
    rows = []
    for label, step in picks.items():
        for s in [x for x in samples if x.step == step][:4]:
            rows.append(f"<tr><td>{label} ({step})</td><td>{html.escape(s.prompt)}</td>"
                        f"<td>{html.escape(s.response)}</td><td>{_signed(s.reward)}</td><td>{_signed(s.gold)}</td></tr>")
    return ("<h2>Samples</h2><table><tr><th>when</th><th>prompt</th><th>response</th><th>reward</th><th>gold</th></tr>"
            + "".join(rows) + "</table>")


def _signed(value: float | None) -> str:
    return "" if value is None else f"{value:+.2f}"


def _onset_samples(table: MetricTable, step: int, shown: dict[int, str], title: str) -> str:
    """The samples of a finding's onset: the highest- and lowest-rewarded responses (their
    reward beside them) and the most repeated openings (how many responses open so). Each
    step's samples are shown once, under the first finding that began there (`shown`)."""
    found = samples_at(table.samples, step)
    if found is None:
        return ""
    if found.step in shown:
        return f"<p class='muted'>Samples at step {found.step}: under “{html.escape(shown[found.step])}” above.</p>"
    shown[found.step] = title
    openings = "".join(f"<li>{n} of {found.count} ({n / found.count:.0%}) open with "
                       f"<q>{html.escape(words)}</q></li>" for words, n in found.openings)
    rows = "".join(f"<tr><td>{label}</td><td>{_signed(s.reward)}</td><td>{_signed(s.gold)}</td>"
                   f"<td>{html.escape(s.prompt)}</td><td>{html.escape(s.response)}</td></tr>"
                   for label, group in (("highest reward", found.highest), ("lowest reward", found.lowest))
                   for s in group)
    table_html = (f"<table><tr><th></th><th>reward</th><th>gold</th><th>prompt</th><th>response</th></tr>{rows}"
                  "</table>" if rows else "<p class='muted'>The samples carry no reward.</p>")
    return (f"<details open><summary>Samples at step {found.step} ({found.count} responses)</summary>"
            f"<p>Most repeated openings:</p><ul>{openings}</ul>{table_html}</details>")


def _headline_finding(diagnosis: Diagnosis):
    serious = [f for f in diagnosis.findings if f.severity in ("high", "medium")]
    return min(serious, key=lambda f: (f.severity != "high", f.onset_step)) if serious else None


def headline_component(diagnosis: Diagnosis) -> str:
    """The component the headline blames first ("" when none)."""
    first = _headline_finding(diagnosis)
    return first.causes[0].component if first is not None and first.causes else ""


def headline(diagnosis: Diagnosis) -> str:
    """The diagnosis in a sentence or two: what went wrong, from which step, the most likely
    component and its fix (the earliest high-severity finding, else the earliest)."""
    first = _headline_finding(diagnosis)
    if first is None:
        return VERDICTS[diagnosis.verdict]
    serious = [f for f in diagnosis.findings if f.severity in ("high", "medium")]
    cause = first.causes[0] if first.causes else None
    text = f"{first.title}, from step {first.onset_step}"
    if cause is not None:
        text += f"; most likely cause: {cause.component} ({cause.explanation})"
        fix = first.fix
        if fix is not None:
            text += "; fix: " + ", ".join(render_change(diagnosis.vocabulary, c) for c in fix.changes)
    others = sorted({f.rule for f in serious} - {first.rule})
    return text + "." + (f" Also: {', '.join(others)}." if others else "")


def _ablation_line(run: RunDir) -> str:
    """Whether an ablation confirmed the cause (RUN/ablate/ablate.json), or how to run one."""
    path = run.ablate / "ablate.json"
    if not path.is_file():
        return (f"<p class='muted'>Not confirmed by experiment: <code>rlhflab ablate {html.escape(str(run.root))}</code> "
                "reruns the candidate fixes over seeds.</p>")
    data = json.loads(path.read_text())
    return (f"<p><b>Ablation ({len(data['plan']['seeds'])} seeds a side): {html.escape(data['verdict'])}</b>: "
            f"{html.escape(data['why'])}. <a href='ablate/report.html'>The ablation's report</a>.</p>")


def _fix_text(diagnosis: Diagnosis, cause) -> str:
    if cause.fix is None and cause.in_place:
        return f" <i>already in place: {html.escape(', '.join(cause.in_place))}</i>"
    if cause.fix is None:
        return ""
    changes = ", ".join(render_change(diagnosis.vocabulary, c) for c in cause.fix.changes)
    return f" <i>fix: {html.escape(changes)}</i> ({html.escape(cause.fix.text)})"


VERDICTS = {"finding": "Findings of medium or high severity: see below.",
            "no_finding": "No finding of medium or high severity.",
            "cannot_tell": "Cannot tell: the log does not hold enough to call the run healthy."}


def coverage_section(diagnosis: Diagnosis) -> str:
    """The verdict and, per symptom family, what could be checked and on how many steps."""
    rows = "".join(
        f"<tr><td>{html.escape(family)}</td><td>{c.status.replace('_', ' ')}</td>"
        f"<td>{c.steps if c.status == 'checked' else ''}</td>"
        f"<td>{html.escape(c.detail)}</td></tr>"
        for family, c in diagnosis.coverage.items())
    reason = (f" It needs {html.escape(diagnosis.cannot_tell_reason())}." if diagnosis.verdict == "cannot_tell" else "")
    css = "ok" if diagnosis.verdict == "no_finding" else "muted"
    return (f"<h2>Verdict</h2><p class='{css}'>{VERDICTS[diagnosis.verdict]}{reason}</p>"
            f"<p>{diagnosis.steps} steps read ({html.escape(diagnosis.trainer)}, {html.escape(diagnosis.format)}).</p>"
            "<table><tr><th>symptom family</th><th>status</th><th>steps</th><th>rules, or what is missing</th></tr>"
            f"{rows}</table>")


def _findings_section(diagnosis: Diagnosis, table: MetricTable) -> str:
    if not diagnosis.findings:
        return "<h2>Findings</h2><p>None.</p>"
    parts = ["<h2>Findings</h2>"]
    shown: dict[int, str] = {}
    for f in diagnosis.findings:
        evidence = "".join(
            f"<tr><td>{html.escape(e.metric)}</td><td>{e.onset_step}</td>"
            f"<td>{html.escape(', '.join(f'{k}={v:.4g}' for k, v in e.observed.items()))}</td>"
            f"<td>{html.escape(e.threshold)}</td><td>{html.escape(e.source)}</td></tr>"
            for e in f.evidence
        )
        causes = "".join(
            f"<li><b>{html.escape(c.component)}</b>: {html.escape(c.explanation)}"
            + _fix_text(diagnosis, c)
            + "</li>"
            for c in f.causes
        )
        parts.append(
            f"<div class='finding {f.severity}'><h3>{html.escape(f.title)}</h3>"
            f"<p>rule <code>{f.rule}</code>, symptom <b>{f.symptom}</b>, severity {f.severity}, "
            f"began at step {f.onset_step}</p>"
            f"<table><tr><th>metric</th><th>onset</th><th>observed</th><th>threshold</th><th>source</th></tr>"
            f"{evidence}</table><p>Likely causes, most likely first:</p><ol>{causes}</ol>"
            f"<p>Verify: <code>{html.escape(verify_command(diagnosis, f))}</code></p>"
            f"{_rated_at(table, f.onset_step)}{_onset_samples(table, f.onset_step, shown, f.title)}</div>"
        )
    if diagnosis.skipped:
        skipped = ", ".join(f"{rule} (needs {', '.join(m)})" for rule, m in diagnosis.skipped.items())
        parts.append(f"<p class='muted'>Rules not run for lack of metrics: {html.escape(skipped)}</p>")
    return "".join(parts)


def _verify_section(run: RunDir) -> str:
    path = run.root / "verify.json"
    if not path.is_file():
        return ""
    data = json.loads(path.read_text())
    rows = "".join(
        f"<tr><td>{html.escape(r['rule'])}</td><td>{r.get('status', 'gone' if r['gone'] else 'still there')}</td>"
        f"<td>{html.escape(r['metric'])}</td><td>{r['before']:.4g}</td><td>{r['after']:.4g}</td></tr>"
        for r in data["comparison"]
    )
    return (f"<h2>Verification</h2><p>Rerun with <code>{html.escape(' '.join(data['fix']))}</code> into "
            f"<code>{html.escape(data['rerun'])}</code>; dashed lines in the plots are the rerun.</p>"
            f"<table><tr><th>finding</th><th>after the fix</th><th>metric (mean from the finding's onset)</th><th>before</th>"
            f"<th>after</th></tr>{rows}</table><p>Verdict: {html.escape(data.get('verdict', '-'))} "
            f"({html.escape(data.get('why', ''))})</p>")


STYLE = """body{font-family:system-ui,sans-serif;max-width:1150px;margin:auto;padding:1em;color:#222}
table{border-collapse:collapse;margin:.5em 0;font-size:.85em}td,th{border:1px solid #ccc;padding:3px 6px;vertical-align:top}
.grid{display:flex;flex-wrap:wrap;gap:8px}.grid img{width:370px}.finding{border-left:5px solid #999;padding:0 1em;margin:1em 0}
.lead{font-size:1.1em;max-width:60em}.finding.high{border-color:crimson}.finding.medium{border-color:darkorange}.ok{color:green}.muted{color:#777}"""


def write_report(run_dir: Path, table: MetricTable, diagnosis: Diagnosis, compare: MetricTable | None = None,
                 out: Path | None = None) -> Path:
    """The report of a run directory (`RUN/report.html`), or of any log to `out`."""
    run = RunDir(Path(run_dir))
    images = plot_panels(table, diagnosis, compare)
    if images is None:
        figures = "<p class='muted'>No plots: install matplotlib (pip install 'rlhflab[report]').</p>"
    else:
        figures = "".join(f"<img alt='{html.escape(t)}' src='data:image/png;base64,{png}'>" for t, png in images)
    summary = ""
    eval_path = run.root / "metrics" / "eval.json"
    if eval_path.is_file():
        ev = json.loads(eval_path.read_text())
        keys = [k for k in ev["stage1"] if isinstance(ev["stage1"][k], (int, float))]
        summary = ("<h2>Held-out prompts: stage-1 model vs policy</h2><table><tr><th>metric</th><th>stage 1</th>"
                   "<th>policy</th></tr>" + "".join(
                       f"<tr><td>{k}</td><td>{ev['stage1'][k]:.3f}</td><td>{ev['policy'][k]:.3f}</td></tr>" for k in keys)
                   + "</table>")
    page = (f"<!doctype html><html><head><meta charset='utf-8'><title>rlhflab report: {html.escape(run.root.name)}</title>"
            f"<style>{STYLE}</style></head><body><h1>rlhflab report: {html.escape(str(run.root))}</h1>"
            f"<p class='lead'>{html.escape(headline(diagnosis))}</p>"
            + (_ablation_line(run) if not diagnosis.healthy and diagnosis.verifiable else "")
            + f"<p class='muted'>{diagnosis.steps} PPO iterations; {len(diagnosis.findings)} finding(s).</p>"
            f"<h2>Curves (dotted: where a finding began)</h2><div class='grid'>{figures}</div>"
            f"{coverage_section(diagnosis)}{_findings_section(diagnosis, table)}{_verify_section(run)}{summary}"
            f"{_samples_section(table)}</body></html>")
    target = Path(out) if out is not None else run.report
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(page, encoding="utf-8")
    return target
