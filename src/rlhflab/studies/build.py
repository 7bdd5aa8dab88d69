"""Building a study from sample files or runs: which systems, where the study lives.

A source is `[NAME=]PATH`: any sample file or directory the doctor reads (rlhflab runs,
veRL dumps, TRL completions, any JSONL/CSV with `--map`), each a named system. A study
of an rlhflab run lives at `RUN/studies/ratings/` unless told otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from rlhflab.doctor import read_samples
from rlhflab.studies.design import DrawnItem, StepBin, StudyDesign, StudyError, draw_items
from rlhflab.studies.kinds import RATING, create_study, open_study
from rlhflab.studies.store import Study, System

DEFAULT_STUDY = Path("studies") / "ratings"


@dataclass(frozen=True)
class Source:
    name: str
    path: Path


def _is_run(path: Path) -> bool:
    return path.is_dir() and (path / "samples" / "ppo.jsonl").is_file()


def _default_name(path: Path) -> str:
    if _is_run(path):
        return path.resolve().name
    if path.name == "ppo.jsonl" and path.parent.name == "samples":
        return path.resolve().parent.parent.name
    return path.stem if path.is_file() else path.resolve().name


def parse_sources(texts: Sequence[str]) -> list[Source]:
    """`[NAME=]PATH` each; a path that exists is read whole, so a `=` in a file name is safe."""
    sources: list[Source] = []
    for text in texts:
        path = Path(text)
        if not path.exists() and "=" in text:
            name, _, rest = text.partition("=")
            path = Path(rest)
            if not name.strip():
                raise StudyError(f"{text!r}: an empty system name before '='")
        else:
            name = _default_name(path)
        if not path.exists():
            raise StudyError(f"{path}: no such sample file or run")
        taken = {s.name for s in sources}
        unique, k = name.strip(), 2
        while unique in taken:
            unique, k = f"{name.strip()}-{k}", k + 1
        sources.append(Source(unique, path))
    return sources


def study_directory(study: Path | None, sources: Sequence[Source]) -> Path:
    """`--study`, or `RUN/studies/ratings` for a study of one rlhflab run."""
    if study is not None:
        return Path(study)
    runs = [s.path for s in sources if _is_run(s.path)]
    if len(sources) == 1 and runs:
        return runs[0] / DEFAULT_STUDY
    raise StudyError("give the study's directory with --study DIR (only a study of one rlhflab run has a default: "
                     "RUN/studies/ratings)")


@dataclass(frozen=True)
class Drawn:
    source: Source
    format: str
    bins: list[StepBin]
    items: list[DrawnItem]


def draw_sources(sources: Sequence[Source], design: StudyDesign, mapping: Mapping[str, str] | None = None) -> list[Drawn]:
    """Every source read and drawn before anything is written: a bad file stops the
    command with its file and line, and leaves no half-built study behind."""
    drawn = []
    for source in sources:
        sample_set = read_samples(source.path, mapping)
        drawn.append(Drawn(source, sample_set.format, *draw_items(sample_set.samples, design, source.name)))
    return drawn


def add_drawn(study: Study, drawn: Sequence[Drawn]) -> list[System]:
    return [study.add_system(d.source.name, str(d.source.path.resolve()), d.format, d.bins, d.items) for d in drawn]


def new_sources(study: Study, sources: Sequence[Source]) -> list[Source]:
    """The sources `study` does not hold yet (by the file they come from)."""
    held = {s.source for s in study.systems()}
    return [s for s in sources if str(s.path.resolve()) not in held]


def open_or_build(directory: Path, sources: Sequence[Source], asked: Mapping[str, object], add: bool,
                  mapping: Mapping[str, str] | None = None) -> tuple[Study, list[System]]:
    """Open the study at `directory` (adding `sources` only with `add`), or build it.
    `asked`: the design fields given on the command line (the rest are the defaults); an
    existing study keeps the design it was built with, and asking for another is an error."""
    if Study.exists(directory):
        study = open_study(directory, RATING)
        differ = {k: v for k, v in asked.items() if getattr(study.design, k) != v}
        if differ:
            held = ", ".join(f"{k} = {getattr(study.design, k)!r}, not {v!r}" for k, v in differ.items())
            raise StudyError(f"{directory}: the study's design is fixed when it is built ({held}: "
                             f"{directory / 'study.toml'}); build a new study to change it")
        fresh = new_sources(study, sources)
        taken = sorted({s.name for s in fresh} & {s.name for s in study.systems()})
        if taken:
            raise StudyError(f"{directory}: the study already has systems named {', '.join(taken)}; give the new "
                             "sources other names (NAME=PATH)")
        if fresh and not add:
            raise StudyError(f"{directory}: the study exists and does not hold {', '.join(str(s.path) for s in fresh)}; "
                             "add them with --add")
        return study, add_drawn(study, draw_sources(fresh, study.design, mapping))
    if not sources:
        raise StudyError(f"{directory}: no study here yet; give the sample files or runs to rate")
    drawn = draw_sources(sources, RATING.design(asked), mapping)
    study = create_study(directory, RATING, asked)
    return study, add_drawn(study, drawn)
