"""Sample files: the text a policy wrote during training, read where each trainer writes it.

The generic part: what a sample is, its fields and their spellings, the rows-to-samples
reader, and `table`: any JSONL or CSV with a step, a prompt, a completion and a reward
column, named as the trainers name them or given with `--map THEIRS=sample/FIELD`. Where
and how each trainer writes its samples is declared in its format module (a
`SampleFormat`: rlhflab's, veRL's, TRL's), and `formats/sample_files.py` reads and finds
them through that registry.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal, Mapping

from rlhflab.doctor.errors import LogFormatError
from rlhflab.runs import read_jsonl

Split = Literal["train", "eval"]
FIELDS = ("step", "prompt", "response", "reward", "gold", "ended")
"""A sample's fields, as `--map THEIRS=sample/FIELD` names them."""
SAMPLE_PREFIX = "sample/"


class SampleFileError(LogFormatError):
    """A sample file that cannot be read: the message names the file and what was expected."""


@dataclass(frozen=True)
class Sample:
    step: int
    prompt: str
    response: str
    reward: float | None = None  # the reward the trainer optimised (the proxy)
    gold: float | None = None  # a truth beside it, where the run has one
    ended: bool | None = None  # ended by the model (EOS) rather than cut at the length limit; None: not told


@dataclass
class SampleSet:
    """The samples of one file or directory, and what reading them found."""

    samples: list[Sample]
    source: str
    format: str
    split: Split = "train"  # "eval": validation generations, kept apart from training ones
    notes: list[str] = field(default_factory=list)

    def steps(self) -> list[int]:
        return sorted({s.step for s in self.samples})


# --- field values -------------------------------------------------------------------------
def _text(value: Any) -> str:
    """A prompt or completion as text: a string, or a chat's messages (TRL's conversational
    format: `[{"role": ..., "content": ...}, ...]`) joined by their contents."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        return _text(value.get("content", ""))
    if isinstance(value, (list, tuple)):
        return "\n".join(_text(v) for v in value)
    return str(value)


def number(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _flag(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false", "1", "0"):
        return value.strip().lower() in ("true", "1")
    if isinstance(value, (int, float)) and value in (0, 1):
        return bool(value)
    return None


# --- the generic table: column names each trainer uses, --map for the rest -----------------
COLUMN_NAMES: dict[str, tuple[str, ...]] = {
    "step": ("step", "global_step", "iteration", "iter", "train/global_step"),
    "prompt": ("prompt", "query", "input", "question", "instruction", "prompts"),
    "response": ("response", "completion", "output", "generation", "model response", "completions", "responses"),
    "reward": ("reward", "score", "proxy", "rewards", "reward_score", "scores"),
    "gold": ("gold", "gold_reward", "true_reward", "acc"),
    "ended": ("ended", "eos", "finished", "has_eos"),
}


def resolve_columns(names: list[str], mapping: Mapping[str, str], where: str) -> dict[str, str]:
    """Sample field -> the file's column: `--map` first, then the names trainers use.
    A file without a completion column is an error that lists what it has."""
    found: dict[str, str] = {}
    for theirs, ours in mapping.items():
        if theirs in names:
            found[ours] = theirs
    lowered = {n.lower(): n for n in names}
    for key, candidates in COLUMN_NAMES.items():
        if key not in found:
            hit = next((lowered[c] for c in candidates if c in lowered), None)
            if hit is not None and hit not in found.values():
                found[key] = hit
    for key, what in (("response", "completion"), ("step", "step")):
        if key not in found:
            raise SampleFileError(f"{where}: no {what} column among {', '.join(names) or 'no columns'}; expected one "
                                  f"of {', '.join(COLUMN_NAMES[key])}, or name it with --map THEIRS=sample/{key}")
    return found


def samples_of_rows(rows: list[dict], columns: dict[str, str], where: str, start_line: int = 1) -> list[Sample]:
    """Samples from parsed rows (`columns`: sample field -> the rows' key)."""
    samples = []
    for index, row in enumerate(rows):
        step_value = row.get(columns["step"])
        step = number(step_value)
        if step is None:
            raise SampleFileError(f"{where}:{start_line + index}: step {step_value!r} is not a number")
        samples.append(Sample(
            int(step), _text(row.get(columns.get("prompt", ""), "")), _text(row.get(columns["response"])),
            number(row.get(columns["reward"])) if "reward" in columns else None,
            number(row.get(columns["gold"])) if "gold" in columns else None,
            _flag(row.get(columns["ended"])) if "ended" in columns else None))
    return samples


def read_rows(path: Path) -> list[dict]:
    try:
        if path.suffix == ".csv":
            with path.open(encoding="utf-8-sig", newline="") as handle:
                return list(csv.DictReader(handle))
        return read_jsonl(path)
    except (ValueError, csv.Error, UnicodeDecodeError) as err:
        raise SampleFileError(str(err) if str(path) in str(err) else f"{path}: {err}") from None


def read_table(path: Path, mapping: Mapping[str, str] | None = None) -> SampleSet:
    """Any JSONL/CSV of samples (module docstring)."""
    rows = read_rows(path)
    names = sorted({key for row in rows for key in row})
    columns = resolve_columns(names, mapping or {}, str(path))
    notes = [f"{path.name}: " + ", ".join(f"{theirs} read as {ours}" for ours, theirs in sorted(columns.items())
                                           if theirs != ours)] if any(t != o for o, t in columns.items()) else []
    return SampleSet(samples_of_rows(rows, columns, str(path)), str(path), "table", notes=notes)


def first_keys(path: Path) -> set[str]:
    """The keys of a JSONL file's first line (empty when it is not a JSON object)."""
    try:
        with path.open(encoding="utf-8") as handle:
            line = handle.readline()
        return set(json.loads(line)) if line.strip().startswith("{") else set()
    except (OSError, ValueError):
        return set()


@dataclass(frozen=True)
class SampleFormat:
    """Where and how a trainer writes samples: `recognise` a file or directory of them,
    `read` it, and find the ones a log of this trainer has beside it: `find(log)` where the
    log itself says (a run directory, a printed config), `in_output_dir(directory)` for a
    trainer that writes them into its output directory (none: [])."""

    name: str
    description: str
    recognise: Callable[[Path], bool]
    read: Callable[..., SampleSet]
    find: Callable[[Path], list[SampleSet]] = lambda log: []
    in_output_dir: Callable[[Path], list[SampleSet]] = lambda directory: []


TABLE = SampleFormat("table", "any JSONL/CSV of step, prompt, completion, reward (--map THEIRS=sample/FIELD)",
                     lambda p: p.is_file() and p.suffix in (".jsonl", ".csv", ".json"), read_table)
