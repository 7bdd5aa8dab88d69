"""A metrics table: named series of (step, value), each in a known unit; with the run's
settings, the doctor's only input.

Formats (`formats/`) turn run directories and other trainers' logs into this table
under the canonical metric names of DESIGN.md; rules never see a file format.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from rlhflab.doctor.metrics import canonical_unit
from rlhflab.doctor.series import Series, aligned
from rlhflab.doctor.settings import RunSettings
from rlhflab.doctor.units import Unit

if TYPE_CHECKING:
    from rlhflab.doctor.rated import RatedTruth

__all__ = ["MetricTable", "Series", "aligned"]  # Series and aligned live in series.py; named here too


@dataclass
class MetricTable:
    """Canonical-name -> Series, the unit of each, what a format could not map, non-finite
    counts, notes on unit conversions, and the run's settings."""

    series: dict[str, Series] = field(default_factory=dict)
    source: str = ""
    unknown: list[str] = field(default_factory=list)  # names in the log we could not map
    non_finite: dict[str, list[int]] = field(default_factory=dict)  # metric -> steps with NaN/Inf
    units: dict[str, Unit] = field(default_factory=dict)  # metric -> its unit, where not the canonical one
    notes: list[str] = field(default_factory=list)  # what the table converted, or could not
    settings: RunSettings = field(default_factory=RunSettings)
    evaluation: list[str] = field(default_factory=list)  # `eval/...` series: evaluation rows, kept apart
    estimators: dict[str, str] = field(default_factory=dict)  # KL metric -> its estimator (k1, k2, k3)
    derived: dict[str, str] = field(default_factory=dict)  # metric -> the logged twin it was derived from
    format: str = ""  # the container that was read
    vocabulary: dict[str, str] = field(default_factory=dict)  # RunSettings field -> the trainer's key
    verifiable: bool = False  # `rlhflab verify` can rerun the run
    steps_read: int = 0  # distinct steps at which an understood training metric was logged
    guesses: list[dict] = field(default_factory=list)  # names read by spelling: name, taken_for, why
    samples: list = field(default_factory=list)  # the SampleSets read beside the log (doctor/samples.py)
    truth: RatedTruth | None = None  # reward/gold_mean measured by a rating study, with its intervals (doctor/truth.py)
    repeated_steps: int = 0  # steps the log holds more than once (their last values kept)
    one_line_per_step: bool = False  # the trainer's writer logs each step once, across resumes too

    def get(self, name: str, any_unit: bool = False) -> Series | None:
        """The series of `name` in its canonical unit; one the table could not convert is
        returned only with `any_unit` (for rules that compare a series with itself)."""
        s = self.series.get(name)
        if s is None or not len(s) or (name in self.units and not any_unit):
            return None
        return s

    def unit(self, name: str) -> Unit | None:
        """The unit `name` is in: as logged when it could not be converted, else canonical."""
        return self.units.get(name, canonical_unit(name))

    @staticmethod
    def from_records(records: list[dict], source: str = "", rename: dict[str, str] | None = None,
                     step_key: str = "step", names: set[str] | None = None,
                     scales: dict[str, float] | None = None) -> "MetricTable":
        """Build from `[{step: s, name: value, ...}, ...]`: the columns `names` (default:
        every key), each renamed with `rename` and multiplied by its factor in `scales`. A
        record without a step takes its index. Column by column, with exact type checks and
        no sort when steps arrive in order: a million values in well under a second."""
        rename, scales = rename or {}, scales or {}
        if names is None:
            names = {key for record in records for key in record}
        missing = object()
        numbers = (int, float)  # bool, str, None and the rest are not values
        steps_all = [int(record.get(step_key, index)) for index, record in enumerate(records)]
        in_order = steps_all == sorted(steps_all)
        shared_steps = tuple(steps_all)  # one tuple for every column logged at every row
        table = MetricTable(source=source)
        read_at: set[int] = set()
        every_row = False
        for key in sorted(names - {step_key}):
            name, scale = rename.get(key, key), scales.get(key, 1.0)
            column = [r.get(key, missing) for r in records]
            types = set(map(type, column))
            if types <= {float, int} and math.isfinite(sum(column)):
                # every row, every value finite: the usual log
                steps, values = steps_all, column if types == {float} else list(map(float, column))
            else:
                pairs = [(step, value) for step, value in zip(steps_all, column) if value is not missing]
                bad = [step for step, value in pairs if value is None or type(value) is float and value - value != 0]
                if bad:
                    table.non_finite.setdefault(name, []).extend(bad)
                good = [(step, value) for step, value in pairs if type(value) in numbers and value - value == 0]
                steps, values = [step for step, _ in good], [float(value) for _, value in good]
            if scale != 1.0:
                values = [value * scale for value in values]
            if values:
                table.series[name] = (Series(shared_steps, tuple(values)) if steps is steps_all and in_order
                                      else Series.from_lists(steps, values))
                if steps is not steps_all:
                    read_at.update(steps)
                elif not every_row:
                    every_row = True
                    read_at.update(steps_all)
        table.steps_read = len(read_at)
        return table
