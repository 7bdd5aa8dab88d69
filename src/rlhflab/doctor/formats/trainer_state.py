"""transformers' `trainer_state.json` (what every Trainer, TRL's included, saves with a
checkpoint): its `log_history` list, or that list saved on its own; or an output
directory holding either (its newest checkpoint's when the top level has none).

The trainer is told by the names the rows hold (TRL's PPO, GRPO/RLOO). Evaluation rows
(`eval_*`) are kept apart from training rows, and the summary row transformers appends
at the end of training (`train_runtime`, `train_loss`, ...) is not a step.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from rlhflab.doctor.formats import trl
from rlhflab.doctor.formats.spec import LogFormat, LogFormatError, RawLog, UserMapping

STATE = "trainer_state.json"
_LIST_OF_ROWS = re.compile(rb'^\s*\[\s*(\{\s*"[^"]+"\s*:|\])')
_LOG_HISTORY = re.compile(rb'"log_history"\s*:')


def state_file(path: Path) -> Path:
    """`path` itself, the trainer_state.json in an output directory, or else its newest
    checkpoint's (`checkpoint-N/`)."""
    path = Path(path)
    if not path.is_dir():
        return path
    if (path / STATE).is_file():
        return path / STATE
    checkpoints = [p for p in path.glob(f"checkpoint-*/{STATE}") if p.parent.name.split("-")[-1].isdigit()]
    if checkpoints:
        return max(checkpoints, key=lambda p: int(p.parent.name.split("-")[-1]))
    return path / STATE


def _recognise(path: Path) -> bool:
    """A JSON file that opens a `log_history`, or a list of row objects, in its first
    kilobytes: a truncated file is still recognised, and then told where it breaks."""
    path = state_file(path)
    if not path.is_file() or path.suffix != ".json":
        return False
    if path.name == STATE:
        return True
    with path.open("rb") as handle:
        head = handle.read(65536)
    return bool(_LOG_HISTORY.search(head) or _LIST_OF_ROWS.match(head))


def load_rows(path: Path) -> list[Any]:
    """The log_history list of a trainer_state.json, or a JSON list of rows."""
    try:
        state = json.loads(Path(path).read_bytes().decode("utf-8"))
    except UnicodeDecodeError as err:
        raise LogFormatError(f"{path}: not UTF-8 text ({err.reason} at byte {err.start})") from None
    except json.JSONDecodeError as err:
        raise LogFormatError(f"{path}:{err.lineno}: invalid JSON ({err.msg}, column {err.colno})") from None
    except RecursionError:
        raise LogFormatError(f"{path}: JSON nested too deeply to be a trainer log") from None
    if isinstance(state, dict) and isinstance(state.get("log_history"), list):
        return state["log_history"]
    if isinstance(state, list):
        return state
    raise LogFormatError(f"{path}: expected a trainer_state.json with a 'log_history' list, or a JSON list of rows")


def is_evaluation_row(row: dict[str, Any]) -> bool:
    """A row of evaluation metrics only (`eval_loss`, `eval_reward`, ...)."""
    evaluation = False
    for key in row:
        if key in ("step", "epoch"):
            continue
        if not key.startswith(trl.EVAL_PREFIXES):
            return False
        evaluation = True
    return evaluation


def _read(path: Path, mapping: UserMapping) -> RawLog:
    file = state_file(path)
    return raw_log_of_rows(load_rows(file), mapping, str(file))


def raw_log_of_rows(rows: list[Any], mapping: UserMapping, source: str) -> RawLog:
    """A log_history's rows, from a file or from a running trainer's state: training rows
    and evaluation rows apart; each row's step is transformers' `step` (else the episode,
    else the row's index) unless the user names another step column. TRL's PPO counts
    episodes: their increase per step is the batch size."""
    records, evaluation = [], []
    for index, row in enumerate(rows):
        if not isinstance(row, dict):
            raise LogFormatError(f"{source}: log_history entry {index + 1} is {type(row).__name__}, not an object")
        if not mapping.step_key and "step" not in row:
            row = {**row, "step": row.get("episode", index)}
        (evaluation if is_evaluation_row(row) else records).append(row)
    settings: dict[str, Any] = {}
    first = next((r for r in records if "episode" in r), None)
    step, episode = (first.get("step"), first.get("episode")) if first else (None, None)
    if type(step) in (int, float) and type(episode) in (int, float) and step > 0 and episode > 0:
        per_step = episode / step
        if per_step == int(per_step):
            settings["batch_size"] = int(per_step)
    return RawLog(records, settings=settings, eval_records=evaluation)


FORMAT = LogFormat(
    name="trainer_state",
    description="transformers/TRL trainer_state.json (its log_history), a saved log_history list, or an output "
                "directory holding one",
    reads=("transformers' `trainer_state.json` (its `log_history`), a saved `log_history` list, or an output directory "
           "(its newest `checkpoint-N/` when the top has none); recognised from its first kilobytes, so a truncated "
           "file is told where it breaks. `eval_*` rows are kept apart as `eval/...`; the end-of-training summary row "
           "is not a step"),
    recognise=_recognise,
    read=_read,
    dialects=trl.DIALECTS,
)
