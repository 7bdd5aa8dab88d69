"""Arms of an ablation, ranked: each arm's runs compared with the control's as `rlhflab
compare` compares two sides (doctor/compare.py), and the verdict that names the confirmed
cause, or says that no setting cures the run.

An arm cures when every medium/high finding of the control is gone on all its seeds (each
run to the control's full length) and the truth did not fall beyond its noise: compare's
verdict "fixed", counting the control's findings that reproduce (on most of its seeds).
Where none reproduces, compare's "fixed" is the truth risen beyond its 95% interval (the
seeds of both sides resampled), and that interval confirms it. A
cure is confirmed when the control shows a finding on enough of its seeds that an arm
showing it on none is unlikely by chance, were the arm to do nothing: Fisher's exact test,
one-sided (Fisher 1935), p <= 0.05 for at least one finding, which with 3 seeds a side
needs that finding on all 3 control seeds (p = 1/20). The number of seeds is chosen for this test and for the truth: the
standard two-sample size n = 2 (z_{1-a/2} + z_{power})^2 s^2 / d^2 (Cohen 1988, ch. 2) for
a cure of the size the run lost (d, its truth's fall from its best level) against the seed
spread s.
"""

from __future__ import annotations

import math
import random
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Literal

from rlhflab.doctor.compare import (
    WORLD_SEED_SPREAD,
    Comparison,
    TruthChange,
    block_means,
    compare_tables,
    differing_settings,
    end_values,
    last_step,
    truth_change,
)
from rlhflab.doctor.diagnose import diagnose
from rlhflab.doctor.findings import Change, Diagnosis, Finding
from rlhflab.doctor.formats import render_change
from rlhflab.doctor.table import MetricTable

ArmKind = Literal["setting", "component", "given", "observed"]
AblationVerdict = Literal["confirmed", "not confirmed", "no setting cures it", "cannot tell"]
CONFIRM_P = 0.05
POWER = 0.8
MIN_SEEDS = 3  # the fewest seeds a side at which the findings' test can reach CONFIRM_P
MAX_SEEDS = 8
VERDICT_ORDER = {"fixed": 0, "partly fixed": 1, "cannot tell": 2, "not fixed": 3, "worse": 4}


@dataclass(frozen=True)
class Arm:
    """One candidate fix: config overrides in rlhflab keys, and what it tests."""

    name: str  # its directory under RUN/ablate/
    # a doctor's fix for a setting, a component swapped back to its default, given by --fix, or
    # runs given to `rlhflab compare` (their changes read from their logs)
    kind: ArmKind
    changes: tuple[str, ...]  # key=value overrides
    component: str  # the doctor's component for a setting arm; the PPOComponents field for a component arm
    why: str = ""  # the cause it tests, in words


@dataclass
class ArmOutcome:
    arm: Arm
    comparison: Comparison  # its runs against the control's
    cures: bool  # compare's verdict "fixed"
    p_value: float | None  # the findings' test (smallest over the control's findings); None without findings
    stopped: list[int] = field(default_factory=list)  # seeds stopped early, the finding already there
    masked_by: str = ""  # a better cure whose truth is higher beyond noise: this arm only hides the symptoms

    @property
    def confirmed(self) -> bool:
        """A cure, with the findings' test passed; with no finding to test (p None), the cure
        is compare's "the truth rose" beyond its 95% interval over both sides' seeds. Not a
        cure that another cure beats on the truth beyond noise (`masked_by`)."""
        return self.cures and not self.masked_by and (self.p_value is None or self.p_value <= CONFIRM_P)

    def to_json(self) -> dict:
        return {"arm": asdict(self.arm), "verdict": self.comparison.verdict, "why": self.comparison.why,
                "cures": self.cures, "confirmed": self.confirmed, "p_value": self.p_value,
                "masked_by": self.masked_by, "stopped_seeds": self.stopped, "comparison": self.comparison.to_json()}


@dataclass
class Ranking:
    outcomes: list[ArmOutcome]  # best first
    verdict: AblationVerdict
    why: str
    control_counts: dict[str, int]  # finding -> control seeds showing it
    control_runs: int

    @property
    def confirmed(self) -> list[ArmOutcome]:
        return [o for o in self.outcomes if o.confirmed]

    @property
    def exit_code(self) -> int:
        """0 for a confirmed cure, 1 when no arm cures, 3 when it cannot tell."""
        return {"confirmed": 0, "no setting cures it": 1}.get(self.verdict, 3)

    def next_step(self) -> str:
        """What to do after a ranking of arms given as runs."""
        if self.verdict == "confirmed":
            return f"apply {describe(self.confirmed[0].arm)}"
        if self.verdict == "not confirmed":
            return "run more seeds of the control and of the cure, and compare again"
        if self.verdict == "no setting cures it":
            return ("rlhflab checkup --policy DIR --reward-model DIR --prompts FILE (its probes say which components "
                    "they clear)")
        return "nothing to confirm"

    def to_json(self) -> dict:
        return {"verdict": self.verdict, "why": self.why, "control_counts": self.control_counts,
                "control_runs": self.control_runs, "arms": [o.to_json() for o in self.outcomes]}


