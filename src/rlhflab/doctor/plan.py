"""An ablation plan for another trainer's log: the doctor's candidate fixes (doctor/arms.py),
one runnable command per fix and per seed, plus the control, in the trainer's own syntax;
then the one `rlhflab compare` that ranks them. rlhflab cannot rerun these trainers, but a
user can run the plan and hand the runs back.

Each launcher's facts (its flags or override keys, the seed and output keys, what it reads
as a bool) were read from the trainer's own source, named in its key list with the version.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from rlhflab.doctor.arms import MIN_SEEDS, CandidateFix, candidate_fixes, choose_seeds
from rlhflab.doctor.findings import Diagnosis
from rlhflab.doctor.formats import LAUNCHERS
from rlhflab.doctor.formats.launch import Launcher, Syntax
from rlhflab.doctor.table import MetricTable
from rlhflab.errors import InputError

CONTROL = "control"

LAUNCHERS_BY_DIALECT = {d: launcher for launcher in LAUNCHERS for d in launcher.dialects}


class PlanError(InputError):
    """A plan that cannot be written (said with what to do instead)."""


def _value_text(value, syntax: Syntax) -> str:
    if value is None:
        return "null" if syntax == "overrides" else "None"
    if isinstance(value, bool):
        return ("true" if value else "false") if syntax == "overrides" else str(value)
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _is_flag(token: str, key: str) -> bool:
    return token == f"--{key}" or token.startswith(f"--{key}=")


def given_value(tokens: list[str], launcher: Launcher, key: str) -> str | None:
    """The value `tokens` give `key` (a flag `--key value` or `--key=value`, an override
    `key=value`), or None."""
    for i, token in enumerate(tokens):
        if launcher.syntax == "overrides":
            name, sep, value = token.lstrip("+~").partition("=")
            if sep and name == key:
                return value
        elif token.startswith(f"--{key}="):
            return token.split("=", 1)[1]
        elif token == f"--{key}" and i + 1 < len(tokens):
            return tokens[i + 1]
    return None


def given_seed(tokens: list[str], launcher: Launcher) -> int:
    """The seed the user's command sets (0 where it sets none, or none readable as an integer)."""
    for key in launcher.seed_keys:
        value = given_value(tokens, launcher, key)
        if value is not None and value.lstrip("-").isdigit():
            return int(value)
    return 0


def set_key(tokens: list[str], launcher: Launcher, key: str, value) -> list[str]:
    """`tokens` with `key` set to `value`: replaced where the command already sets it, else
    appended (a flag `--key value`, an override `key=value`)."""
    if launcher.syntax == "overrides":
        text = f"{key}={_value_text(value, 'overrides')}"
        out = [text if t.lstrip("+~").split("=", 1)[0] == key else t for t in tokens]
        return out if text in out else out + [text]
    out: list[str] = []
    i = 0
    while i < len(tokens):  # drop every setting of the key, with its value when separate
        token = tokens[i]
        negated = launcher.bools == "negated" and token == f"--no-{key}"
        if _is_flag(token, key) or negated:
            separate = "=" not in token and not negated
            i += 2 if separate and i + 1 < len(tokens) and not tokens[i + 1].startswith("--") else 1
            continue
        out.append(token)
        i += 1
    if isinstance(value, bool) and launcher.bools != "value":
        if value:
            return out + [f"--{key}"]
        return out + [f"--no-{key}"] if launcher.bools == "negated" else out
    return out + [f"--{key}", _value_text(value, "flags")]


@dataclass
class PlannedRun:
    arm: str
    seed: int
    out: str
    command: str
    log: str  # what to give `rlhflab compare`


@dataclass
class AblationPlan:
    trainer: str  # the launcher's name
    seeds: list[int]
    seeds_why: str
    arms: dict[str, tuple[str, ...]]  # arm -> its changes in the command's keys (control: none)
    runs: list[PlannedRun]
    compare: str
    skipped: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"trainer": self.trainer, "seeds": self.seeds, "seeds_why": self.seeds_why,
                "arms": {k: list(v) for k, v in self.arms.items()},
                "runs": [vars(r) for r in self.runs], "compare": self.compare, "skipped": self.skipped,
                "notes": self.notes, "warnings": self.warnings}


def _arm_settings(launcher: Launcher, fix: CandidateFix, vocabulary: dict[str, str]) -> tuple[tuple[str, object], ...] | str:
    """The fix's changes as (command key, value), or why the launcher cannot set them."""
    settings = []
    for change in fix.changes:
        theirs = vocabulary.get(change.setting)
        keys = launcher.key_of(theirs) if theirs else None
        if not keys:
            if theirs:
                return f"{theirs} is not a setting of {launcher.name}'s launch command"
            return f"advice, no key of {launcher.name}'s sets it: {fix.why}"
        settings += [(k, change.value) for k in keys]
    return tuple(settings)


