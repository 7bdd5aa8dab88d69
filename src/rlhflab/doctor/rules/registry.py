"""The rule registry: each rule is declared once, beside its detect function, with its
symptom, the metrics it needs, its named thresholds and their sources, the causes it
blames (a default ranking) and the clues that reorder them.

    @rule("kl_negative", "exploding_kl", requires=("kl/mean",), thresholds=(KL_NEGATIVE_LIMIT,),
          causes=(causes.logprob_bookkeeping, causes.kl_control))
    def kl_negative(table: MetricTable) -> Detection | None: ...

Tests, the docs' rule table (`rlhflab doctor --rules-doc`) and `ppo.stop_on` iterate
the registry, so a rule cannot be half-added.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

from rlhflab.doctor.causes import CauseMaker, Clue
from rlhflab.doctor.findings import Evidence, Severity, Symptom
from rlhflab.doctor.signals import baseline, first_where, smooth, window
from rlhflab.doctor.table import MetricTable, Series


@dataclass(frozen=True)
class Threshold:
    """A named number a rule compares against, and where it comes from: a paper, or the
    labelled runs it was fitted on with its margin."""

    name: str
    value: float
    source: str


@dataclass(frozen=True)
class Detection:
    title: str
    severity: Severity
    onset_step: int
    evidence: tuple[Evidence, ...]


@dataclass(frozen=True)
class Rule:
    name: str
    symptom: Symptom
    requires: tuple[str, ...]
    detect: Callable[[MetricTable], Detection | None]
    thresholds: tuple[Threshold, ...]
    causes: tuple[CauseMaker, ...]  # the default ranking, most common cause first
    clues: tuple[Clue, ...]
    relative: tuple[str, ...]  # metrics it only compares with their own start: any unit will do
    order: tuple[int, int]  # (family, position in its module): the registry's order

    @property
    def description(self) -> str:
        return (self.detect.__doc__ or "").strip()

    @property
    def family(self) -> str:
        return self.detect.__module__.rsplit(".", 1)[-1]


# Families in the order their rules are run and reported; one module each.
FAMILIES = ("kl", "collapse", "hacking", "responses", "update", "impossible", "reward_model", "identities", "mismatch")
_REGISTERED: dict[str, Rule] = {}


def rule(name: str, symptom: Symptom, requires: tuple[str, ...] = (), thresholds: tuple[Threshold, ...] = (),
         causes: tuple[CauseMaker, ...] = (), clues: tuple[Clue, ...] = (), relative: tuple[str, ...] = ()):
    """Register the decorated detect function as the rule `name`."""

    def register(detect: Callable[[MetricTable], Detection | None]):
        if name in _REGISTERED:
            raise ValueError(f"rule {name!r} registered twice")
        family = detect.__module__.rsplit(".", 1)[-1]
        if family not in FAMILIES:
            raise ValueError(f"rule {name!r}: module {detect.__module__} is not a rule family {FAMILIES}")
        position = sum(r.family == family for r in _REGISTERED.values())
        _REGISTERED[name] = Rule(name, symptom, requires, detect, thresholds, causes, clues, relative,
                                 (FAMILIES.index(family), position))
        return detect

    return register


def registered() -> tuple[Rule, ...]:
    return tuple(sorted(_REGISTERED.values(), key=lambda r: r.order))


# --- helpers the rules share -------------------------------------------------------------
def evidence(metric: str, series: Series, index: int, threshold: str, source: str, **extra: float) -> Evidence:
    observed = {"start": series.values[0], "at_onset": series.values[index], "end": series.values[-1]}
    return Evidence(metric, series.steps[index], observed | extra, threshold, source)


def persistence(n: int) -> int:
    """Points in a row a condition must hold: half a smoothing window, at least 2."""
    return max(2, window(n) // 2 + 1)


def crossing(table: MetricTable, metric: str, predicate: Callable[[float], bool], title: Callable[[Series], str],
             threshold: str, source: str, severity: Severity = "medium", any_unit: bool = False) -> Detection | None:
    """The common rule shape: the smoothed series satisfies `predicate` persistently."""
    series = table.get(metric, any_unit)
    onset = first_where(smooth(series.values, window(len(series))), predicate, persistence(len(series)))
    if onset is None:
        return None
    return Detection(title(series), severity, series.steps[onset], (evidence(metric, series, onset, threshold,
                                                                             source),))


def mean(table: MetricTable, metric: str) -> float | None:
    s = table.get(metric)
    return sum(s.values) / len(s) if s is not None else None


GOLD_HELD = Threshold(
    "GOLD_HELD", 0.1,
    "of the held-out score's range: a score that ends within it of its best, above its start, is still rising; "
    "veRL PPO on GSM8K (entropy 0.44 -> 0.06 and length 235 -> 150 tokens while the test score rose 0.00 -> 0.54) "
    "is the labelled healthy run")


def gold_still_rising(table: MetricTable) -> bool:
    """Whether the run's gold or held-out score ends near its best and above its start: a
    drift in entropy or length beside it is the policy learning the task, not a failure."""
    gold = table.get("reward/gold_mean")
    if gold is None or len(gold) < 3:
        return False
    w = window(len(gold))
    s = smooth(gold.values, w)
    span = max(gold.values) - min(gold.values)
    return s[-1] >= max(s) - GOLD_HELD.value * span and s[-1] > baseline(gold.values, w)


def unless_gold_rises(table: MetricTable, found: Detection | None, why: str) -> Detection | None:
    """`found`, or the same at low severity (a note) while the held-out score rises."""
    if found is None or not gold_still_rising(table):
        return found
    title = found.title.split(": ", 1)[-1]
    return replace(found, severity="low", title=f"{title} while the held-out score rose ({why})")
