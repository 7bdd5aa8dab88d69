"""A metrics table: named series of (step, value), the doctor's only input.

Readers (`readers.py`) turn run directories and other trainers' logs into this table
under the canonical metric names of DESIGN.md; rules never see a file format.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Series:
    """One metric over training: parallel tuples of steps and finite values, sorted by step."""

    steps: tuple[int, ...]
    values: tuple[float, ...]

    def __len__(self) -> int:
        return len(self.values)

    @staticmethod
    def from_pairs(pairs: list[tuple[int, float]]) -> "Series":
        """Sorted by step; non-finite values are dropped (they are counted separately)."""
        clean = sorted((int(s), float(v)) for s, v in pairs if v is not None and math.isfinite(float(v)))
        return Series(tuple(s for s, _ in clean), tuple(v for _, v in clean))


@dataclass
class MetricTable:
    """Canonical-name -> Series, plus what a reader could not map and non-finite counts."""

    series: dict[str, Series] = field(default_factory=dict)
    source: str = ""
    unknown: list[str] = field(default_factory=list)  # names in the log we could not map
    non_finite: dict[str, list[int]] = field(default_factory=dict)  # metric -> steps with NaN/Inf
    meta: dict = field(default_factory=dict)  # e.g. the run's config, the RM's score range

    def get(self, name: str) -> Series | None:
        s = self.series.get(name)
        return s if s is not None and len(s) else None

    @staticmethod
    def from_records(records: list[dict], source: str = "", rename: dict[str, str] | None = None,
                     step_key: str = "step") -> "MetricTable":
        """Build from `[{step: s, name: value, ...}, ...]`, renaming keys with `rename` first."""
        rename = rename or {}
        pairs: dict[str, list[tuple[int, float]]] = {}
        non_finite: dict[str, list[int]] = {}
        for index, record in enumerate(records):
            step = record.get(step_key, index)
            for key, value in record.items():
                if key == step_key:
                    continue
                name = rename.get(key, key)
                if isinstance(value, bool) or not isinstance(value, (int, float)) and value is not None:
                    continue
                if value is None or not math.isfinite(float(value)):
                    non_finite.setdefault(name, []).append(int(step))
                    continue
                pairs.setdefault(name, []).append((int(step), float(value)))
        table = MetricTable({k: Series.from_pairs(v) for k, v in pairs.items()}, source)
        table.non_finite = non_finite
        return table

    def merge(self, other: "MetricTable") -> "MetricTable":
        merged = MetricTable({**self.series, **other.series}, self.source or other.source,
                             self.unknown + other.unknown, {**self.non_finite, **other.non_finite},
                             {**self.meta, **other.meta})
        return merged
