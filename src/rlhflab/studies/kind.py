"""What a kind of study declares, in one place: what it asks, its design, its store columns,
its page, how an answer is read and kept, its results and its exports.

Each kind is one module of `studies/kinds/` holding one `StudyKind`; the registry
(`studies/kinds/__init__.py`) lists them, and everything that depends on a study's kind
asks the registry for the study's `StudyKind` instead of comparing names.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from rlhflab.studies.design import StudyDesign, toml_value

if TYPE_CHECKING:
    from rlhflab.doctor import MetricTable, RatedTruth, TruthChange
    from rlhflab.studies.store import Outcome, Rater, Served, Study
    from rlhflab.studies.whose import Whose

COMMON_FIELDS = ("kind", "ratings_per_item", "repeat_every", "seed", "instructions")
"""The design fields every kind uses; a kind names the others it reads in `design_fields`."""

Export = Callable[["Study", Path, "Whose"], Sequence[str]]
"""Writes a study's items, or the answers of the raters it is told count, to a path; returns
what it wrote, a line each."""
TruthOfRuns = Callable[["Study", list[str], list[str], list["MetricTable"], list["MetricTable"], "Whose"],
                       "TruthChange"]
"""The change between the systems of runs before and after (`compare --truth`), by the answers
of the raters it is told count; a kind whose answers are rated truth also attaches it to each
run's table."""


@dataclass(frozen=True)
class StudyKind:
    name: str
    """`kind` in study.toml."""
    command: str
    """The rlhflab command that builds, serves and reads studies of this kind."""
    asks: str
    """What a rater is asked, in a few words (study.toml's comment on `kind`)."""
    design_fields: tuple[str, ...]
    """The `StudyDesign` fields this kind reads beyond `COMMON_FIELDS`."""
    design_defaults: Mapping[str, object]
    """The kind's own defaults for design fields (e.g. its question)."""
    columns: tuple[str, ...]
    """Store columns of its own, as "TABLE.COLUMN TYPE" (added to a study that lacks them)."""
    page: str
    """The page template (studies/templates) that shows an item and takes the answer."""
    answer_field: str
    """The form and JSON field that carries an answer."""
    answering: Callable[[StudyDesign], dict]
    """What `api/next` says about the answers it takes (choices, a scale)."""
    shown: Callable[["Served"], dict]
    """An item's texts as the page and `api/next` show them (beside its prompt)."""
    record: Callable[["Study", "Rater", int, str, Any], "Outcome"]
    """Reads an answer as the page or the API sends it and keeps it ("invalid" if not one)."""
    results: Callable[["Study", "Whose"], Any]
    """The study's results by the raters it is told count (an object with `to_json()`)."""
    exports: Mapping[str, Export]
    """Export formats by name."""
    truth_change: TruthOfRuns
    rated_truth: Callable[["Study", str, "Whose"], "RatedTruth"] | None
    """A system's answers as the doctor's rated truth over its steps (`--truth`); None for a
    kind whose answers are no rating of one run's steps."""

    def design(self, asked: Mapping[str, object]) -> StudyDesign:
        """A new study's design: the common defaults, the kind's, then `asked`."""
        return StudyDesign(**{**self.design_defaults, **asked, "kind": self.name})

    def design_toml(self, design: StudyDesign) -> str:
        """`design` as study.toml: the fields this kind reads, each with what it means."""
        lines = [f"# The study's design (rlhflab {self.command}); the answers live in study.sqlite.", "[design]"]
        used = (*COMMON_FIELDS, *self.design_fields)
        for f in fields(design):
            if f.name in used:
                doc = self.asks if f.name == "kind" else f.metadata["doc"]
                lines.append(f"{f.name} = {toml_value(getattr(design, f.name))}  # {doc}")
        return "\n".join(lines) + "\n"
