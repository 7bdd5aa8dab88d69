"""`rlhflab compare --html F`: both sides' curves overlaid (the first run of each side; after
the fix dashed) with the before side's findings marked, and the comparison's table, in one
self-contained page."""

from __future__ import annotations

import html
from pathlib import Path

from rlhflab.doctor.compare import Comparison
from rlhflab.doctor.diagnose import diagnose
from rlhflab.doctor.report import STYLE, plot_panels
from rlhflab.doctor.table import MetricTable


def write_compare_report(path: Path, before: MetricTable, after: MetricTable, result: Comparison) -> Path:
    images = plot_panels(before, diagnose(before), compare=after)
    figures = ("<p class='muted'>No plots: install matplotlib (pip install 'rlhflab[report]').</p>" if images is None
               else "".join(f"<img alt='{html.escape(t)}' src='data:image/png;base64,{png}'>" for t, png in images))
    rows = "".join(f"<tr><td>{html.escape(f.rule)}</td><td>{f.status}</td><td>{html.escape(f.metric)}</td>"
                   f"<td>{f.before:.4g}</td><td>{f.after:.4g}</td></tr>" for f in result.findings)
    truth = ""
    if result.truth is not None:
        t = result.truth
        truth = (f"<p>Truth ({html.escape(t.metric)}, the {html.escape(t.which)}): {t.before_end:.4g} -> "
                 f"{t.after_end:.4g}, change {t.change:+.4g} [{t.low:+.4g}, {t.high:+.4g}] "
                 f"<span class='muted'>({html.escape(t.method)})</span></p>")
    new = f"<p>New findings after the fix: {html.escape(', '.join(result.new_findings))}</p>" if result.new_findings else ""
    page = (f"<!doctype html><html><head><meta charset='utf-8'><title>rlhflab compare</title><style>{STYLE}</style>"
            f"</head><body><h1>rlhflab compare: {html.escape(before.source)} -> {html.escape(after.source)}</h1>"
            f"<h2>Verdict: {result.verdict}</h2><p>{html.escape(result.why)}</p>"
            "<table><tr><th>finding before</th><th>after the fix</th><th>evidence metric</th><th>before</th>"
            f"<th>after</th></tr>{rows}</table>{new}{truth}<h2>Curves (after the fix dashed)</h2>"
            f"<div class='grid'>{figures}</div></body></html>")
    Path(path).write_text(page, encoding="utf-8")
    return Path(path)
