"""A rating study's points as the doctor holds them: each step bin's mean rating with its
interval (doctor/truth.py reads them in place of a logged gold), and the test of one point
below another."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from rlhflab.doctor.series import Series


@dataclass(frozen=True)
class RatedExample:
    prompt: str
    response: str
    rating: float  # the item's mean rating
    step: int


@dataclass(frozen=True)
class RatedPoint:
    """One step bin of a study: its mean rating and 95% interval, where on the run it sits."""

    step: int  # the (rounded) mean step of the bin's rated items: where the point sits on a curve
    first_step: int
    last_step: int
    mean: float
    low: float
    high: float
    n: int  # readable ratings in the mean
    examples: tuple[RatedExample, ...] = ()  # the bin's rated items, best and worst first


@dataclass(frozen=True)
class RatedTruth:
    """The run's truth from a rating study (module docstring)."""

    source: str  # STUDY:SYSTEM
    scale: tuple[int, int]
    points: tuple[RatedPoint, ...]
    method: str
    notes: tuple[str, ...] = field(default_factory=tuple)

    def series(self) -> Series:
        return Series(tuple(p.step for p in self.points), tuple(p.mean for p in self.points))

    def point_at(self, step: int) -> RatedPoint | None:
        """The point whose bin holds `step` (or the nearest one)."""
        if not self.points:
            return None
        inside = [p for p in self.points if p.first_step <= step <= p.last_step]
        return inside[0] if inside else min(self.points, key=lambda p: abs(p.step - step))


def significantly_below(high_point: RatedPoint, low_point: RatedPoint) -> bool:
    """Whether `low_point` lies significantly below `high_point`: the gap between the means
    exceeds the root sum of squares of the two half-widths that face each
    other (the 95% test of a difference between two independent normal estimates, read off
    their marginal intervals; raters shared by both bins make it conservative)."""
    gap = high_point.mean - low_point.mean
    half = math.hypot(high_point.mean - high_point.low, low_point.high - low_point.mean)
    return gap > half
