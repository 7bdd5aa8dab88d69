"""From sample files to the table: the text measures of each step (`text/*`,
doctor/metrics.py), the canonical metrics they stand in for where the log lacks them, and
the samples that stood out at a step (for the report).

A step's measures need enough responses to say anything about the batch: steps with
fewer than `MIN_SAMPLES_PER_STEP` are not measured, and a step with more than
`MAX_SAMPLES_PER_STEP` is measured on that many, evenly spaced (the near-duplicate
search is quadratic; the pooled measures also depend on the count, so one run is
measured on a fixed number at every step).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from statistics import fmean

from rlhflab.doctor.metrics import EVAL_PREFIX
from rlhflab.doctor.samples import Sample, SampleSet
from rlhflab.doctor.table import MetricTable, Series
from rlhflab.metrics.diversity import distinct_n, identical_fraction
from rlhflab.metrics.text import (
    near_duplicate_fraction,
    opening_counts,
    opening_share,
    pearson,
    prompt_copy,
    repetition,
    words,
)

MIN_SAMPLES_PER_STEP = 16
MAX_SAMPLES_PER_STEP = 256


@dataclass(frozen=True)
class StandIn:
    """A canonical metric a text measure fills when the log does not have it."""

    metric: str
    text: str
    why: str  # how the two differ, said in the note
    relative_only: bool = False  # in another unit: only rules that compare it with its own start read it


STAND_INS: tuple[StandIn, ...] = (
    StandIn("response/distinct_1", "text/distinct_1", "words of the sampled responses, pooled"),
    StandIn("response/distinct_2", "text/distinct_2", "word bigrams of the sampled responses, pooled"),
    StandIn("response/identical_frac", "text/identical_frac", "exact duplicates among the sampled responses"),
    StandIn("response/truncated_frac", "text/truncated_frac", "responses the sample file marks as not ended"),
    StandIn("response/length_mean", "text/length_words", "in words, not tokens", relative_only=True),
    StandIn("reward/length_corr", "text/reward_length_corr", "in words, over the sampled responses"),
    StandIn("reward/proxy_mean", "text/reward_mean", "the mean reward of the sampled responses"),
)


def evenly(samples: list[Sample], n: int) -> list[Sample]:
    """`n` of the samples, evenly spaced in the file's order (all of them when fewer)."""
    if len(samples) <= n:
        return samples
    return [samples[i * len(samples) // n] for i in range(n)]


def step_measures(samples: list[Sample]) -> dict[str, float]:
    """The `text/*` measures of one step's responses (doctor/metrics.py's TEXT_METRICS)."""
    tokenised = [words(s.response) for s in samples]  # split once, measured several ways
    reps = [repetition(w) for w in tokenised]
    lengths = [float(len(w)) for w in tokenised]
    measures = {
        "text/samples": float(len(samples)),
        "text/distinct_1": distinct_n(tokenised, 1),
        "text/distinct_2": distinct_n(tokenised, 2),
        "text/opening_share": opening_share(tokenised),
        "text/near_duplicate_frac": near_duplicate_fraction(tokenised),
        "text/identical_frac": identical_fraction(tokenised),
        "text/repetition": fmean(reps),
        "text/prompt_copy": fmean(prompt_copy(s.prompt, w) for s, w in zip(samples, tokenised)),
        "text/length_words": fmean(lengths),
    }
    ended = [s.ended for s in samples if s.ended is not None]
    if len(ended) == len(samples):
        measures["text/truncated_frac"] = 1.0 - sum(ended) / len(ended)
    rewarded = [(s.reward, length, rep) for s, length, rep in zip(samples, lengths, reps) if s.reward is not None]
    if len(rewarded) == len(samples):
        rewards = [r for r, _, _ in rewarded]
        measures["text/reward_mean"] = fmean(rewards)
        golds = [s.gold for s in samples]
        pairs = [("text/reward_length_corr", lengths), ("text/reward_repetition_corr", reps)]
        if all(g is not None for g in golds):
            pairs.append(("text/reward_gold_corr", golds))
        for name, other in pairs:
            corr = pearson(rewards, other)
            if math.isfinite(corr):
                measures[name] = corr
    return measures


@lru_cache(maxsize=4096)
def _step_measures_of(group: tuple[Sample, ...]) -> dict[str, float]:
    """`step_measures`, remembered: `--follow` and the live callback read the same steps
    again at every look, and a step's samples never change once written."""
    return step_measures(list(group))


def by_step(samples: list[Sample]) -> dict[int, list[Sample]]:
    steps: dict[int, list[Sample]] = {}
    for s in samples:
        steps.setdefault(s.step, []).append(s)
    return steps


def measure(sample_set: SampleSet) -> tuple[dict[str, Series], list[str]]:
    """Each `text/*` measure over the steps of a sample set, and notes on what was left out."""
    steps = by_step(sample_set.samples)
    columns: dict[str, list[tuple[int, float]]] = {}
    thin = [step for step, group in steps.items() if len(group) < MIN_SAMPLES_PER_STEP]
    for step, group in sorted(steps.items()):
        if len(group) < MIN_SAMPLES_PER_STEP:
            continue
        for name, value in _step_measures_of(tuple(evenly(group, MAX_SAMPLES_PER_STEP))).items():
            columns.setdefault(name, []).append((step, value))
    notes = []
    if thin:
        most = max(len(g) for g in steps.values())
        notes.append(f"{sample_set.source}: {len(thin)} of {len(steps)} steps hold fewer than {MIN_SAMPLES_PER_STEP} "
                     f"responses (at most {most}): not measured" + (
                         "; keep more (rlhflab: ppo.samples_per_iteration)" if sample_set.format == "rlhflab" else ""))
    if any(len(g) > MAX_SAMPLES_PER_STEP for g in steps.values()):
        notes.append(f"{sample_set.source}: steps with more than {MAX_SAMPLES_PER_STEP} responses are measured on "
                     f"{MAX_SAMPLES_PER_STEP} of them, evenly spaced")
    return {name: Series.from_pairs(pairs) for name, pairs in columns.items()}, notes


def attach_samples(table: MetricTable, sample_sets: list[SampleSet]) -> None:
    """Add the sample sets' measures to the table (validation generations under `eval/`,
    apart from training ones), fill the canonical metrics they stand in for where the log
    has none, and keep the sets for the report. Each stand-in is noted."""
    for sample_set in sample_sets:
        series, notes = measure(sample_set)
        table.notes.extend(sample_set.notes + notes)
        table.samples.append(sample_set)
        prefix = EVAL_PREFIX if sample_set.split == "eval" else ""
        for name, s in series.items():
            if len(s) and (prefix + name) not in table.series:
                table.series[prefix + name] = s
                if prefix:
                    table.evaluation.append(prefix + name)
        if series:
            table.notes.append(f"samples read from {sample_set.source} ({sample_set.format}, "
                               f"{len(sample_set.samples)} responses over {len(sample_set.steps())} steps"
                               + (", validation generations" if prefix else "") + ")")
    for stand_in in STAND_INS:
        text = table.series.get(stand_in.text)
        if text is None or not len(text) or table.series.get(stand_in.metric) is not None:
            continue
        table.series[stand_in.metric] = text
        table.derived[stand_in.metric] = stand_in.text
        if stand_in.relative_only:
            table.units[stand_in.metric] = "words"
        table.notes.append(f"{stand_in.metric} is read from the samples' {stand_in.text} ({stand_in.why}): the log "
                           "does not hold it")


@dataclass(frozen=True)
class StepSamples:
    """What stood out among one step's samples: the highest- and lowest-rewarded responses
    and the most repeated openings, each with its number."""

    step: int
    count: int
    highest: tuple[Sample, ...]
    lowest: tuple[Sample, ...]
    openings: tuple[tuple[str, int], ...]  # (opening words, responses that open with them)


def samples_at(sample_sets: list[SampleSet], step: int, k: int = 3) -> StepSamples | None:
    """The training samples of the first step at or after `step` that has enough of them
    (else the last before it)."""
    groups: dict[int, list[Sample]] = {}
    for sample_set in sample_sets:
        if sample_set.split == "train":
            groups.update(by_step(sample_set.samples))
    full = {s: g for s, g in groups.items() if len(g) >= MIN_SAMPLES_PER_STEP}
    groups = full or groups
    if not groups:
        return None
    later = [s for s in groups if s >= step]
    chosen = min(later) if later else max(groups)
    group = groups[chosen]
    rewarded = sorted((s for s in group if s.reward is not None), key=lambda s: s.reward, reverse=True)
    openings = opening_counts([s.response for s in group]).most_common(k)
    return StepSamples(chosen, len(group), tuple(rewarded[:k]), tuple(reversed(rewarded[-k:])) if rewarded else (),
                       tuple((" ".join(o), n) for o, n in openings))
