"""How a trainer is launched, as far as an ablation plan for its log needs (doctor/plan.py):
the syntax of its settings, the keys that give each run its own seed and directory, and the
keys its command accepts, read from the trainer's own source (named with the version).
Each trainer declares its `Launcher` in its format module, beside its metric names."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Literal

Syntax = Literal["flags", "overrides"]
BoolStyle = Literal["value", "bare", "negated"]  # --flag True | --flag (absent when false) | --flag / --no-flag


@dataclass(frozen=True)
class KeyList:
    """The keys a trainer's launch command accepts, as far as a plan sets them."""

    version: str
    source: str  # the file(s) they were read from
    keys: frozenset[str]


@dataclass(frozen=True)
class Launcher:
    """How one trainer is launched: the syntax of its settings, and the keys that give each
    run its own seed and directory."""

    name: str
    dialects: tuple[str, ...]  # the doctor's dialects whose logs it launches
    syntax: Syntax
    example: str  # the launch command when the user gives none (their own arguments left as ...)
    key_of: Callable[[str], tuple[str, ...] | None]  # the dialect's key -> the command's keys (None: not here)
    seed_keys: tuple[str, ...]
    output_keys: tuple[tuple[str, str], ...]  # key -> value template ({out}: the run's directory)
    keys: KeyList
    fixed: tuple[tuple[str, str], ...] = ()  # settings every planned run needs
    tee: bool = True  # the doctor reads the run's console, kept in {out}/console.log
    bools: BoolStyle = "value"
    notes: tuple[str, ...] = ()  # what the user must know to run the plan

    def log_of(self, out: str) -> str:
        return f"{out}/console.log" if self.tee else out


def class_fields(*classes: str) -> Callable[[str], tuple[str, ...] | None]:
    """`PPOConfig.kl_coef` -> `kl_coef` for a script that parses these config classes."""
    def key_of(key: str) -> tuple[str, ...] | None:
        owner, _, name = key.partition(".")
        return (name,) if owner in classes and name else None
    return key_of


def dotted(key: str) -> tuple[str, ...] | None:
    """A key that is already the command's (`algorithm.kl_ctrl.kl_coef`, `--actor.eps_clip`);
    `a.b/c` is two keys with one value (NeMo-RL's `loss_fn.ratio_clip_min/ratio_clip_max`)."""
    key = key.removeprefix("--")
    if " " in key:
        return None
    head, _, tail = key.partition("/")
    if not tail:
        return (head,)
    prefix = head.rsplit(".", 1)[0]
    return (head, f"{prefix}.{tail}")


def kebab(key: str) -> tuple[str, ...] | None:
    keys = dotted(key)
    return tuple(k.replace("_", "-") for k in keys) if keys else None


