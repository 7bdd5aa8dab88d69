"""A pair study's own columns, and its answers as they are written and read back.

Its items hold two systems' responses to one prompt (`system_id`'s as A, `system_b_id`'s as
B) and the side A is shown on, drawn per item and kept (`left_side`); an answer is a
`choice` of "a", "b", "tie" or "both_bad", stored by system, never by side, so the side's
effect can be measured.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from rlhflab.studies.store import Outcome, Rater, Served, Study, System

COLUMNS = (
    "items.system_b_id INTEGER REFERENCES systems(id)",  # the second system (B)
    "items.response_b TEXT",  # B's response to the same prompt
    "items.left_side TEXT",  # 'a' or 'b': whose response the page shows on the left
    "ratings.choice TEXT",  # a, b, tie or both_bad (by system, not side)
)
SIDES = ("left", "right")
ANSWERS = (*SIDES, "tie", "both_bad")
"""The answers as the page and the API take them (stored by system: a, b, tie, both_bad)."""


@dataclass(frozen=True)
class PairItem:
    """An item as it is drawn: two systems' responses to one prompt."""

    system_a: str
    system_b: str
    prompt: str
    response_a: str
    response_b: str
    left_side: str  # "a" or "b"


@dataclass(frozen=True)
class Judgement:
    """One answer with what results need (read back for analysis only)."""

    rater_id: int
    item_id: int
    system_a: str
    system_b: str
    choice: str  # a, b, tie, both_bad
    left_side: str
    repeat: bool


def add_pairs(study: Study, systems: Sequence[tuple[str, str, str]], pairs: Sequence[PairItem]) -> list[System]:
    """The systems ((name, source, format) each) and the items, in one transaction."""
    def rows(ids: Mapping[str, int]) -> list[dict]:
        return [dict(system_id=ids[p.system_a], bin=0, step=0, prompt=p.prompt, response=p.response_a,
                     system_b_id=ids[p.system_b], response_b=p.response_b, left_side=p.left_side) for p in pairs]

    return study.add_systems(systems, rows)


def sides(served: Served) -> tuple[str, str]:
    """(left, right): the texts of a served item in the order the page shows them."""
    a, b = served.response, str(served.item.get("response_b") or "")
    return (a, b) if served.item.get("left_side") == "a" else (b, a)


def record_choice(study: Study, rater: Rater, serve_id: int, nonce: str, answer: object) -> Outcome:
    """`rater`'s answer to a pair: "left" or "right" (the side they preferred, kept as the
    system shown there), "tie" or "both_bad"; anything else is "invalid"."""
    if answer not in ANSWERS:
        return "invalid"

    def choice(item: Mapping[str, object]) -> dict:
        left_side = item["left_side"]
        if answer in SIDES:
            right_side = "b" if left_side == "a" else "a"
            return {"choice": left_side if answer == "left" else right_side}
        return {"choice": answer}

    return study.answer(rater, serve_id, nonce, choice)


def judgements(study: Study) -> list[Judgement]:
    """Every answer, with its item's systems and sides."""
    rows = study.rows(
        "SELECT r.rater_id, r.item_id, a.name AS system_a, b.name AS system_b, r.choice, i.left_side, r.repeat "
        "FROM ratings r JOIN items i ON i.id = r.item_id JOIN systems a ON a.id = i.system_id "
        "JOIN systems b ON b.id = i.system_b_id WHERE r.choice IS NOT NULL ORDER BY r.id")
    return [Judgement(**{**row, "repeat": bool(row["repeat"])}) for row in rows]


def pair_items(study: Study) -> list[dict]:
    """Every item with both systems' names (`system`, `system_b`)."""
    names = {s.id: s.name for s in study.systems()}
    return [{**item, "system_b": names.get(item["system_b_id"])} for item in study.items()]
