"""A study's design: its rating scale, how many items it draws, and the draw itself.

The draw is stratified by training step: a system's distinct steps are split into
`bins` runs of consecutive steps holding about as many steps each, and `per_bin`
distinct samples (distinct prompt + response) are drawn from each bin without
replacement, so every stretch of training is rated, early and late alike.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Sequence

import tomllib

from rlhflab.doctor import Sample
from rlhflab.errors import InputError
from rlhflab.seeding import derive_seed

UNREADABLE = "unreadable"
"""The answer outside the scale: the response is unreadable or broken (left out of means)."""


class StudyError(InputError):
    """A study that cannot be built, opened or served: the message says what was expected."""


@dataclass(frozen=True)
class StudyDesign:
    """What a study asks and of how many items; written out to `DIR/study.toml` with the
    fields its kind reads (`StudyKind.design_toml`)."""

    kind: str = field(default="rating", metadata={"doc": "what the study asks (studies/kinds)"})
    scale_min: int = field(default=1, metadata={"doc": "the lowest rating (the worst response)"})
    scale_max: int = field(default=7, metadata={"doc": "the highest rating (the best response)"})
    bins: int = field(default=10, metadata={"doc": "step bins per system: runs of consecutive steps, as many steps each"})
    per_bin: int = field(default=8, metadata={"doc": "distinct samples drawn from each bin"})
    prompts_drawn: int = field(default=0, metadata={
        "doc": "prompts drawn, each with every pair of systems (0: every prompt all systems answered)"})
    ratings_per_item: int = field(default=2, metadata={"doc": "raters who rate each item at least"})
    repeat_every: int = field(default=10, metadata={
        "doc": "after this many new items a rater sees one rated before, for consistency (0: never)"})
    seed: int = field(default=0, metadata={"doc": "seeds the draw of items and each rater's order"})
    instructions: str = field(default="How good is this response to its prompt?",
                              metadata={"doc": "the question shown above every item"})

    def __post_init__(self) -> None:
        problems = []
        if self.prompts_drawn < 0:
            problems.append(f"prompts_drawn = {self.prompts_drawn}: must be 0 (all) or more")
        if self.scale_max <= self.scale_min:
            problems.append(f"scale {self.scale_min}-{self.scale_max}: the top must be above the bottom")
        if self.scale_max - self.scale_min > 99:
            problems.append(f"scale {self.scale_min}-{self.scale_max}: at most 100 points")
        for name in ("bins", "per_bin", "ratings_per_item"):
            if getattr(self, name) < 1:
                problems.append(f"{name} = {getattr(self, name)}: must be at least 1")
        if self.repeat_every < 0:
            problems.append(f"repeat_every = {self.repeat_every}: must be 0 (never) or more")
        if problems:
            raise StudyError("; ".join(problems))

    @property
    def scale(self) -> range:
        return range(self.scale_min, self.scale_max + 1)

    @classmethod
    def from_toml(cls, path: Path) -> "StudyDesign":
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError) as err:
            raise StudyError(f"{path}: cannot read the study's design ({err})") from None
        design = data.get("design", {})
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(design) - known)
        if unknown:
            raise StudyError(f"{path}: unknown design keys {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        return cls(**design)


def toml_value(value) -> str:
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return str(value).lower() if isinstance(value, bool) else str(value)


def parse_scale(text: str) -> tuple[int, int]:
    """`"1-7"` -> (1, 7)."""
    low, sep, high = text.partition("-")
    try:
        if not sep:
            raise ValueError
        return int(low), int(high)
    except ValueError:
        raise StudyError(f"--scale {text!r}: expected LOW-HIGH, e.g. 1-7") from None


@dataclass(frozen=True)
class StepBin:
    index: int
    first_step: int
    last_step: int


@dataclass(frozen=True)
class DrawnItem:
    bin: int
    sample: Sample


def step_bins(steps: Sequence[int], bins: int) -> list[StepBin]:
    """Split the distinct steps into at most `bins` runs of consecutive steps, as equal in
    number of steps as they can be (fewer bins when there are fewer steps)."""
    distinct = sorted(set(steps))
    count = min(bins, len(distinct))
    out = []
    for index in range(count):
        lo, hi = index * len(distinct) // count, (index + 1) * len(distinct) // count
        out.append(StepBin(index, distinct[lo], distinct[hi - 1]))
    return out


def draw_items(samples: Sequence[Sample], design: StudyDesign, system: str) -> tuple[list[StepBin], list[DrawnItem]]:
    """The stratified draw (module docstring): each bin's distinct samples, `per_bin` of
    them at random (all of them where a bin holds fewer), seeded by the design's seed and
    the system's name."""
    if not samples:
        raise StudyError(f"{system}: no samples to rate")
    bins = step_bins([s.step for s in samples], design.bins)
    rng = random.Random(derive_seed(design.seed, "study/draw", system))
    drawn: list[DrawnItem] = []
    for step_bin in bins:
        seen: dict[tuple[str, str], Sample] = {}
        for sample in samples:
            if step_bin.first_step <= sample.step <= step_bin.last_step:
                seen.setdefault((sample.prompt, sample.response), sample)
        pool = list(seen.values())
        chosen = rng.sample(pool, min(design.per_bin, len(pool)))
        drawn.extend(DrawnItem(step_bin.index, s) for s in sorted(chosen, key=lambda s: s.step))
    return bins, drawn


def design_dict(design: StudyDesign) -> dict:
    return asdict(design)
