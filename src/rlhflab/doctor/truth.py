"""A truth measured by people: a rating study's mean rating per step bin, each point with
its interval, read in place of a logged gold (`rlhflab doctor LOG --truth STUDY`).

The doctor stays pure: the study is read at the edge (`rlhflab.studies.truth`) and handed
here as plain numbers. The gold rules read such a sparse series point by point: a point
counts as below another only when the gap exceeds what their intervals allow
(`significantly_below`).
"""

from __future__ import annotations

from dataclasses import replace

from rlhflab.doctor.rated import RatedExample, RatedPoint, RatedTruth, significantly_below
from rlhflab.doctor.table import MetricTable

__all__ = ["GOLD", "RatedExample", "RatedPoint", "RatedTruth", "attach_truth", "significantly_below"]

GOLD = "reward/gold_mean"


def attach_truth(table: MetricTable, truth: RatedTruth) -> None:
    """Put the rated points in `table` as `reward/gold_mean`, replacing a logged gold (said)."""
    if table.series.get(GOLD) is not None:
        table.notes.append(f"{GOLD} logged by the run was replaced by the ratings of {truth.source}")
    table.series[GOLD] = truth.series()
    table.units.pop(GOLD, None)
    table.truth = truth
    table.settings = replace(table.settings, has_gold=True)
    table.notes.append(f"{GOLD} is the mean rating on {truth.scale[0]}-{truth.scale[1]} of {truth.source}, "
                       f"{len(truth.points)} step bins, each with its interval ({truth.method})")
    table.notes.extend(truth.notes)