def none_on_arm_p(control_with: int, control_runs: int, arm_runs: int) -> float:
    """Fisher's exact test, one-sided: the chance that an arm's runs show a finding on none
    of `arm_runs` when it does nothing, given the control showed it on `control_with` of
    `control_runs` (hypergeometric P(X = 0) = C(n - k, m) / C(n, m), n = all runs, k = those
    with the finding, m = the arm's)."""
    total = control_runs + arm_runs
    if arm_runs > total - control_with:
        return 0.0
    return math.comb(total - control_with, arm_runs) / math.comb(total, arm_runs)


def seeds_for_effect(effect: float, spread: float, alpha: float = CONFIRM_P, power: float = POWER) -> int:
    """Seeds a side to tell a change of `effect` from seed noise of standard deviation
    `spread` (two-sided test at `alpha`, with `power`), at least MIN_SEEDS, at most MAX_SEEDS."""
    normal = statistics.NormalDist()
    z = normal.inv_cdf(1 - alpha / 2) + normal.inv_cdf(power)
    needed = 2 * (z * spread / effect) ** 2 if effect > 0 else math.inf
    return int(min(MAX_SEEDS, max(MIN_SEEDS, math.ceil(needed)))) if math.isfinite(needed) else MAX_SEEDS


def truth_metric(table: MetricTable) -> str:
    return "reward/gold_mean" if table.get("reward/gold_mean") is not None else "reward/proxy_mean"


def truth_fall(table: MetricTable) -> float:
    """How far the run's truth ended below its best level: the largest moving mean (over a
    window of the last quarter's length) minus the last quarter's mean; what a cure recovers."""
    series = table.get(truth_metric(table))
    if series is None or len(series) < 4:
        return 0.0
    values = list(series.values)
    width = len(end_values(values))
    best = max(statistics.fmean(values[i:i + width]) for i in range(len(values) - width + 1))
    return max(0.0, best - statistics.fmean(values[-width:]))


def within_run_spread(table: MetricTable, seed: int = 0, resamples: int = 500) -> float:
    """The standard deviation of the last quarter's mean of the truth by a moving block
    bootstrap of one run: the noise within the run, a lower bound for the seed spread."""
    series = table.get(truth_metric(table))
    if series is None or len(series) < 4:
        return 0.0
    rng = random.Random(seed)
    ends = end_values(list(series.values))
    return statistics.pstdev(block_means(ends, rng) for _ in range(resamples))


def serious(diagnosis: Diagnosis) -> list[Finding]:
    return [f for f in diagnosis.findings if f.severity in ("high", "medium")]


@dataclass(frozen=True)
class CandidateFix:
    """One of the doctor's fixes, to be tried as an arm: the changes in the log's trainer's keys."""

    component: str
    why: str  # the cause it tests
    changes: tuple[Change, ...]
    rendered: tuple[str, ...]  # KEY=VALUE in the vocabulary it was chosen for


def candidate_fixes(diagnosis: Diagnosis, vocabulary: dict[str, str], top: int, keyed: bool = False,
                    reject: Callable[[tuple[str, ...]], str | None] | None = None,
                    ) -> tuple[list[CandidateFix], list[str]]:
    """The distinct fixes of the top `top` causes over the medium/high findings: every
    finding's first cause before any second cause. A fix is a candidate when each of its
    changes sets a value (and, with `keyed`, has a key in `vocabulary`) and `reject` has no
    reason against it; the others are said, and do not count towards `top`."""
    fixes: list[CandidateFix] = []
    skipped: list[str] = []
    seen: set[tuple[str, ...]] = set()
    findings = serious(diagnosis)
    depth = max((len(f.causes) for f in findings), default=0)
    for rank in range(depth):
        for finding in findings:
            if len(fixes) >= top or rank >= len(finding.causes):
                continue
            cause = finding.causes[rank]
            if cause.fix is None:
                why = (f"already in place ({', '.join(cause.in_place)})" if cause.in_place
                       else "no setting to change; the fix is in code")
                skipped.append(f"{cause.component} ({finding.rule}, cause {rank + 1}): {why}")
                continue
            runnable = [c for c in cause.fix.changes
                        if c.direction == "set" and (not keyed or c.setting in vocabulary)]
            if len(runnable) < len(cause.fix.changes):
                bad = next(c for c in cause.fix.changes if c not in runnable)
                if bad.setting in vocabulary:
                    skipped.append(f"{cause.component} ({finding.rule}): {render_change(vocabulary, bad)} has no "
                                   "value to run")
                else:  # not this trainer's setting: advice in words, never a key of another trainer's
                    skipped.append(f"{cause.component} ({finding.rule}): advice, no key of this trainer's sets it: "
                                   f"{cause.fix.text}")
                continue
            rendered = tuple(render_change(vocabulary, c) for c in cause.fix.changes)
            if tuple(sorted(rendered)) in seen:
                continue
            seen.add(tuple(sorted(rendered)))
            reason = reject(rendered) if reject is not None else None
            if reason is not None:
                skipped.append(f"{', '.join(rendered)} ({cause.component}): {reason}")
                continue
            fixes.append(CandidateFix(cause.component, cause.explanation, cause.fix.changes, rendered))
    return fixes, skipped


