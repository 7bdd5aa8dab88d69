"""Sample files: the text a policy wrote during training, read where each trainer writes it.

Readers (`SAMPLE_FORMATS`), each written from the trainer's own dump code:
- `rlhflab`: `RUN/samples/ppo.jsonl`, `{step, prompt, response, proxy, gold, ended}` per
  response (`ppo/run.py`, `ppo.samples_per_iteration` of each batch).
- `verl`: `trainer.rollout_data_dir` (every training step) and `trainer.validation_data_dir`
  (every validation), one `{global_step}.jsonl` per step, lines `{input, output, gts, score,
  step, <reward extras>}` (veRL's `RayPPOTrainer._dump_generations`, verl/trainer/ppo/ray_trainer.py).
- `trl`: GRPOTrainer with `log_completions=True` (TRL 0.28 and later) writes
  `OUTPUT_DIR/completions/completions_{global_step:05d}.parquet` at every logging step,
  columns `step, prompt, completion, <one per reward function>, <extras>, advantage`
  (`GRPOTrainer.log`). RLOOTrainer and TRL 1.12's PPOTrainer only print or send them to
  W&B; `DoctorCallback(samples=True)` writes `OUTPUT_DIR/rlhflab/samples.jsonl` for them.
- `table`: any JSONL or CSV with a step, a prompt, a completion and a reward column, named
  as the trainers above name them or given with `--map THEIRS=sample/FIELD`.

`find_samples` finds them beside a log where the trainer's layout says they live.
"""

from __future__ import annotations

import csv
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal, Mapping

from rlhflab.doctor.formats.spec import LogFormatError
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


def _number(value: Any) -> float | None:
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
        step = _number(step_value)
        if step is None:
            raise SampleFileError(f"{where}:{start_line + index}: step {step_value!r} is not a number")
        samples.append(Sample(
            int(step), _text(row.get(columns.get("prompt", ""), "")), _text(row.get(columns["response"])),
            _number(row.get(columns["reward"])) if "reward" in columns else None,
            _number(row.get(columns["gold"])) if "gold" in columns else None,
            _flag(row.get(columns["ended"])) if "ended" in columns else None))
    return samples


def _read_rows(path: Path) -> list[dict]:
    try:
        if path.suffix == ".csv":
            with path.open(encoding="utf-8-sig", newline="") as handle:
                return list(csv.DictReader(handle))
        return read_jsonl(path)
    except (ValueError, csv.Error, UnicodeDecodeError) as err:
        raise SampleFileError(str(err) if str(path) in str(err) else f"{path}: {err}") from None


def read_table(path: Path, mapping: Mapping[str, str] | None = None) -> SampleSet:
    """Any JSONL/CSV of samples (module docstring)."""
    rows = _read_rows(path)
    names = sorted({key for row in rows for key in row})
    columns = resolve_columns(names, mapping or {}, str(path))
    notes = [f"{path.name}: " + ", ".join(f"{theirs} read as {ours}" for ours, theirs in sorted(columns.items())
                                           if theirs != ours)] if any(t != o for o, t in columns.items()) else []
    return SampleSet(samples_of_rows(rows, columns, str(path)), str(path), "table", notes=notes)


# --- rlhflab -------------------------------------------------------------------------------
# Sample field -> the key rlhflab's ppo/run.py writes it under.
RLHFLAB_SAMPLE_COLUMNS = {"step": "step", "prompt": "prompt", "response": "response", "reward": "proxy",
                          "gold": "gold", "ended": "ended"}


def read_rlhflab(path: Path, mapping: Mapping[str, str] | None = None) -> SampleSet:
    """`RUN/samples/ppo.jsonl` (or the run directory)."""
    path = path / "samples" / "ppo.jsonl" if path.is_dir() else path
    rows = _read_rows(path)
    return SampleSet(samples_of_rows(rows, RLHFLAB_SAMPLE_COLUMNS, str(path)), str(path), "rlhflab")


