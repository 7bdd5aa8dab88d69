"""What a pair study's answers say, and the answers as stage-2 data.

Each item counts once, by the majority of its raters' answers (raters of one item are not
independent: three people reading the same two responses are one observation of the pair,
not three); an item whose answers have no single most common choice is "split". Per pair of
systems: the win rate of A over B on the items decided for either, with Wilson's interval;
ties and "both bad" as rates of all items. With more than two systems, Bradley-Terry
strengths with bootstrap intervals over the decided items (studies/pairwise.py). The side's
pull: the share of decisive answers that chose the response shown on the left. Each rater:
how often their answer is the majority of the item's other raters, and their repeats.
Repeats only measure consistency; judges are never pooled with people.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path

from rlhflab.doctor import TruthChange
from rlhflab.seeding import derive_seed
from rlhflab.studies.design import StudyError
from rlhflab.studies.pair_store import Judgement, judgements, pair_items
from rlhflab.studies.pairwise import bootstrap_strengths, wilson_interval, win_rate
from rlhflab.studies.store import Study
from rlhflab.studies.whose import PEOPLE, Whose

BOOTSTRAP_DRAWS = 1000


def majority(choices: list[str]) -> str | None:
    """The single most common choice, or None (split) when two tie for most."""
    if not choices:
        return None
    ranked = Counter(choices).most_common()
    return ranked[0][0] if len(ranked) == 1 or ranked[0][1] > ranked[1][1] else None


@dataclass(frozen=True)
class PairOutcome:
    a: str
    b: str
    items: int
    wins: int  # items A won by majority
    losses: int
    ties: int
    both_bad: int
    split: int  # judged, with no majority
    unjudged: int
    rate: float | None  # A's win rate: wins / (wins + losses)
    low: float | None
    high: float | None
    tie_rate: float | None  # of the judged items
    both_bad_rate: float | None
    no_preference: bool


@dataclass(frozen=True)
class Strength:
    system: str
    strength: float  # log-strength, centred to mean 0: P(i beats j) = 1 / (1 + exp(s_j - s_i))
    low: float
    high: float


@dataclass(frozen=True)
class SideBias:
    left: int  # decisive answers that chose the left response
    decisive: int
    rate: float | None
    low: float | None
    high: float | None


@dataclass(frozen=True)
class RaterAgreement:
    name: str
    kind: str
    answered: int  # new items
    with_others: int  # of them, items whose other raters have a majority
    agreement: float | None  # share of those where this rater's answer is that majority
    repeats: int
    repeat_same: float | None  # share of repeats answered as the first time


@dataclass(frozen=True)
class JudgeAgreement:
    """A judge against the people: on the items people decided by majority, the share where
    the judge's answer is theirs, with Wilson's interval."""

    name: str
    items: int
    agreement: float | None
    low: float | None
    high: float | None


@dataclass
class PairResults:
    systems: list[str]
    pairs: list[PairOutcome]
    strengths: list[Strength]
    strengths_method: str
    side: SideBias
    raters: list[RaterAgreement]
    method: str
    notes: list[str] = field(default_factory=list)
    judges: list[JudgeAgreement] = field(default_factory=list)
    answers_of: str = PEOPLE.describe()

    def to_json(self) -> dict:
        return asdict(self)


def judge_agreement(study: Study) -> list[JudgeAgreement]:
    by_item, _, _ = _fresh_by_item(study, PEOPLE)
    people = {item: majority([j.choice for j in answers]) for item, answers in by_item.items()}
    out = []
    for judge in study.raters("judge"):
        said = {j.item_id: j.choice for j in judgements(study) if j.rater_id == judge.id and not j.repeat}
        shared = [i for i, choice in people.items() if choice is not None and i in said]
        agree = sum(said[i] == people[i] for i in shared)
        low, high = wilson_interval(agree, len(shared)) if shared else (None, None)
        out.append(JudgeAgreement(judge.name, len(shared), agree / len(shared) if shared else None, low, high))
    return out


def _fresh_by_item(study: Study, whose: Whose) -> tuple[dict[int, list[Judgement]], list[Judgement], dict]:
    raters = {r.id: r for r in study.raters() if whose.counts(r)}
    answers = [j for j in judgements(study) if j.rater_id in raters]
    by_item: dict[int, list[Judgement]] = defaultdict(list)
    for j in answers:
        if not j.repeat:
            by_item[j.item_id].append(j)
    return by_item, answers, raters


def pair_results(study: Study, whose: Whose = PEOPLE) -> PairResults:
    """The summary of a pair study by the raters `whose` counts (module docstring)."""
    by_item, answers, raters = _fresh_by_item(study, whose)
    systems = [s.name for s in study.systems()]
    items = pair_items(study)
    counts: dict[tuple[str, str], Counter] = defaultdict(Counter)
    decided: list[tuple[int, int]] = []  # (winner, loser) system indices, one per decided item
    for item in items:
        pair = (item["system"], item["system_b"])
        said = majority([j.choice for j in by_item.get(item["id"], [])])
        outcome = "unjudged" if item["id"] not in by_item else said or "split"
        counts[pair][outcome] += 1
        if outcome in ("a", "b"):
            winner, loser = pair if outcome == "a" else pair[::-1]
            decided.append((systems.index(winner), systems.index(loser)))
    pairs = []
    for (a, b), c in counts.items():
        judged = c["a"] + c["b"] + c["tie"] + c["both_bad"] + c["split"]
        rate = win_rate(c["a"], c["b"], c["tie"], c["both_bad"])
        pairs.append(PairOutcome(a, b, sum(c.values()), c["a"], c["b"], c["tie"], c["both_bad"], c["split"],
                                 c["unjudged"], rate.rate, rate.low, rate.high,
                                 c["tie"] / judged if judged else None, c["both_bad"] / judged if judged else None,
                                 rate.no_preference))
    strengths, strengths_method, notes = [], "", []
    if len(systems) > 2:
        try:
            fit, low, high, used = bootstrap_strengths(decided, len(systems), BOOTSTRAP_DRAWS,
                                                       derive_seed(study.design.seed, "pairs/bootstrap"))
            strengths = [Strength(name, float(fit[i]), float(low[i]), float(high[i])) for i, name in enumerate(systems)]
            strengths_method = (f"Bradley-Terry maximum likelihood over {len(decided)} items decided by majority; "
                                f"95% percentile intervals from {used} bootstrap resamples of those items "
                                "(Chiang et al. 2024, Chatbot Arena)")
        except ValueError as err:
            notes.append(f"no Bradley-Terry strengths yet: {err}")
    fresh = [j for j in answers if not j.repeat]
    decisive = [j for j in fresh if j.choice in ("a", "b")]
    left = sum(j.choice == j.left_side for j in decisive)
    low, high = wilson_interval(left, len(decisive)) if decisive else (None, None)
    side = SideBias(left, len(decisive), left / len(decisive) if decisive else None, low, high)
    agreement = [_agreement(rater, answers, by_item) for rater in raters.values()]
    method = ("one majority vote per item; win rate = wins / (wins + losses) with Wilson's 95% interval; ties and "
              "both-bad as shares of the judged items")
    if not fresh:
        notes.append("no answers yet")
    return PairResults(systems, pairs, strengths, strengths_method, side, agreement, method, notes,
                       judge_agreement(study) if whose.is_people else [], whose.describe())


def _agreement(rater, answers: list[Judgement], by_item: dict[int, list[Judgement]]) -> RaterAgreement:
    mine = [j for j in answers if j.rater_id == rater.id]
    first = {j.item_id: j.choice for j in mine if not j.repeat}
    with_others = agree = 0
    for item_id, choice in first.items():
        others = majority([j.choice for j in by_item[item_id] if j.rater_id != rater.id])
        if others is not None:
            with_others += 1
            agree += choice == others
    repeats = [(first[j.item_id], j.choice) for j in mine if j.repeat and j.item_id in first]
    return RaterAgreement(rater.name, rater.kind, len(first), with_others, agree / with_others if with_others else None,
                          len(repeats), sum(a == b for a, b in repeats) / len(repeats) if repeats else None)


@dataclass
class Exported:
    written: int
    dropped: Counter


def export_preferences(study: Study, out: Path, per_judgement: bool = False,
                       whose: Whose = PEOPLE) -> Exported:
    """`prompt`/`chosen`/`rejected` records, the form `rlhflab reward --preferences` reads:
    one per item by its majority (split items, ties and "both bad" dropped and counted, as are
    pairs stage 2 cannot read: an empty or two identical responses), or with `per_judgement`
    one per decisive answer. Answers of the raters `whose` counts."""
    by_item, _, _ = _fresh_by_item(study, whose)
    dropped: Counter = Counter()
    records = []
    for item in pair_items(study):
        answers = by_item.get(item["id"], [])
        if not answers:
            dropped["unjudged"] += 1
            continue
        choices = [j.choice for j in answers] if per_judgement else [majority([j.choice for j in answers]) or "split"]
        for choice in choices:
            if choice not in ("a", "b"):
                dropped[choice] += 1
                continue
            if not item["response"].strip() or not item["response_b"].strip():  # stage 2 reads no empty text
                dropped["empty response"] += 1
                continue
            if item["response"].strip() == item["response_b"].strip():  # no preference to learn from
                dropped["identical responses"] += 1
                continue
            chosen, rejected = (item["response"], item["response_b"]) if choice == "a" else \
                (item["response_b"], item["response"])
            records.append({"prompt": item["prompt"], "chosen": chosen, "rejected": rejected})
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", encoding="utf-8") as handle:
        for record in records:
            handle.write(json.dumps(record, ensure_ascii=False) + "\n")
    return Exported(len(records), dropped)


PREFERENCE = "preference"
"""The truth's metric when it is a comparison study's: the after side's win rate over before."""


