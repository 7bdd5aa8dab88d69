"""The registry of study kinds: each is one module of this package holding one `StudyKind`
(studies/kind.py), listed once in `KINDS`. Whatever depends on a study's kind looks it up
here (`kind_of`) and asks the kind, so no other module compares kinds' names.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

from rlhflab.studies.design import StudyDesign, StudyError
from rlhflab.studies.kind import StudyKind
from rlhflab.studies.kinds.pair import PAIR
from rlhflab.studies.kinds.rating import RATING
from rlhflab.studies.store import Study

KINDS: dict[str, StudyKind] = {kind.name: kind for kind in (RATING, PAIR)}


def kind_of(design: StudyDesign) -> StudyKind:
    """The kind a design names; an unknown one is a StudyError."""
    if design.kind not in KINDS:
        raise StudyError(f"kind = {design.kind!r}: one of {', '.join(KINDS)}")
    return KINDS[design.kind]


def create_study(directory: Path, kind: StudyKind, asked: Mapping[str, object]) -> Study:
    """A new study of `kind` at `directory`, its design the defaults, the kind's, then `asked`."""
    design = kind.design(asked)
    return Study.create(directory, design, kind.design_toml(design), kind.columns)


def require_kind(study: Study, expected: StudyKind) -> None:
    """A study of another kind than `expected` is a StudyError that names the command that reads it."""
    kind = kind_of(study.design)
    if kind is not expected:
        raise StudyError(f"{study.directory}: a {kind.name} study, not a {expected.name} study; read it with "
                         f"rlhflab {kind.command} {study.directory}")


def open_study(directory: Path, expected: StudyKind | None = None) -> Study:
    """The study at `directory` with its kind's columns (`require_kind` where `expected` is given)."""
    study = Study.open(directory)  # the design is read, and the schema checked, first
    if expected is not None:
        require_kind(study, expected)
    return Study.open(directory, kind_of(study.design).columns)
