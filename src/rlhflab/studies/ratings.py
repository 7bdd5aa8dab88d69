"""A rating study's answers as they are written: a point of the design's scale, or
"unreadable/broken" (kept as NULL); a judge's rating may fall between points, and a judge
may give a raw score of its own instead."""

from __future__ import annotations

from rlhflab.studies.design import UNREADABLE, StudyDesign
from rlhflab.studies.store import Outcome, Rater, Study


def parse_rating(value: object, design: StudyDesign) -> tuple[bool, int | None]:
    """(valid, rating) from the page's form or the API: a point of the scale, or `UNREADABLE` (None)."""
    if value == UNREADABLE:
        return True, None
    try:
        rating = int(str(value))
    except ValueError:
        return False, None
    return rating in design.scale, rating


def on_scale(design: StudyDesign, rater: Rater, rating: float) -> bool:
    if rater.kind == "judge":
        return design.scale_min <= rating <= design.scale_max
    return rating in design.scale


def record_rating(study: Study, rater: Rater, serve_id: int, nonce: str, rating: float | None,
                  score: float | None = None) -> Outcome:
    """Store `rater`'s rating of the item served as `serve_id` (None: unreadable)."""
    if rating is not None and not on_scale(study.design, rater, rating):
        return "invalid"
    return study.answer(rater, serve_id, nonce, lambda item: {"rating": rating, "score": score})


def record_answer(study: Study, rater: Rater, serve_id: int, nonce: str, answer: object) -> Outcome:
    """A rating as the page or the API sends it (`parse_rating`)."""
    valid, rating = parse_rating(answer, study.design)
    return record_rating(study, rater, serve_id, nonce, rating) if valid else "invalid"


def record_imported(study: Study, rater: Rater, item_key: str, rating: float | None) -> Outcome:
    """A rating given in an annotation tool to the item named `item_key`."""
    if rating is not None and not on_scale(study.design, rater, rating):
        return "invalid"
    return study.answer_imported(rater, item_key, {"rating": rating})
