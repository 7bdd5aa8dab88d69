"""A rating study: a point of a scale (or "unreadable/broken") for each response, drawn
across each system's training steps, so that ratings become a curve the doctor reads as
the run's truth."""

from __future__ import annotations

from rlhflab.studies.design import UNREADABLE, StudyDesign
from rlhflab.studies.interchange import TOOLS, export_items
from rlhflab.studies.kind import StudyKind
from rlhflab.studies.ratings import record_answer
from rlhflab.studies.results import study_results
from rlhflab.studies.store import Served
from rlhflab.studies.truth import rated_truth, rated_truth_change


def _answering(design: StudyDesign) -> dict:
    return {"scale": [design.scale_min, design.scale_max], "unreadable": UNREADABLE}


def _shown(served: Served) -> dict:
    return {"response": served.response}


def _exporter(tool):
    return lambda study, out, whose: [f"wrote {path}" for path in export_items(study, tool, out)]  # items, no answers


RATING = StudyKind(
    name="rating",
    command="rate",
    asks="rating (a score per response)",
    design_fields=("scale_min", "scale_max", "bins", "per_bin"),
    design_defaults={},
    columns=(),
    page="rate.html",
    answer_field="rating",
    answering=_answering,
    shown=_shown,
    record=record_answer,
    results=study_results,
    exports={tool: _exporter(tool) for tool in TOOLS},
    truth_change=rated_truth_change,
    rated_truth=rated_truth,
)