def choose_seeds(table: MetricTable, requested: int | None) -> tuple[int, str, list[str]]:
    """Seeds a side: from the seed spread and the run's truth fall (doctor/arms.py), or as
    requested, warned when fewer than that."""
    gold = table.get("reward/gold_mean") is not None
    if gold and table.settings.trainer == "rlhflab":  # gold is the world's: its seed spread is measured
        spread, spread_text = WORLD_SEED_SPREAD.value, f"the world's measured seed spread {WORLD_SEED_SPREAD.value:g}"
    else:
        spread = within_run_spread(table)
        spread_text = f"the spread within the run, {spread:.3g} (a lower bound for the seed spread: none is measured)"
    fall = truth_fall(table)
    truth = "gold" if gold else "proxy"
    findings_test = (f"the findings' test needs at least {MIN_SEEDS} (p = 0.05 when the control shows a finding on all "
                     f"3 and an arm on none)")
    if fall <= spread:  # nothing to recover that seeds could resolve: the findings decide
        needed = MIN_SEEDS
        why = (f"{needed} seeds a side: {findings_test}; the run's {truth} did not fall beyond {spread_text} "
               f"(it fell {fall:.3g} from its best level), so a cure is judged by its findings")
    else:
        needed = seeds_for_effect(fall, spread)
        why = (f"{needed} seeds a side: {findings_test}, and telling a cure of the run's size (its {truth} fell "
               f"{fall:.3g} from its best level) from {spread_text} with power 0.8 needs {needed}"
               + (f" (at most {MAX_SEEDS})" if needed == MAX_SEEDS else ""))
    warnings = []
    if requested is None:
        return needed, why, warnings
    if requested < needed:
        warnings.append(f"--seeds {requested} is below the {needed} this run needs ({why}): a cure may go unconfirmed")
    return requested, f"{requested} seeds a side, as asked (by default: {why})", warnings