def arm_directory(settings: tuple[tuple[str, object], ...]) -> str:
    """A directory name that says the arm's changes, with no `=` or `,` that an override or a
    list in the trainer's own syntax would read (`kl_loss_coef-0.2+lr-1e-06`)."""
    return "+".join(f"{k.rsplit('.', 1)[-1]}-{_value_text(v, 'overrides')}" for k, v in settings).replace("/", "_")


def plan_for_log(table: MetricTable, diagnosis: Diagnosis, command: str | None = None, seeds: int | None = None,
                 top: int = 3, out: str = "ablation", maps: tuple[str, ...] = ()) -> AblationPlan:
    """The plan for a log's medium/high findings (module docstring). `maps` are the `--map`
    options the log was read with: the compare reads the planned runs the same way."""
    trainer = table.settings.trainer or ""
    launcher = LAUNCHERS_BY_DIALECT.get(trainer)
    if launcher is None:
        known = ", ".join(sorted(LAUNCHERS_BY_DIALECT))
        raise PlanError(f"{diagnosis.source}: the log's trainer is {trainer or 'not known'}; a plan is written for "
                        f"{known} (force the format with --format, or rerun with the fix yourself)")
    fixes, skipped = candidate_fixes(diagnosis, dict(table.vocabulary), top)
    arms: dict[str, tuple[tuple[str, object], ...]] = {CONTROL: ()}
    for fix in fixes:
        settings = _arm_settings(launcher, fix, dict(table.vocabulary))
        if isinstance(settings, str):
            named = all(c.setting in table.vocabulary for c in fix.changes)  # else in words: no key of ours
            skipped.append(f"{', '.join(fix.rendered)} ({fix.component}): {settings}" if named
                           else f"{fix.component}: {settings}")
            continue
        arms[arm_directory(settings)] = settings
    if len(arms) == 1:
        raise PlanError(f"{diagnosis.source}: nothing to ablate: no finding of medium or high severity has a setting "
                        f"to change ({'; '.join(skipped) or 'no finding'})")
    count, why, warnings = choose_seeds(table, seeds)
    base = shlex.split(command) if command else shlex.split(launcher.example)
    first = given_seed(base, launcher)
    seed_list = [first + k for k in range(count)]  # the user's seed first, the others after it
    if first:
        why += f"; seeds from the command's own seed {first} on"
    runs = []
    for arm, settings in arms.items():
        for seed in seed_list:
            run_out = str(PurePosixPath(out) / arm / f"seed{seed}")
            tokens = list(base)
            for key, value in (*settings, *launcher.fixed,
                               *((k, seed) for k in launcher.seed_keys),
                               *((k, template.format(out=run_out, name=f"{arm}-seed{seed}"))
                                 for k, template in launcher.output_keys)):
                tokens = set_key(tokens, launcher, key, value)
            text = shlex.join(tokens)
            if launcher.tee:
                text = f"mkdir -p {shlex.quote(run_out)} && {text} 2>&1 | tee {shlex.quote(run_out + '/console.log')}"
            runs.append(PlannedRun(arm, seed, run_out, text, launcher.log_of(run_out)))
    groups = [" ".join(shlex.quote(r.log) for r in runs if r.arm == arm) for arm in arms]
    # --rank: with one fix the plan still asks for a confirmed cure, not the two-sided verdict
    compare = "rlhflab compare --rank " + "".join(f"--map {shlex.quote(m)} " for m in maps) + " -- ".join(groups)
    seeds_why = why if count >= MIN_SEEDS else why + f" (fewer than {MIN_SEEDS}: no cure can be confirmed)"
    notes = list(launcher.notes)
    if launcher.tee:
        notes.append("compare reads each run's console.log; where the trainer writes its metrics elsewhere (W&B "
                     "offline, TensorBoard, MLflow), give those files to compare instead")
    if command is None:
        notes.append(f"the commands start from {launcher.name}'s usual launch: give yours with --command, and a key it "
                     "already sets is replaced")
    return AblationPlan(launcher.name, seed_list, seeds_why,
                        {arm: tuple(f"{k}={_value_text(v, launcher.syntax)}" for k, v in s) for arm, s in arms.items()},
                        runs, compare, skipped, notes, warnings)


def planned_settings(launcher: Launcher, plan: AblationPlan, arm: str, seed: int) -> list[tuple[str, str]]:
    """(key, value text) of every setting the plan gives one run: its fix, the settings every
    run needs, its seed and its directories."""
    run = next(r for r in plan.runs if r.arm == arm and r.seed == seed)
    settings = [tuple(c.split("=", 1)) for c in plan.arms[arm]]
    settings += [(k, v) for k, v in launcher.fixed] + [(k, str(seed)) for k in launcher.seed_keys]
    settings += [(k, t.format(out=run.out, name=f"{arm}-seed{seed}")) for k, t in launcher.output_keys]
    return settings


def missing_from_key_list(launcher: Launcher, plan: AblationPlan) -> list[str]:
    """Every key the plan sets that the trainer's key list lacks."""
    keys = {k for arm in plan.arms for k, _ in planned_settings(launcher, plan, arm, plan.seeds[0])}
    return sorted(k for k in keys if k not in launcher.keys.keys)
