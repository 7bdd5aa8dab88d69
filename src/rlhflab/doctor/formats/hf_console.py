"""The captured console of a transformers/TRL trainer: progress bars redrawn with
carriage returns, and the `{'loss': ..., ...}` dict the Trainer prints at each logging
step (`transformers.trainer_callback.PrinterCallback` / `ProgressCallback.on_log`; since
transformers 5 its values are printed as formatted strings, `{'loss': '0.0123', ...}`).

The dicts carry no step. Where the training progress bar (`  7%|▋  | 20/290 [...]`)
was drawn before a dict, its count is the dict's step; otherwise the dict's position
among the printed dicts is, and the notes say which. The trainer is told by the names
(TRL's GRPO/RLOO, PPO), as for its trainer_state.json.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

from rlhflab.doctor.formats import trl
from rlhflab.doctor.formats.runs import run_starts
from rlhflab.doctor.formats.spec import LogFormat, RawLog, UserMapping
from rlhflab.doctor.formats.text import open_text, plain
from rlhflab.doctor.formats.trainer_state import is_evaluation_row

# transformers' Trainer logs it at the start of every `train()` (trainer.py, `_inner_training_loop`).
_BANNER = "***** Running training *****"
_DICT = re.compile(r"\{'[^'\n]+': [^\n]*\}")
_BAR = re.compile(r"(\d+)/(\d+) \[")
_NON_FINITE = re.compile(r"(?<![\w'])(nan|inf|-inf)(?![\w'])")
_BAR_STEP = "\0bar step"  # a key no log can use
_NAN = "\0nan"  # what a printed nan becomes before literal_eval, which has no nan
# The end-of-training summary dict: not a step, so not held to the bar's order.
_SUMMARY = {"train_runtime", "train_samples_per_second", "train_steps_per_second", "train_loss", "total_flos",
            "epoch", _BAR_STEP}
_HEAD = re.compile(r"\{'[A-Za-z_][\w/.\-]*': '?-?(\d|nan|inf)")


def _parse_dict(text: str) -> dict[str, Any] | None:
    """A printed metrics dict (Python repr; nan and inf as Python prints them)."""
    literal = _NON_FINITE.sub(lambda m: {"nan": repr(_NAN), "inf": "1e999", "-inf": "-1e999"}[m.group(1)], text)
    try:
        value = ast.literal_eval(literal)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        return None
    return {k: number for k, v in value.items() if (number := _number(v)) is not None}


# Names a transformers/TRL trainer's logged dict holds: a dict with none of them is
# another process's print (a model config, a sampling setting), not a logging step.
TRAINER_NAMES = frozenset({"loss", "grad_norm", "learning_rate"}).union(
    *(d.columns for d in trl.DIALECTS), *(d.ignored for d in trl.DIALECTS), trl.TRAINER_BOOKKEEPING)


def is_trainer_dict(row: dict[str, Any]) -> bool:
    return any(key in TRAINER_NAMES or key.startswith(("rewards/", *trl.EVAL_PREFIXES)) for key in row)


def _number(value: object) -> float | None:
    """A logged value: a number, or (transformers 5 prints them so) a number as text. A
    printed `None` is no value (a config dict's unset field), unlike a printed `nan`."""
    if value is None:
        return None
    if value == _NAN:
        return float("nan")
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return value
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def training_bar_total(segments: list[str]) -> int | None:
    """The total of the training progress bar: of all bars drawn (loading weights,
    evaluation, training), the one redrawn at the most distinct counts."""
    counts: dict[int, set[int]] = {}
    for segment in segments:
        for match in _BAR.finditer(segment):
            counts.setdefault(int(match.group(2)), set()).add(int(match.group(1)))
    if not counts:
        return None
    return max(counts, key=lambda total: (len(counts[total]), total))


def _read(path: Path, mapping: UserMapping) -> RawLog:
    records: list[dict[str, Any]] = []
    evaluation: list[dict[str, Any]] = []
    with open_text(path) as handle:
        segments = re.split(r"[\r\n]", plain(handle.read()))
    total = training_bar_total(segments)
    bar_step: int | None = None
    lowest: int | None = None  # the lowest count the bar showed since the last dict
    banners: set[int] = set()  # records with transformers' training banner printed before them
    for segment in segments:
        if _BANNER in segment:
            banners.add(len(records))
        for match in _BAR.finditer(segment):
            if int(match.group(2)) == total:
                bar_step = int(match.group(1))
                lowest = bar_step if lowest is None else min(lowest, bar_step)
        for found in _DICT.finditer(segment):
            row = _parse_dict(found.group(0))
            if row and is_trainer_dict(row):
                (evaluation if is_evaluation_row(row) else records).append({**row, _BAR_STEP: (bar_step, lowest)})
                lowest = bar_step
    drawn = [r[_BAR_STEP] for r in records if not set(r) <= _SUMMARY]
    bar_steps = [step for step, _ in drawn]
    # tqdm redraws the bar at its count after each print, and at most every 0.1 s as it
    # moves: two dicts at the same count are two steps the bar did not keep up with, unless
    # the bar went back between them (a resumed run, whose repeated steps merge).
    if drawn and None not in bar_steps and all(b[0] != a[0] or b[1] < a[0] for a, b in zip(drawn, drawn[1:])):
        note = (f"each printed dict took its step from the training progress bar (of {total} steps) drawn "
                "before it")
        for row in records + evaluation:
            step, _ = row.pop(_BAR_STEP)
            row["step"] = step if step is not None else 0
    else:
        why = ("no training progress bar was drawn before them" if not bar_steps or None in bar_steps else
               "the progress bar was not redrawn between some of them (tqdm redraws at most every 0.1 s)")
        note = f"the printed dicts' steps are their positions among the dicts: {why}"
        for index, row in enumerate(records + evaluation):
            del row[_BAR_STEP]
            row["step"] = index
    return RawLog(records, notes=[note], eval_records=evaluation,
                  run_starts=run_starts([row["step"] for row in records], banners))


def _recognise(path: Path) -> bool:
    if not path.is_file() or path.suffix in (".json", ".jsonl", ".csv"):
        return False
    with path.open("rb") as handle:
        head = handle.read(1 << 20).decode("utf-8", errors="replace")
    return any(_parse_dict(m.group(0)) for m in _DICT.finditer(head) if _HEAD.match(m.group(0)))


FORMAT = LogFormat(
    name="hf-console",
    description="a transformers/TRL trainer's captured console: printed {'loss': ...} dicts and progress bars",
    reads=("a transformers/TRL trainer's captured console: the printed `{'loss': ...}` dicts; each takes its step from "
           "the training progress bar drawn before it, else its position (the notes say which)"),
    recognise=_recognise,
    read=_read,
    dialects=trl.DIALECTS,
)
