"""Readers: logs of rlhflab runs and of other trainers, mapped to the canonical names.

Every name a reader cannot map is kept in `MetricTable.unknown`, and the doctor lists
the detectors it could not run for lack of a metric; nothing is guessed silently.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

from rlhflab.doctor.names import KNOWN, TRL_IGNORED, TRL_KNOWN, TRL_PPO_NAMES
from rlhflab.doctor.table import MetricTable
from rlhflab.runs import RunDir, read_jsonl


class LogFormatError(ValueError):
    """A log file is not in the format its reader expects."""


def read_run(path: Path) -> MetricTable:
    """An rlhflab run directory: PPO metrics per iteration, RM and LM metrics, config, RM range."""
    run = RunDir(Path(path))
    if not run.metrics("ppo").is_file():
        raise LogFormatError(f"{run.metrics('ppo')}: not found; is {path} an rlhflab run directory?")
    table = MetricTable.from_records(read_jsonl(run.metrics("ppo")), source=str(path))
    for stage in ("reward", "pretrain"):
        if run.metrics(stage).is_file():
            table = table.merge(MetricTable.from_records(read_jsonl(run.metrics(stage))))
    table.unknown = sorted(k for k in table.series if k not in KNOWN)
    if run.config.is_file():
        from rlhflab.config import config_from_run

        table.meta["config"] = config_from_run(run.root)
    rm_config = run.stage2_rm / "config.json"
    if rm_config.is_file():
        limit = proxy_train_max(json.loads(rm_config.read_text()))
        if limit is not None:
            table.meta["proxy_train_max"] = limit
    return table


def proxy_train_max(rm_config: dict) -> float | None:
    """The highest standardised score the RM gave on its training data (None if not saved)."""
    if not {"reward_mean", "reward_std", "reward_max"} <= rm_config.keys():
        return None
    return (rm_config["reward_max"] - rm_config["reward_mean"]) / max(rm_config["reward_std"], 1e-6)


def read_trl_state(path: Path) -> MetricTable:
    """TRL's `trainer_state.json`: its `log_history`, TRL PPO names mapped to ours."""
    try:
        state = json.loads(Path(path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise LogFormatError(f"{path}:{err.lineno}: invalid JSON ({err.msg})") from None
    if not isinstance(state, dict) or not isinstance(state.get("log_history"), list):
        raise LogFormatError(f"{path}: expected a trainer_state.json with a 'log_history' list")
    records = []
    for index, entry in enumerate(state["log_history"]):
        step = entry.get("step", entry.get("episode", index))
        records.append({"step": step, **{k: v for k, v in entry.items() if k not in TRL_IGNORED}})
    table = MetricTable.from_records(records, source=str(path), rename=TRL_PPO_NAMES)
    _fill_entropy(table)
    table.unknown = sorted(k for k in table.series if k not in TRL_KNOWN and k not in KNOWN)
    return table


def read_tensorboard(path: Path) -> MetricTable:
    """Scalars of TensorBoard event files under `path` (a `train/` tag prefix is dropped)."""
    try:
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    except ImportError as err:  # pragma: no cover - tensorboard is a dependency
        raise LogFormatError("reading TensorBoard logs needs the tensorboard package") from err
    files = [Path(path)] if Path(path).is_file() else sorted(Path(path).rglob("events.out.tfevents.*"))
    if not files:
        raise LogFormatError(f"{path}: no TensorBoard event files (events.out.tfevents.*) found")
    records: dict[int, dict] = {}
    for file in files:
        accumulator = EventAccumulator(str(file), size_guidance={"scalars": 0})
        accumulator.Reload()
        for tag in accumulator.Tags().get("scalars", []):
            name = tag.removeprefix("train/")
            name = TRL_PPO_NAMES.get(name, name)
            for event in accumulator.Scalars(tag):
                records.setdefault(event.step, {"step": event.step})[name] = event.value
    table = MetricTable.from_records([records[s] for s in sorted(records)], source=str(path))
    _fill_entropy(table)
    table.unknown = sorted(k for k in table.series if k not in KNOWN and k not in TRL_KNOWN)
    return table


def read_table_file(path: Path, mapping: dict[str, str] | None = None, step_key: str = "step") -> MetricTable:
    """CSV or JSONL with one row per step; `mapping` renames the user's columns to ours."""
    path = Path(path)
    mapping = mapping or {}
    if path.suffix == ".csv":
        with path.open(encoding="utf-8", newline="") as handle:
            rows = list(csv.DictReader(handle))
        if not rows:
            raise LogFormatError(f"{path}: no rows")
        if step_key not in rows[0] and mapping.get(step_key) is None:
            raise LogFormatError(f"{path}:1: no '{step_key}' column (columns: {', '.join(rows[0])})")
        records = []
        for number, row in enumerate(rows, start=2):
            record = {}
            for key, value in row.items():
                if value in ("", None):
                    continue
                try:
                    record[key] = float(value) if key != step_key else int(float(value))
                except ValueError:
                    if key == step_key:
                        raise LogFormatError(f"{path}:{number}: step {value!r} is not a number") from None
            records.append(record)
    else:
        try:
            records = read_jsonl(path)
        except ValueError as err:
            raise LogFormatError(str(err)) from None
    table = MetricTable.from_records(records, source=str(path), rename=mapping, step_key=step_key)
    _fill_entropy(table)
    table.unknown = sorted(k for k in table.series if k not in KNOWN and k not in TRL_KNOWN)
    return table


def _fill_entropy(table: MetricTable) -> None:
    """Without a per-token entropy, use the per-sequence one: rules compare entropy to itself."""
    if table.get("policy/entropy") is None and table.get("policy/sequence_entropy") is not None:
        table.series["policy/entropy"] = table.series["policy/sequence_entropy"]


def read_log(path: Path, mapping: dict[str, str] | None = None) -> MetricTable:
    """Dispatch on what `path` is: a run directory, trainer_state.json, TensorBoard, CSV/JSONL."""
    path = Path(path)
    if not path.exists():
        raise LogFormatError(f"{path}: no such file or directory")
    if path.is_dir():
        if (path / "metrics" / "ppo.jsonl").is_file():
            return read_run(path)
        if (path / "trainer_state.json").is_file():
            return read_trl_state(path / "trainer_state.json")
        return read_tensorboard(path)
    if path.name == "trainer_state.json" or (path.suffix == ".json" and _looks_like_trl(path)):
        return read_trl_state(path)
    if path.name.startswith("events.out.tfevents"):
        return read_tensorboard(path)
    if path.suffix in (".csv", ".jsonl"):
        return read_table_file(path, mapping)
    raise LogFormatError(f"{path}: unknown log format (expected a run directory, trainer_state.json, "
                         "TensorBoard events, .csv or .jsonl)")


def _looks_like_trl(path: Path) -> bool:
    try:
        return "log_history" in json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError):
        return False
