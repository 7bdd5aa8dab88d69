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
from typing import Callable, Literal

from rlhflab.doctor.arms import MIN_SEEDS, CandidateFix, candidate_fixes, choose_seeds
from rlhflab.doctor.findings import Diagnosis
from rlhflab.doctor.table import MetricTable

Syntax = Literal["flags", "overrides"]
BoolStyle = Literal["value", "bare", "negated"]  # --flag True | --flag (absent when false) | --flag / --no-flag
CONTROL = "control"


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


def _class_fields(*classes: str) -> Callable[[str], tuple[str, ...] | None]:
    """`PPOConfig.kl_coef` -> `kl_coef` for a script that parses these config classes."""
    def key_of(key: str) -> tuple[str, ...] | None:
        owner, _, name = key.partition(".")
        return (name,) if owner in classes and name else None
    return key_of


def _dotted(key: str) -> tuple[str, ...] | None:
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


def _kebab(key: str) -> tuple[str, ...] | None:
    keys = _dotted(key)
    return tuple(k.replace("_", "-") for k in keys) if keys else None


TRL_PPO_KEYS = KeyList(
    "TRL 1.12.0 (trl.experimental.ppo; PPO is gone from TRL after 1.12)",
    "trl/experimental/ppo/ppo_config.py, examples/scripts/ppo/ppo.py (HfArgumentParser over ScriptArguments, "
    "PPOConfig, ModelConfig)",
    frozenset({"kl_coef", "kl_estimator", "cliprange", "cliprange_value", "learning_rate", "response_length",
               "missing_eos_penalty", "per_device_train_batch_size", "seed", "output_dir", "vf_coef", "gamma", "lam",
               "num_ppo_epochs", "num_mini_batches", "whiten_rewards", "temperature", "stop_token"}))
TRL_GRPO_KEYS = KeyList(
    "TRL 1.12.0-1.16.0",
    "trl/trainer/grpo_config.py, trl/scripts/grpo.py (`trl grpo`: HfArgumentParser over GRPOScriptArguments, "
    "GRPOConfig, ModelConfig)",
    frozenset({"beta", "epsilon", "learning_rate", "max_completion_length", "num_generations",
               "per_device_train_batch_size", "vllm_importance_sampling_correction", "seed", "output_dir",
               "temperature", "loss_type", "scale_rewards", "num_iterations"}))
VERL_KEYS = KeyList(
    "veRL 0.9.1",
    "verl/trainer/config/ppo_trainer.yaml and its defaults (@hydra.main(config_path='config', "
    "config_name='ppo_trainer') in verl/trainer/main_ppo.py)",
    frozenset({"algorithm.kl_ctrl.kl_coef", "algorithm.kl_penalty", "algorithm.kl_ctrl.target_kl",
               "algorithm.kl_ctrl.horizon", "actor_rollout_ref.actor.clip_ratio", "actor_rollout_ref.actor.optim.lr",
               "actor_rollout_ref.actor.entropy_coeff", "data.max_response_length", "data.train_batch_size",
               "actor_rollout_ref.rollout.n", "critic.cliprange_value", "actor_rollout_ref.actor.kl_loss_coef",
               "actor_rollout_ref.actor.kl_loss_type", "algorithm.rollout_correction.rollout_is", "data.seed",
               "actor_rollout_ref.actor.data_loader_seed", "critic.data_loader_seed", "trainer.default_local_dir",
               "trainer.experiment_name", "trainer.logger"}))
OPENRLHF_KEYS = KeyList(
    "OpenRLHF 0.10.2-0.11.2 (dotted flags since 0.10.2, commit ed62d0e2, with no aliases for the flat ones)",
    "openrlhf/cli/train_ppo_ray.py",
    frozenset({"algo.kl.init_coef", "algo.kl.target", "algo.kl.horizon", "algo.kl.estimator", "actor.eps_clip",
               "critic.value_clip", "actor.adam.lr", "actor.entropy_coef", "rollout.max_new_tokens",
               "rollout.n_samples_per_prompt", "rollout.batch_size", "train.seed", "ckpt.output_dir", "ckpt.path"}))
NEMO_RL_KEYS = KeyList(
    "NeMo-RL 0.6",
    "examples/configs/grpo_math_1B.yaml, examples/run_grpo.py (Hydra-style overrides after --config)",
    frozenset({"loss_fn.reference_policy_kl_penalty", "loss_fn.reference_policy_kl_type", "loss_fn.ratio_clip_min",
               "loss_fn.ratio_clip_max", "policy.optimizer.kwargs.lr", "policy.generation.max_new_tokens",
               "grpo.num_generations_per_prompt", "grpo.num_prompts_per_step",
               "loss_fn.use_importance_sampling_correction", "grpo.seed", "logger.log_dir",
               "checkpointing.checkpoint_dir"}))