# --- veRL ----------------------------------------------------------------------------------
_STEP_FILE = re.compile(r"^(\d+)\.jsonl$")


def read_verl(path: Path, mapping: Mapping[str, str] | None = None, split: Split = "train") -> SampleSet:
    """A `rollout_data_dir` or `validation_data_dir` (or one `{step}.jsonl` of it)."""
    files = ([path] if path.is_file() else
             sorted((p for p in path.iterdir() if _STEP_FILE.match(p.name)), key=lambda p: int(p.stem)))
    columns = {"step": "step", "prompt": "input", "response": "output", "reward": "score"}
    samples: list[Sample] = []
    for file in files:
        rows = _read_rows(file)
        for row in rows:
            row.setdefault("step", int(file.stem) if file.stem.isdigit() else 0)
        samples.extend(samples_of_rows(rows, {**columns, **{o: t for t, o in (mapping or {}).items()}}, str(file)))
    return SampleSet(samples, str(path), "verl", split)


def _is_verl(path: Path) -> bool:
    if path.is_file():
        return bool(_STEP_FILE.match(path.name)) and _first_keys(path) >= {"input", "output"}
    files = [p for p in path.iterdir() if _STEP_FILE.match(p.name)] if path.is_dir() else []
    return bool(files) and _first_keys(files[0]) >= {"input", "output"}


def _first_keys(path: Path) -> set[str]:
    try:
        with path.open(encoding="utf-8") as handle:
            line = handle.readline()
        return set(json.loads(line)) if line.strip().startswith("{") else set()
    except (OSError, ValueError):
        return set()


# --- TRL -----------------------------------------------------------------------------------
# Columns of GRPOTrainer's completions table that are not a reward function's.
TRL_NOT_REWARDS = frozenset({"step", "prompt", "completion", "advantage", "image", "images"})


def read_trl(path: Path, mapping: Mapping[str, str] | None = None) -> SampleSet:
    """GRPOTrainer's `completions/` (or one parquet file of it): the reward is the sum of
    the reward functions' columns (their weights are in GRPOConfig.reward_weights, which
    the files do not hold: 1 each, TRL's default, is assumed and said)."""
    try:
        import pyarrow.parquet as parquet
        from pyarrow import types
    except ImportError:
        raise SampleFileError(f"{path}: reading TRL's parquet completions needs pyarrow (pip install pyarrow)") from None
    files = [path] if path.is_file() else sorted(path.glob("completions_*.parquet"))
    samples: list[Sample] = []
    notes: list[str] = []
    for file in files:
        try:
            frame = parquet.read_table(file)
        except (OSError, ValueError) as err:
            raise SampleFileError(f"{file}: cannot read parquet ({err})") from None
        reward_columns = [f.name for f in frame.schema if f.name not in TRL_NOT_REWARDS
                          and (types.is_integer(f.type) or types.is_floating(f.type))]
        rows = frame.to_pylist()
        for row in rows:
            parts = [_number(row[c]) for c in reward_columns]
            row["reward"] = sum(p for p in parts if p is not None) if any(p is not None for p in parts) else None
        columns = {"step": "step", "prompt": "prompt", "response": "completion", "reward": "reward"}
        samples.extend(samples_of_rows(rows, {**columns, **{o: t for t, o in (mapping or {}).items()}}, str(file)))
        if reward_columns and not notes:
            notes.append(f"{path}: the reward is the sum of {', '.join(reward_columns)} (reward weights "
                         "of 1 assumed: the completions files do not hold GRPOConfig.reward_weights)")
    return SampleSet(samples, str(path), "trl", notes=notes)


def _is_trl(path: Path) -> bool:
    if path.is_file():
        return path.suffix == ".parquet"
    return path.is_dir() and any(path.glob("completions_*.parquet"))


# --- the registry ----------------------------------------------------------------------------
@dataclass(frozen=True)
class SampleFormat:
    name: str
    description: str
    recognise: Callable[[Path], bool]
    read: Callable[..., SampleSet]


