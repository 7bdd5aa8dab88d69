"""`--map`: the user's names -> canonical names, as `THEIRS=canonical` pairs or a TOML file.

    rlhflab doctor log.csv --map my_kl=kl/mean --map iter=step
    rlhflab doctor log.csv --map columns.toml
    rlhflab doctor log.csv --samples gens.jsonl --map text=sample/response --map score=sample/reward

where columns.toml holds, one line per column, a canonical name or a table with its
unit and a factor:

    iter = "step"
    my_kl = "kl/mean"
    "actor/entropy_sum" = { metric = "policy/entropy", unit = "nats/sequence" }
    "actor/lr(1e-4)" = { metric = "lr", scale = 1e-4 }
"""

from __future__ import annotations

from pathlib import Path

import tomllib

from rlhflab.doctor.formats.spec import Column, LogFormatError, UserMapping
from rlhflab.doctor.metrics import KNOWN
from rlhflab.doctor.samples import FIELDS as SAMPLE_FIELDS
from rlhflab.doctor.samples import SAMPLE_PREFIX
from rlhflab.doctor.units import UnitError, check_unit

STEP = "step"


def _target(theirs: str, metric: str, where: str) -> str:
    if metric.startswith(SAMPLE_PREFIX):
        if metric.removeprefix(SAMPLE_PREFIX) not in SAMPLE_FIELDS:
            raise LogFormatError(f"{where}: {theirs} -> {metric!r}: a sample file's fields are "
                                 + ", ".join(SAMPLE_PREFIX + f for f in SAMPLE_FIELDS))
        return metric
    if metric != STEP and metric not in KNOWN:
        raise LogFormatError(f"{where}: {theirs} -> {metric!r} is not a canonical metric name (docs/metrics.md), "
                             f"'step', or a sample field ({SAMPLE_PREFIX}response, ...)")
    return metric


def parse_pairs(items: list[str]) -> UserMapping:
    """`THEIRS=canonical` pairs; `THEIRS=step` names the step column."""
    columns: dict[str, Column] = {}
    samples: dict[str, str] = {}
    step_key = None
    for item in items:
        if "=" not in item:
            raise LogFormatError(f"--map {item!r}: expected THEIR_NAME=canonical/name, or a .toml file")
        theirs, ours = (part.strip() for part in item.rsplit("=", 1))
        target = _target(theirs, ours, f"--map {item}")
        if target == STEP:
            step_key = theirs
        elif target.startswith(SAMPLE_PREFIX):
            samples[theirs] = target.removeprefix(SAMPLE_PREFIX)
        else:
            columns[theirs] = Column(ours)
    return UserMapping(columns, step_key, samples)


def read_mapping_file(path: Path) -> UserMapping:
    """A TOML mapping file (module docstring); errors name the file and the key."""
    path = Path(path)
    if not path.is_file():
        raise LogFormatError(f"{path}: mapping file not found")
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        raise LogFormatError(f"{path}: invalid TOML mapping: {err}") from None
    columns: dict[str, Column] = {}
    samples: dict[str, str] = {}
    step_key = None
    for theirs, spec in data.items():
        where = f"{path}: {theirs}"
        if isinstance(spec, str):
            spec = {"metric": spec}
        if not isinstance(spec, dict) or not isinstance(spec.get("metric"), str):
            raise LogFormatError(f"{where}: expected a canonical name or {{ metric = ..., unit = ..., scale = ... }}")
        unknown = set(spec) - {"metric", "unit", "scale"}
        if unknown:
            raise LogFormatError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}; expected metric, unit, scale")
        target = _target(theirs, spec["metric"], where)
        if target == STEP:
            step_key = theirs
            continue
        if target.startswith(SAMPLE_PREFIX):
            samples[theirs] = target.removeprefix(SAMPLE_PREFIX)
            continue
        try:
            unit = check_unit(spec["unit"], where) if "unit" in spec else None
        except UnitError as err:
            raise LogFormatError(str(err)) from None
        scale = spec.get("scale", 1.0)
        if isinstance(scale, bool) or not isinstance(scale, (int, float)):
            raise LogFormatError(f"{where}: scale = {scale!r} is not a number")
        columns[theirs] = Column(spec["metric"], unit, float(scale))
    return UserMapping(columns, step_key, samples)


def parse_map_options(items: list[str] | None) -> UserMapping:
    """Every `--map` value: TOML files and pairs together, later ones winning."""
    columns: dict[str, Column] = {}
    samples: dict[str, str] = {}
    step_key = None
    for item in items or []:
        mapping = read_mapping_file(Path(item)) if item.endswith(".toml") else parse_pairs([item])
        columns.update(mapping.columns)
        samples.update(mapping.sample_columns)
        step_key = mapping.step_key or step_key
    return UserMapping(columns, step_key, samples)