PRIME_RL_KEYS = KeyList(
    "prime-rl (main, 2026)",
    "src/prime_rl/rl.py and its pydantic configs (prime-pydantic-config: dotted kebab-case flags)",
    frozenset({"trainer.optim.lr", "orchestrator.group-size", "orchestrator.batch-size", "output-dir", "run.name",
               "inference.vllm.seed", "orchestrator.train.sampling.max-completion-tokens"}))

LAUNCHERS: tuple[Launcher, ...] = (
    Launcher("trl-ppo", ("trl-ppo",), "flags",
             "accelerate launch examples/scripts/ppo/ppo.py --model_name_or_path ... --sft_model_path ... "
             "--reward_model_path ... --dataset_name ...",
             _class_fields("PPOConfig"), ("seed",), (("output_dir", "{out}"),), TRL_PPO_KEYS, tee=False,
             notes=("needs TRL <= 1.12 (trl.experimental.ppo); the script deletes its --output_dir when it starts, so "
                    "each run has its own",)),
    Launcher("trl-grpo", ("trl-grpo",), "flags", "trl grpo --model_name_or_path ... --dataset_name ...",
             _class_fields("GRPOConfig"), ("seed",), (("output_dir", "{out}"),), TRL_GRPO_KEYS, tee=False),
    Launcher("verl", ("verl",), "overrides", "python3 -m verl.trainer.main_ppo data.train_files=... "
             "actor_rollout_ref.model.path=...",
             _dotted, ("data.seed", "actor_rollout_ref.actor.data_loader_seed", "critic.data_loader_seed"),
             (("trainer.default_local_dir", "{out}"), ("trainer.experiment_name", "{name}")), VERL_KEYS,
             fixed=(("trainer.logger", "[console]"),),
             notes=("trainer.resume_mode is auto: a run resumes what it finds in trainer.default_local_dir, so each "
                    "run has its own",
                    "trainer.logger=[console]: the doctor reads each run's console; list your other loggers beside it "
                    "([console,wandb]) to keep them")),
    Launcher("openrlhf", ("openrlhf",), "flags", "python3 -m openrlhf.cli.train_ppo_ray --actor.pretrain ... "
             "--reward.pretrain ... --data.prompt_data ...",
             _dotted, ("train.seed",), (("ckpt.output_dir", "{out}"), ("ckpt.path", "{out}/ckpt")), OPENRLHF_KEYS,
             bools="bare",
             notes=("dotted flags are OpenRLHF >= 0.10.2's; before it the same settings are flat "
                    "(--init_kl_coef, --actor_learning_rate, --seed, --save_path)",)),
    Launcher("nemo-rl", ("nemo-rl",), "overrides", "uv run python examples/run_grpo.py --config ...",
             _dotted, ("grpo.seed",), (("logger.log_dir", "{out}"), ("checkpointing.checkpoint_dir", "{out}/ckpt")),
             NEMO_RL_KEYS,
             notes=("grpo.seed seeds the trainer, not vLLM's sampler; runs resume from checkpointing.checkpoint_dir, "
                    "so each run has its own",)),
    Launcher("prime-rl", ("prime-rl",), "flags", "uv run rl @ ...toml", _kebab, ("inference.vllm.seed",),
             (("output-dir", "{out}"),), PRIME_RL_KEYS, bools="negated",
             notes=("prime-rl has no trainer seed: the seeds vary the sampler (inference.vllm.seed) only, its data "
                    "order is fixed",)),
)
LAUNCHERS_BY_DIALECT = {d: launcher for launcher in LAUNCHERS for d in launcher.dialects}


class PlanError(ValueError):
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
            return f"{theirs or change.setting} is not a setting of {launcher.name}'s launch command"
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
            skipped.append(f"{', '.join(fix.rendered)} ({fix.component}): {settings}")
            continue
        arms[arm_directory(settings)] = settings
    if len(arms) == 1:
        raise PlanError(f"{diagnosis.source}: nothing to ablate: no finding of medium or high severity has a setting "
                        f"to change ({'; '.join(skipped) or 'no finding'})")
    count, why, warnings = choose_seeds(table, seeds)
    base = shlex.split(command) if command else shlex.split(launcher.example)
    runs = []
    for arm, settings in arms.items():
        for seed in range(count):
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
    return AblationPlan(launcher.name, list(range(count)), seeds_why,
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
    keys = {k for arm in plan.arms for k, _ in planned_settings(launcher, plan, arm, 0)}
    return sorted(k for k in keys if k not in launcher.keys.keys)