def _is_rlhflab(path: Path) -> bool:
    return (path / "samples" / "ppo.jsonl").is_file() if path.is_dir() else (
        path.name == "ppo.jsonl" and path.parent.name == "samples")


SAMPLE_FORMATS: tuple[SampleFormat, ...] = (
    SampleFormat("rlhflab", "RUN/samples/ppo.jsonl", _is_rlhflab, read_rlhflab),
    SampleFormat("verl", "veRL rollout_data_dir / validation_data_dir: {step}.jsonl files", _is_verl, read_verl),
    SampleFormat("trl", "TRL GRPOTrainer completions/completions_*.parquet (log_completions=True)", _is_trl, read_trl),
    SampleFormat("table", "any JSONL/CSV of step, prompt, completion, reward (--map THEIRS=sample/FIELD)",
                 lambda p: p.is_file() and p.suffix in (".jsonl", ".csv", ".json"), read_table),
)


def read_samples(path: Path, mapping: Mapping[str, str] | None = None) -> SampleSet:
    """The samples in `path`, its format recognised by its layout and content."""
    path = Path(path)
    if not path.exists():
        raise SampleFileError(f"{path}: no such file or directory")
    for fmt in SAMPLE_FORMATS:
        if fmt.recognise(path):
            return fmt.read(path, mapping)
    raise SampleFileError(f"{path}: not a sample file; known: "
                          + "; ".join(f"{f.name} ({f.description})" for f in SAMPLE_FORMATS))


# --- where trainers put them ----------------------------------------------------------------
# veRL's config keys for its dumps, as its startup config print or a Hydra override shows them.
_VERL_DIRS = {"train": "rollout_data_dir", "eval": "validation_data_dir"}
_CONFIG_VALUE = r"""['"]?{key}['"]?\s*[:=]\s*['"]?([^'",}}\s]+)"""
CALLBACK_SAMPLES = Path("rlhflab") / "samples.jsonl"  # DoctorCallback(samples=True), under OUTPUT_DIR
TRL_COMPLETIONS = "completions"


def find_samples(log: Path) -> list[SampleSet]:
    """The sample files a trainer's layout puts beside `log`: rlhflab's `samples/ppo.jsonl`;
    TRL's `completions/` or the callback's `rlhflab/samples.jsonl` in the output directory
    (the log's directory or up to two above it: trainer_state.json sits in `checkpoint-N/`,
    TensorBoard events in `runs/DATE/`); veRL's dump directories as its log's printed
    config names them (relative paths from the log's directory). Nothing found: []."""
    log = Path(log)
    if _is_rlhflab(log):
        return [read_rlhflab(log)]
    found: list[SampleSet] = []
    base = log if log.is_dir() else log.parent
    for directory in (base, base.parent, base.parent.parent):
        if (directory / TRL_COMPLETIONS).is_dir() and _is_trl(directory / TRL_COMPLETIONS):
            found.append(read_trl(directory / TRL_COMPLETIONS))
        if (directory / CALLBACK_SAMPLES).is_file():
            found.append(read_table(directory / CALLBACK_SAMPLES))
        if found:
            return found
    if log.is_file():
        found.extend(_verl_dumps(log))
    return found


def _verl_dumps(log: Path) -> list[SampleSet]:
    try:
        with log.open(encoding="utf-8", errors="replace") as handle:
            head = handle.read(2_000_000)  # the config is printed at startup
    except OSError:
        return []
    sets = []
    for split, key in _VERL_DIRS.items():
        match = re.search(_CONFIG_VALUE.format(key=key), head)
        if not match or match.group(1) in ("None", "null"):
            continue
        directory = Path(match.group(1))
        directory = directory if directory.is_absolute() else log.parent / directory
        if directory.is_dir() and _is_verl(directory):
            sets.append(read_verl(directory, split=split))
    return sets
