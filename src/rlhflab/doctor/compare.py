"""Runs before and after a fix, compared in their noise (`rlhflab compare BEFORE... --
AFTER...`): each finding of the before side gone, weaker or still there; new findings; the
change of the run's truth (the gold or held-out score where both sides log one, else the
proxy, said) with an interval; the settings that differ; a verdict.

Statistics. A training curve is autocorrelated, so the truth's level at the end of a run
(the mean of its last quarter) gets its interval from a moving block bootstrap (Kuensch 1989,
"The jackknife and the bootstrap for general stationary observations"; blocks of n^(1/3)
points, the order Hall, Horowitz & Jing 1995 give for a variance), and with several runs a
side the runs are resampled too (seed-to-seed spread). With one run a side there is no
seed spread: a change of the truth is then "cannot tell" unless it is larger than the seed
spread measured on rlhflab's world (`WORLD_SEED_SPREAD`, for runs of that world only). A
finding that is gone is reported as gone whatever the truth says.
"""

from __future__ import annotations

import math
import random
import statistics
from dataclasses import asdict, dataclass, field, fields
from typing import Literal

from rlhflab.doctor.diagnose import diagnose
from rlhflab.doctor.findings import Diagnosis
from rlhflab.doctor.rules.registry import Threshold
from rlhflab.doctor.table import MetricTable

Verdict = Literal["fixed", "partly fixed", "not fixed", "worse", "cannot tell"]
FindingStatus = Literal["gone", "weaker", "delayed", "still there", "cannot tell"]
EXIT_CODES: dict[str, int] = {"fixed": 0, "not fixed": 1, "worse": 1, "partly fixed": 3, "cannot tell": 3}
SERIOUS = ("high", "medium")
WORLD_SEED_SPREAD = Threshold(
    "WORLD_SEED_SPREAD", 0.023,
    "standard deviation of the last quarter's mean gold over 30 healthy PPO reruns of the reviews world (seeds "
    "1000-1029 of bench/compare_bench.py, 40 iterations from the demo's stages 1-2), fitted on the first 15 of its "
    "seed-only pairs and checked on the other 15; the three healthy demo seeds of the faults bench give 0.020")
CONFIDENCE = 0.95
RESAMPLES = 2000


@dataclass(frozen=True)
class FindingChange:
    rule: str
    status: FindingStatus
    metric: str  # its evidence metric
    before: float  # the metric's last-quarter mean, before (mean over runs)
    after: float
    detail: str


@dataclass(frozen=True)
class TruthChange:
    metric: str  # reward/gold_mean or reward/proxy_mean
    which: str  # "gold or held-out score" or "proxy (no truth logged on both sides)"
    at_matched_steps: float | None  # mean of after - before over the steps both sides logged
    before_end: float
    after_end: float
    change: float
    low: float
    high: float
    significant: bool | None  # None: cannot tell (one run a side and no world spread to hold it to)
    method: str


@dataclass
class Comparison:
    findings: list[FindingChange] = field(default_factory=list)
    new_findings: list[str] = field(default_factory=list)
    truth: TruthChange | None = None
    settings: dict[str, tuple] = field(default_factory=dict)  # setting -> (before, after)
    verdict: Verdict = "cannot tell"
    why: str = ""

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.verdict]

    def to_json(self) -> dict:
        return {"verdict": self.verdict, "why": self.why, "exit_code": self.exit_code,
                "findings": [asdict(f) for f in self.findings], "new_findings": self.new_findings,
                "truth": asdict(self.truth) if self.truth else None,
                "settings": {k: list(v) for k, v in self.settings.items()}}