def preference_change(study: Study, before: list[str], after: list[str],
                      whose: Whose = PEOPLE) -> TruthChange:
    """The truth's change from a comparison study: over the items pairing a system of `before`
    with one of `after`, one majority vote each, the after side's win rate (wins / (wins +
    losses)) with Wilson's interval; "change" is its distance from 1/2 (no preference), and it
    is significant when the interval leaves out 1/2. Answers of the raters `whose` counts."""
    by_item, _, _ = _fresh_by_item(study, whose)
    wins = losses = ties = judged = 0
    for item in pair_items(study):
        sides = {item["system"]: "a", item["system_b"]: "b"}
        befores, afters = [s for s in sides if s in before], [s for s in sides if s in after]
        if not (befores and afters) or item["id"] not in by_item:
            continue
        judged += 1
        said = majority([j.choice for j in by_item[item["id"]]])
        if said == sides[afters[0]]:
            wins += 1
        elif said == sides[befores[0]]:
            losses += 1
        else:
            ties += 1
    if not wins + losses:
        raise StudyError(f"{study.directory}: no comparison of {', '.join(before)} with {', '.join(after)} was decided "
                         f"yet by {whose.spec} ({judged} judged): answer more before comparing, or count other "
                         "answers (--answers people, judges, judge:NAME or all)")
    rate = win_rate(wins, losses)
    method = (f"after preferred in {rate.rate:.0%} [{rate.low:.0%}, {rate.high:.0%}] of {wins + losses} decided "
              f"comparisons; {ties} tied, split or both bad of {judged} judged in {study.directory}; one majority "
              f"vote per item, Wilson 95%; {whose.describe()}")
    return TruthChange(PREFERENCE, f"after's win rate over before in {study.directory}", None, 0.5, rate.rate,
                       rate.rate - 0.5, rate.low - 0.5, rate.high - 0.5, not rate.no_preference, method)