def _serious_counts(diagnoses: list[Diagnosis]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for d in diagnoses:
        for rule in {f.rule for f in d.findings if f.severity in ("high", "medium")}:
            counts[rule] = counts.get(rule, 0) + 1
    return counts


def _sort_key(outcome: ArmOutcome) -> tuple:
    truth = outcome.comparison.truth
    change = truth.change if truth is not None else 0.0
    return (not outcome.confirmed, VERDICT_ORDER[outcome.comparison.verdict], -change)


def rank_arms(control: list[MetricTable], arms: list[tuple[Arm, list[MetricTable]]], seed: int = 0,
              truths: dict[str, TruthChange] | None = None) -> Ranking:
    """Each arm's runs against the control's, best first: confirmed cures, then by compare's
    verdict, then by the truth's change; and the ablation's verdict. `truths`: each arm's
    truth change measured elsewhere (a rating study holding every arm), by arm name; the
    curves' truth then decides no mask."""
    control_diagnoses = [diagnose(t) for t in control]
    # The control's findings that reproduce: on most of its seeds (a finding on one seed in
    # several is the rule's own noise, as compare counts new findings).
    counts = {rule: n for rule, n in _serious_counts(control_diagnoses).items() if 2 * n > len(control)}
    outcomes = []
    for arm, tables in arms:
        comparison = compare_tables(control, tables, seed=seed, reproducible=True,
                                    truth=(truths or {}).get(arm.name))
        # The arm did something when any finding it removed was reliably there: the smallest p.
        p = min((none_on_arm_p(k, len(control), len(tables)) for k in counts.values()), default=None)
        full = last_step(control[0]) if control else -1
        stopped = [i for i, t in enumerate(tables) if last_step(t) < full]
        outcomes.append(ArmOutcome(arm, comparison, comparison.verdict == "fixed", p, stopped))
    if not truths:
        _mark_masks(outcomes, dict(((a.name, t) for a, t in arms)), seed)
    outcomes.sort(key=_sort_key)
    verdict, why = _verdict(outcomes, counts, len(control))
    return Ranking(outcomes, verdict, why, counts, len(control))


def _mark_masks(outcomes: list[ArmOutcome], tables: dict[str, list[MetricTable]], seed: int) -> None:
    """A cure removes the symptoms without lowering the truth; one that removes them by
    holding the policy back (a smaller learning rate over a bug) leaves the truth below what
    the real cure reaches. Each cure is held to the cure with the highest truth: beyond
    that one's interval below it (compare's truth change, seeds of both resampled), it
    masks the cause rather than removing it."""
    cures = [o for o in outcomes if o.cures and o.comparison.truth is not None]
    if len(cures) < 2:
        return
    best = max(cures, key=lambda o: o.comparison.truth.change)
    for other in cures:
        if other is best:
            continue
        gap = truth_change(tables[best.arm.name], tables[other.arm.name], seed)
        if gap is not None and gap.significant and gap.change < 0:
            other.masked_by = best.arm.name


def observed_arm(name: str, control: list[MetricTable], runs: list[MetricTable]) -> Arm:
    """An arm given as runs rather than as a change (`rlhflab compare BEFORE -- ARM1 -- ARM2`):
    its changes are the settings its logs show differing from the control's, in the log's
    own keys where its trainer's vocabulary has them."""
    vocabulary = runs[0].vocabulary
    changes = tuple(f"{vocabulary.get(setting, setting)}={after}"
                    for setting, (_, after) in differing_settings(control, runs).items())
    return Arm(name, "observed", changes, "", "runs given after a --")


def describe(arm: Arm) -> str:
    if arm.kind == "component":
        return f"PPOComponents.{arm.component} swapped back to its default"
    if arm.kind == "observed":
        return f"{arm.name} ({', '.join(arm.changes)})" if arm.changes else arm.name
    return ", ".join(arm.changes)


def _verdict(outcomes: list[ArmOutcome], counts: dict[str, int], control_runs: int) -> tuple[AblationVerdict, str]:
    confirmed = [o for o in outcomes if o.confirmed]
    settings = [o for o in confirmed if o.arm.kind != "component"]
    components = [o for o in confirmed if o.arm.kind == "component"]
    if settings:
        names = "; ".join(describe(o.arm) for o in settings)
        also = (f"; swapping a component back cures it too ({'; '.join(describe(o.arm) for o in components)})"
                if components else "")
        how = "removes every finding" if counts else "raises the truth beyond its interval (no finding to remove)"
        cause = f"{settings[0].arm.component} ({names})" if settings[0].arm.component else names
        return "confirmed", f"confirmed cause: {cause} {how}{also}"
    unconfirmed = [o for o in outcomes if o.cures and not o.confirmed and not o.masked_by and o.arm.kind != "component"]
    masks = [o for o in outcomes if o.masked_by and o.arm.kind != "component"]
    masked = (f" ({'; '.join(describe(o.arm) for o in masks)} removed the findings but kept the truth below it "
              "beyond noise: a mask, not a cure)") if masks else ""
    if unconfirmed:
        weakest = min(counts.values())
        return "not confirmed", (f"{describe(unconfirmed[0].arm)} removes every finding, but the control shows one on "
                                 f"only {weakest} of {control_runs} seeds (p = {unconfirmed[0].p_value:.2g} > "
                                 f"{CONFIRM_P}): more seeds would tell")
    if components:
        return "no setting cures it", f"{describe(components[0].arm)} cures it: the bug is in that code{masked}"
    if not counts:
        return "cannot tell", (f"no finding of medium or high severity reproduces on most of the control's "
                               f"{control_runs} seed(s), and no arm raised the truth beyond its interval")
    return "no setting cures it", f"no arm removed every finding on every seed: the cause is likely in code{masked}"


def arm_names(first_runs: list[Path]) -> list[str]:
    """A name per arm from the first run of the control and of each arm (the control's
    first): the first part of its path that those runs do not all share
    (`ablation/beta-0.2/seed0` -> `beta-0.2`; `a/trainer_state.json` -> `a`), numbered where
    two agree."""
    paths = [Path(run).parts for run in first_runs]
    shared = 0
    while all(len(p) > shared + 1 and p[shared] == paths[0][shared] for p in paths):
        shared += 1
    names = []
    for i, (run, parts) in enumerate(zip(first_runs[1:], paths[1:]), start=1):
        at = min(shared, len(parts) - 1)
        name = Path(parts[at]).stem if at == len(parts) - 1 and Path(run).is_file() else parts[at]
        name = name or f"arm{i}"
        names.append(name if name not in names else f"{name}-{i}")
    return names