def end_values(values: list[float]) -> list[float]:
    """The last quarter of a run (at least 3 points): where its end level is read."""
    return values[-max(3, len(values) // 4):]


def block_means(values: list[float], rng: random.Random) -> float:
    """One moving-block-bootstrap resample's mean (blocks of n^(1/3) consecutive points)."""
    n = len(values)
    size = max(1, round(n ** (1 / 3)))
    out: list[float] = []
    while len(out) < n:
        start = rng.randrange(0, n - size + 1)
        out.extend(values[start:start + size])
    return statistics.fmean(out[:n])


def side_level(runs: list[list[float]], rng: random.Random) -> float:
    """One resample of a side's end level: its runs resampled (when several), each run's end
    resampled in blocks; the mean over the resampled runs."""
    chosen = [rng.choice(runs) for _ in runs] if len(runs) > 1 else runs
    return statistics.fmean(block_means(end_values(r), rng) for r in chosen)


def truth_change(before: list[MetricTable], after: list[MetricTable], seed: int = 0) -> TruthChange | None:
    both_gold = all(t.get("reward/gold_mean") is not None for t in before + after)
    metric = "reward/gold_mean" if both_gold else "reward/proxy_mean"
    if any(t.get(metric) is None for t in before + after):
        return None
    which = "gold or held-out score" if both_gold else "proxy (no truth logged on both sides)"
    b_runs = [list(t.get(metric).values) for t in before]
    a_runs = [list(t.get(metric).values) for t in after]
    rng = random.Random(seed)
    diffs = sorted(side_level(a_runs, rng) - side_level(b_runs, rng) for _ in range(RESAMPLES))
    tail = (1 - CONFIDENCE) / 2
    low, high = diffs[int(tail * RESAMPLES)], diffs[int((1 - tail) * RESAMPLES) - 1]
    b_end = statistics.fmean(statistics.fmean(end_values(r)) for r in b_runs)
    a_end = statistics.fmean(statistics.fmean(end_values(r)) for r in a_runs)
    change = a_end - b_end
    matched = None
    b_at = dict(zip(before[0].get(metric).steps, before[0].get(metric).values))
    a_at = dict(zip(after[0].get(metric).steps, after[0].get(metric).values))
    common = sorted(b_at.keys() & a_at.keys())
    if common:
        matched = statistics.fmean(a_at[s] - b_at[s] for s in common)
    method = (f"{CONFIDENCE:.0%} moving block bootstrap (Kuensch 1989) of the last quarter's mean"
              + (", runs resampled for the seed spread" if len(b_runs) > 1 and len(a_runs) > 1 else ""))
    if len(b_runs) > 1 and len(a_runs) > 1:
        significant: bool | None = low > 0 or high < 0
    elif both_gold and all(t.settings.trainer == "rlhflab" for t in before + after):
        bound = 1.96 * math.sqrt(2) * WORLD_SEED_SPREAD.value
        significant = abs(change) > bound and (low > 0 or high < 0)
        method += (f"; one run a side, held to the world's seed spread: |change| > 1.96 x sqrt(2) x "
                   f"{WORLD_SEED_SPREAD.value:g} = {bound:.3g} ({WORLD_SEED_SPREAD.source})")
    else:
        significant = None
        method += "; one run a side: no seed spread to hold the change to"
    return TruthChange(metric, which, matched, b_end, a_end, change, low, high, significant, method)


def _serious(diagnosis: Diagnosis) -> dict[str, str]:
    return {f.rule: f.severity for f in diagnosis.findings if f.severity in SERIOUS}


def _window_mean(tables: list[MetricTable], metric: str, start: int) -> float:
    """The mean of `metric` from step `start` on, per table, averaged over the tables: the
    window a finding was measured over (from its onset), on either side."""
    levels = []
    for table in tables:
        series = table.get(metric, any_unit=True)
        values = [v for step, v in zip(series.steps, series.values) if step >= start] if series else []
        finite = [v for v in values if math.isfinite(v)]
        if finite:
            levels.append(statistics.fmean(finite))
    return statistics.fmean(levels) if levels else math.nan


def last_step(table: MetricTable) -> int:
    """The last training step a table holds (stage 1-2 series count other steps)."""
    return max((s.steps[-1] for name, s in table.series.items() if len(s) and not name.startswith(("rm/", "lm/"))),
               default=-1)


def _onsets(diagnoses: list[Diagnosis], rule: str) -> list[int]:
    return [f.onset_step for d in diagnoses for f in d.findings if f.rule == rule and f.severity in SERIOUS]


def finding_changes(before: list[Diagnosis], after: list[Diagnosis], before_tables: list[MetricTable],
                    after_tables: list[MetricTable], reproducible: bool = False) -> tuple[list[FindingChange], list[str]]:
    """Each medium/high finding of the before side (any of its runs): gone (on no after run,
    each of which ran as long as the runs before), weaker (on fewer after runs, or less
    severe), delayed (on every after run, each onset later than every onset before), still
    there, or cannot tell (absent only from after runs cut shorter than the runs before);
    and the after side's new ones (on none of the runs before and on most of those after).

    "Delayed" with n runs a side: were onsets exchangeable, all n after ones would follow
    all n before ones with probability 1 / C(2n, n) (0.05 at n = 3): a later onset is not a
    cure, whatever the curves do after it. With `reproducible`, only the findings on most
    runs before count (as new findings count only on most runs after): one seed in several
    is the rule's own noise."""
    order = {"high": 2, "medium": 1}
    b_rules: dict[str, str] = {}
    evidence: dict[str, str] = {}
    for d in before:
        for f in d.findings:
            if f.severity in SERIOUS and order[f.severity] > order.get(b_rules.get(f.rule, ""), 0):
                b_rules[f.rule] = f.severity
                evidence[f.rule] = f.evidence[0].metric if f.evidence else ""
    if reproducible:
        b_rules = {rule: sev for rule, sev in b_rules.items() if 2 * sum(rule in _serious(d) for d in before) > len(before)}
    after_serious = [_serious(d) for d in after]
    full_length = min((last_step(t) for t in before_tables), default=-1)
    complete = [last_step(t) >= full_length for t in after_tables]
    changes = []
    for rule, severity in sorted(b_rules.items()):
        on = [s[rule] for s in after_serious if rule in s]
        metric = evidence[rule]
        b_onsets, a_onsets = _onsets(before, rule), _onsets(after, rule)
        start = min(b_onsets)  # the rule measured its metric from its onset: both sides are read there
        b, a = _window_mean(before_tables, metric, start), _window_mean(after_tables, metric, start)
        if not on and all(complete):
            status, detail = "gone", f"on none of the {len(after)} run(s) after"
        elif not on:
            status, detail = "cannot tell", (f"on none of the {len(after)} run(s) after, but {complete.count(False)} "
                                             f"stopped before step {full_length}, where the runs before end")
        elif len(on) < len(after) or max(order[s] for s in on) < order[severity]:
            status, detail = "weaker", f"on {len(on)} of {len(after)} run(s) after, at most {max(on, key=order.get)}"
        elif min(a_onsets) > max(b_onsets):
            status, detail = "delayed", (f"on all {len(after)} run(s) after, from step {min(a_onsets)} (before: from "
                                         f"step {min(b_onsets)}, the last at {max(b_onsets)})")
        else:
            status, detail = "still there", f"on all {len(after)} run(s) after"
        changes.append(FindingChange(rule, status, metric, b, a, detail + f"; {metric} {b:.4g} -> {a:.4g} (mean "
                                     f"from step {start}, the finding's onset)"))
    before_any = {rule for d in before for rule in _serious(d)}
    counts = {rule: sum(rule in s for s in after_serious) for rule in {r for s in after_serious for r in s} - before_any}
    # A new finding counts when most runs after show it: one seed in several is the rule's own noise.
    new = sorted(rule for rule, count in counts.items() if 2 * count > len(after))
    return changes, new


def differing_settings(before: list[MetricTable], after: list[MetricTable]) -> dict[str, tuple]:
    b, a = before[0].settings, after[0].settings
    return {f.name: (getattr(b, f.name), getattr(a, f.name)) for f in fields(b)
            if f.name not in ("trainer", "has_gold") and getattr(b, f.name) != getattr(a, f.name)}


def compare_tables(before: list[MetricTable], after: list[MetricTable], seed: int = 0,
                   truth: TruthChange | None = None, reproducible: bool = False) -> Comparison:
    """The comparison of two sides (one or more runs each), with its verdict; `truth`: the
    truth's change measured elsewhere (a rating study), instead of from the curves;
    `reproducible`: only the findings on most runs before count (finding_changes)."""
    b_diag, a_diag = [diagnose(t) for t in before], [diagnose(t) for t in after]
    result = Comparison()
    result.findings, result.new_findings = finding_changes(b_diag, a_diag, before, after, reproducible)
    result.truth = truth or truth_change(before, after, seed)
    result.settings = differing_settings(before, after)
    result.verdict, result.why = verdict(result, b_diag, a_diag)
    return result


def verdict(result: Comparison, before: list[Diagnosis], after: list[Diagnosis]) -> tuple[Verdict, str]:
    truth = result.truth
    worse_truth = truth is not None and truth.significant and truth.change < 0
    better_truth = truth is not None and truth.significant and truth.change > 0
    if result.new_findings:
        return "worse", "new finding(s) after: " + ", ".join(result.new_findings)
    if worse_truth:
        return "worse", f"the {truth.which} fell by {-truth.change:.3g} ({truth.low:+.3g} to {truth.high:+.3g})"
    if any(d.verdict == "cannot_tell" for d in after):
        return "cannot tell", "a run after the fix could not be examined: " + next(
            d.cannot_tell_reason() for d in after if d.verdict == "cannot_tell")
    statuses = [f.status for f in result.findings]
    if statuses:
        if all(s == "gone" for s in statuses):
            return "fixed", "every finding of the run(s) before is gone"
        if any(s in ("gone", "weaker") for s in statuses):
            gone = sum(s == "gone" for s in statuses)
            improved = sum(s in ("gone", "weaker") for s in statuses)
            rest = ", ".join(f"{f.rule} {f.status}" for f in result.findings if f.status != "gone")
            fell = truth is not None and truth.change < 0
            if 2 * improved >= len(statuses) and not fell:
                return "partly fixed", f"{gone} of {len(statuses)} finding(s) gone, " + rest
            why = [f"{improved} of {len(statuses)} finding(s) gone or weaker"]
            if 2 * improved < len(statuses):
                why.append("fewer than half")
            if fell:
                why.append(f"the {truth.which} fell ({truth.change:+.3g}, inside its interval)")
            return "not fixed", "; ".join(why) + ": " + rest
        if "cannot tell" in statuses:
            return "cannot tell", "the run(s) after stopped before the findings' steps: " + ", ".join(
                f.rule for f in result.findings if f.status == "cannot tell")
        if "delayed" in statuses:
            return "not fixed", "the finding(s) came later but came: " + ", ".join(
                f.rule for f in result.findings if f.status == "delayed")
        return "not fixed", "every finding of the run(s) before is still there"
    if better_truth:
        return "fixed", f"no finding before; the {truth.which} rose by {truth.change:.3g}"
    if truth is not None and truth.significant is None:
        return "cannot tell", "no finding before, and " + truth.method.split("; ")[-1]
    return "cannot tell", "no finding before, and no change of the truth beyond its noise"
