"""The captured console of a transformers/TRL trainer: progress bars redrawn with
carriage returns, and the `{'loss': ..., ...}` dict the Trainer prints at each logging
step (`transformers.trainer_callback.PrinterCallback` / `ProgressCallback.on_log`).

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
from rlhflab.doctor.formats.spec import LogFormat, RawLog, UserMapping
from rlhflab.doctor.formats.trainer_state import _is_evaluation
from rlhflab.doctor.formats.verl import ANSI, open_text

_DICT = re.compile(r"\{'[^'\n]+': [^\n]*\}")
_BAR = re.compile(r"(\d+)/(\d+) \[")
_NON_FINITE = re.compile(r"(?<![\w'])(nan|inf|-inf)(?![\w'])")
_HEAD = re.compile(r"\{'[A-Za-z_][\w/.\-]*': -?(\d|nan|inf)")


def _parse_dict(text: str) -> dict[str, Any] | None:
    """A printed metrics dict (Python repr; nan and inf as Python prints them)."""
    literal = _NON_FINITE.sub(lambda m: {"nan": "None", "inf": "1e999", "-inf": "-1e999"}[m.group(1)], text)
    try:
        value = ast.literal_eval(literal)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        return None
    return {k: (float("nan") if v is None else v) for k, v in value.items()
            if v is None or isinstance(v, (int, float)) and not isinstance(v, bool)}


def _read(path: Path, mapping: UserMapping) -> RawLog:
    records: list[dict[str, Any]] = []
    evaluation: list[dict[str, Any]] = []
    bar_step: int | None = None
    bar_total = 0
    from_bar = from_index = 0
    with open_text(path) as handle:
        text = ANSI.sub("", handle.read().replace("\0", ""))
    for segment in re.split(r"[\r\n]", text):
        for match in _BAR.finditer(segment):
            count, total = int(match.group(1)), int(match.group(2))
            if total >= bar_total:  # the training bar is the longest; evaluation bars are shorter
                bar_total, bar_step = total, count
        for found in _DICT.finditer(segment):
            row = _parse_dict(found.group(0))
            if not row:
                continue
            if bar_step is not None:
                row["step"], from_bar = bar_step, from_bar + 1
            else:
                row["step"], from_index = len(records) + len(evaluation), from_index + 1
            (evaluation if _is_evaluation(row) else records).append(row)
    notes = []
    if from_bar:
        notes.append(f"{from_bar} printed dict(s) took their step from the training progress bar drawn before them")
    if from_index:
        notes.append(f"{from_index} printed dict(s) had no progress bar before them: their step is their position "
                     "among the printed dicts")
    return RawLog(records, notes=notes, eval_records=evaluation)


def _recognise(path: Path) -> bool:
    if not path.is_file() or path.suffix in (".json", ".jsonl", ".csv"):
        return False
    with path.open("rb") as handle:
        head = handle.read(1 << 20).decode("utf-8", errors="replace")
    return any(_parse_dict(m.group(0)) for m in _DICT.finditer(head) if _HEAD.match(m.group(0)))


FORMAT = LogFormat(
    name="hf-console",
    description="a transformers/TRL trainer's captured console: printed {'loss': ...} dicts and progress bars",
    recognise=_recognise,
    read=_read,
    dialects=trl.DIALECTS,
)
