"""What a study's ratings say: per system and step bin, the mean rating with its interval;
how far raters agree; how consistent each rater is with themselves.

Unreadable answers are counted (their rate is reported) but left out of every mean and of
the agreement; repeats only measure consistency.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass, field

from rlhflab.seeding import derive_seed
from rlhflab.studies.stats import crossed_bootstrap, krippendorff_alpha, spearman_interval
from rlhflab.studies.store import RatingRow, Study
from rlhflab.studies.whose import PEOPLE, Whose

BOOTSTRAP_DRAWS = 2000


@dataclass(frozen=True)
class BinResult:
    system: str
    bin: int
    first_step: int
    last_step: int
    mean_step: float | None  # mean step of the rated items: where the point sits on a curve
    items: int  # items rated at least once (readably)
    n: int  # readable ratings in the mean
    mean: float | None
    low: float | None
    high: float | None
    unreadable_rate: float | None  # share of this bin's answers that were "unreadable/broken"


@dataclass(frozen=True)
class RaterResult:
    name: str
    kind: str
    rated: int  # new items answered
    unreadable: int
    repeats: int  # repeated items answered
    repeat_exact: float | None  # share of repeats given the same rating as the first time
    repeat_within_one: float | None  # share within one scale point
    repeat_mean_abs_diff: float | None


@dataclass(frozen=True)
class JudgeResult:
    """A judge against the people: Spearman's rho between its value for each item (its
    rating, else its raw score) and the item's mean rating by people."""

    name: str
    items: int  # items both the judge and at least one person rated
    spearman: float | None
    low: float | None
    high: float | None


@dataclass(frozen=True)
class StudyResults:
    scale: tuple[int, int]
    bins: list[BinResult]
    alpha: float | None  # ordinal Krippendorff's alpha among raters, on the study's scale
    alpha_ratings: int  # readable ratings of items rated by two or more raters
    raters: list[RaterResult]
    method: str
    notes: list[str] = field(default_factory=list)
    judges: list[JudgeResult] = field(default_factory=list)
    answers_of: str = PEOPLE.describe()

    def to_json(self) -> dict:
        return asdict(self)


def _or_none(x: float) -> float | None:
    return None if x != x else x  # NaN -> None, for JSON


def study_results(study: Study, whose: Whose = PEOPLE) -> StudyResults:
    """The summary of `study`'s ratings by the raters `whose` counts (module docstring)."""
    everyone = [r for r in study.raters() if whose.counts(r)]
    ids = {r.id for r in everyone}
    rows = [r for r in study.ratings() if r.rater_id in ids]
    fresh = [r for r in rows if not r.repeat]
    design = study.design
    by_bin: dict[tuple[str, int], list[RatingRow]] = defaultdict(list)
    for row in fresh:
        by_bin[(row.system, row.bin)].append(row)
    results, method = [], "no ratings yet"
    order = {s.name: i for i, s in enumerate(study.systems())}
    for (system, index), (first, last) in sorted(study.bins().items(), key=lambda kv: (order[kv[0][0]], kv[0][1])):
        answers = by_bin.get((system, index), [])
        readable = [r for r in answers if r.rating is not None]
        interval = crossed_bootstrap([r.item_id for r in readable], [r.rater_id for r in readable],
                                     [r.rating for r in readable], BOOTSTRAP_DRAWS, derive_seed(design.seed, system, str(index)))
        if readable:
            method = interval.method.split(" over ")[0] + " over the bin's items and raters, " + \
                f"{BOOTSTRAP_DRAWS} draws, 95% percentile interval (Owen 2007)"
        results.append(BinResult(
            system, index, first, last,
            sum(r.step for r in readable) / len(readable) if readable else None,
            len({r.item_id for r in readable}), len(readable),
            _or_none(interval.mean), _or_none(interval.low), _or_none(interval.high),
            (len(answers) - len(readable)) / len(answers) if answers else None))
    readable = [r for r in fresh if r.rating is not None]
    per_item = defaultdict(set)
    for r in readable:
        per_item[r.item_id].add(r.rater_id)
    paired = [r for r in readable if len(per_item[r.item_id]) >= 2]
    alpha = krippendorff_alpha([r.item_id for r in paired], [r.rating for r in paired], "ordinal",
                               design.scale) if paired else float("nan")
    notes = [] if paired else ["no item has ratings from two raters yet: agreement cannot be measured"]
    return StudyResults((design.scale_min, design.scale_max), results, _or_none(alpha), len(paired),
                        [_rater_result(r, rows) for r in everyone], method, notes,
                        judge_agreement(study) if whose.is_people else [], whose.describe())


def judge_agreement(study: Study) -> list[JudgeResult]:
    """Each judge's Spearman's rho with the people's mean rating per item, its interval from
    resampling the items (bootstrap, 2000 draws)."""
    raters = study.raters()
    people = {r.id for r in raters if PEOPLE.counts(r)}
    rows = study.ratings()
    by_item: dict[int, list[float]] = defaultdict(list)
    for r in rows:
        if r.rater_id in people and not r.repeat and r.rating is not None:
            by_item[r.item_id].append(r.rating)
    out = []
    for judge in (r for r in raters if r.kind == "judge"):
        said = {r.item_id: r.rating if r.rating is not None else r.score for r in rows if r.rater_id == judge.id}
        items = sorted(i for i, v in said.items() if v is not None and i in by_item)
        if len(items) < 3:
            out.append(JudgeResult(judge.name, len(items), None, None, None))
            continue
        rho = spearman_interval([said[i] for i in items], [sum(by_item[i]) / len(by_item[i]) for i in items],
                                BOOTSTRAP_DRAWS, derive_seed(study.design.seed, "judge", judge.name))
        out.append(JudgeResult(judge.name, len(items), _or_none(rho.mean), _or_none(rho.low), _or_none(rho.high)))
    return out


def _rater_result(rater, rows: list[RatingRow]) -> RaterResult:
    mine = [r for r in rows if r.rater_id == rater.id]
    first = {r.item_id: r.rating for r in mine if not r.repeat}
    pairs = [(first[r.item_id], r.rating) for r in mine if r.repeat and r.item_id in first]
    numeric = [(a, b) for a, b in pairs if a is not None and b is not None]
    return RaterResult(
        rater.name, rater.kind, len(first), sum(1 for v in first.values() if v is None), len(pairs),
        sum(a == b for a, b in pairs) / len(pairs) if pairs else None,
        sum(abs(a - b) <= 1 for a, b in numeric) / len(numeric) if numeric else None,
        sum(abs(a - b) for a, b in numeric) / len(numeric) if numeric else None)
