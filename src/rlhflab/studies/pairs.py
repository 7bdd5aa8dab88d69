"""Pair studies: blind side-by-side comparisons of two or more systems' responses to the
same prompts, built from sample files (any the doctor reads; `rlhflab sample` writes them
for a model directory or a run).

Each system's responses are keyed by prompt (a prompt it answered more than once keeps its
latest step's first response). The study's prompts are those every system answered,
`design.prompts_drawn` of them drawn at random (seeded), each with every one of the K(K-1)/2
pairs of systems, so every pair is compared on the same prompts as often as every other.
Within a pair, A is the system given first; which side A is shown on is drawn per item
(seeded) and kept, so the side's pull can be measured and a rater cannot learn it.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from rlhflab.doctor import Sample, read_samples
from rlhflab.seeding import derive_seed
from rlhflab.studies.build import Source
from rlhflab.studies.design import StudyDesign, StudyError
from rlhflab.studies.kinds import PAIR, create_study, open_study
from rlhflab.studies.pair_store import PairItem, add_pairs
from rlhflab.studies.store import Study, System


@dataclass(frozen=True)
class Answered:
    """One system's responses, by prompt."""

    source: Source
    format: str
    responses: dict[str, str]


def responses_by_prompt(samples: Sequence[Sample]) -> dict[str, str]:
    """prompt -> response: the latest step's first response to each prompt."""
    latest: dict[str, tuple[int, str]] = {}
    for sample in samples:
        if sample.prompt not in latest or sample.step > latest[sample.prompt][0]:
            latest[sample.prompt] = (sample.step, sample.response)
    return {prompt: response for prompt, (_, response) in latest.items()}


def read_answered(sources: Sequence[Source], mapping: Mapping[str, str] | None = None) -> list[Answered]:
    """Every source read before anything is written (a bad file stops with its file and line)."""
    answered = []
    for source in sources:
        sample_set = read_samples(source.path, mapping)
        responses = responses_by_prompt(sample_set.samples)
        if not responses:
            raise StudyError(f"{source.path}: no responses to compare")
        answered.append(Answered(source, sample_set.format, responses))
    return answered


def draw_pairs(answered: Sequence[Answered], design: StudyDesign) -> list[PairItem]:
    """The study's items (module docstring)."""
    if len(answered) < 2:
        raise StudyError("a pair study compares two or more systems: give at least two")
    shared = sorted(set.intersection(*(set(a.responses) for a in answered)))
    if not shared:
        names = ", ".join(a.source.name for a in answered)
        raise StudyError(f"{names}: no prompt is answered by every system; sample them on the same prompts "
                         "(rlhflab sample MODEL --prompts FILE)")
    rng = random.Random(derive_seed(design.seed, "pairs/draw"))
    prompts = rng.sample(shared, design.prompts_drawn) if 0 < design.prompts_drawn < len(shared) else shared
    items = []
    for prompt in prompts:
        for a, b in itertools.combinations(answered, 2):
            side = "a" if rng.random() < 0.5 else "b"
            items.append(PairItem(a.source.name, b.source.name, prompt, a.responses[prompt], b.responses[prompt], side))
    return items


def build_pair_study(directory: Path, sources: Sequence[Source], asked: Mapping[str, object],
                     mapping: Mapping[str, str] | None = None) -> tuple[Study, list[System]]:
    """A new pair study at `directory` (its design: the defaults, then `asked`), or the one
    there when it already holds exactly these sources."""
    if Study.exists(directory):
        study = open_study(directory, PAIR)
        held = {s.source for s in study.systems()}
        fresh = [s for s in sources if str(s.path.resolve()) not in held]
        if fresh:
            raise StudyError(f"{directory}: the study exists and compares other systems ({', '.join(sorted(held))}); "
                             "a pair study's systems are fixed when it is built: give a new --study DIR")
        return study, []
    design = PAIR.design(asked)
    answered = read_answered(sources, mapping)
    items = draw_pairs(answered, design)
    study = create_study(directory, PAIR, asked)
    systems = add_pairs(study, [(a.source.name, str(a.source.path.resolve()), a.format) for a in answered], items)
    return study, systems
