"""A pair study: which of two systems' responses to one prompt is better, blind and side by
side, every pair of systems on the same prompts; its answers are preferences, for results,
for stage 2 and as a comparison's truth."""

from __future__ import annotations

from rlhflab.studies.kind import StudyKind
from rlhflab.studies.pair_results import export_preferences, pair_results, preference_change
from rlhflab.studies.pair_store import ANSWERS, COLUMNS, record_choice, sides
from rlhflab.studies.store import Served

PAIR_QUESTION = "Which response is the better answer to the prompt?"


def _exporter(per_judgement: bool):
    def export(study, out, whose) -> list[str]:
        exported = export_preferences(study, out, per_judgement, whose)
        dropped = ", ".join(f"{n} {why}" for why, n in sorted(exported.dropped.items())) or "none"
        return [f"wrote {exported.written} preference records to {out} (dropped: {dropped}; {whose.describe()})"]

    return export


def _shown(served: Served) -> dict:
    left, right = sides(served)
    return {"left": left, "right": right}


PAIR = StudyKind(
    name="pair",
    command="pair",
    asks="pair (A or B)",
    design_fields=("prompts_drawn",),
    # Three raters an item: an odd number, so that most items have a majority.
    design_defaults={"instructions": PAIR_QUESTION, "ratings_per_item": 3},
    columns=COLUMNS,
    page="pair.html",
    answer_field="choice",
    answering=lambda design: {"choices": list(ANSWERS)},
    shown=_shown,
    record=record_choice,
    results=pair_results,
    exports={"preferences": _exporter(per_judgement=False), "preferences-per-judgement": _exporter(per_judgement=True)},
    truth_change=lambda study, before, after, before_tables, after_tables, whose: preference_change(
        study, before, after, whose),
    rated_truth=None,
)
