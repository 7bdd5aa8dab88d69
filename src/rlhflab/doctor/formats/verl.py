"""veRL (volcengine/verl): its metric names in both generations, its console lines and
its JSONL file logger.

- Console (`verl/utils/logger/aggregate_logger.py`, `concat_dict_to_str`): one line per
  step, `step:N - key:value - key:value ...`, values as `{v:.3f}` (early) or their repr
  (later); under Ray each line starts with the actor's tag, `(main_task pid=...)` or
  `(TaskRunner pid=...)`, wrapped in ANSI colour codes.
- File logger (`verl/utils/tracking.py`, `FileLogger`): one JSON object per log call,
  `{"step": N, "data": {key: value, ...}}`; a step can span several lines.

Names (`verl/trainer/ppo/metric_utils.py`, `ray_trainer.py`, `workers/actor/dp_actor.py`):
KL to the reference in the reward is `critic/kl` (early) or `actor/reward_kl_penalty`,
a per-token mean within each response, then over responses, of `algorithm.kl_penalty`
(default `kl`, k1); as a loss it is `actor/kl_loss`, a token mean of
`actor.kl_loss_type` (default `low_var_kl`, k3). `actor/ppo_kl` is the k1 KL between the
old and the current policy (approx-KL), never KL to the reference. Entropy is
`actor/entropy_loss` (early) or `actor/entropy`, per token. `actor/lr(1e-4)` is the
learning rate in units of 1e-4.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping

from rlhflab.doctor.formats.launch import KeyList, Launcher, dotted
from rlhflab.doctor.formats.runs import run_starts
from rlhflab.doctor.formats.spec import Column, Dialect, LogFormat, LogFormatError, RawLog, UserMapping
from rlhflab.doctor.formats.text import json_objects, open_text, plain
from rlhflab.doctor.samples import Sample, SampleFormat, SampleSet, Split, first_keys, read_rows, samples_of_rows
from rlhflab.doctor.table import MetricTable

COLUMNS = {
    "critic/kl": Column("kl/token_mean", estimator="k1"),
    "actor/reward_kl_penalty": Column("kl/token_mean", estimator="k1"),
    "actor/kl_loss": Column("kl/token_mean", estimator="k3", fallback=True),
    "critic/kl_coeff": Column("kl/coef"),
    "actor/reward_kl_penalty_coeff": Column("kl/coef"),
    "actor/kl_coef": Column("kl/coef", fallback=True),
    "actor/entropy_loss": Column("policy/entropy"),
    "actor/entropy": Column("policy/entropy"),
    "actor/pg_loss": Column("policy/loss"),
    "actor/pg_clipfrac": Column("policy/clipfrac"),
    "actor/ppo_kl": Column("policy/approxkl", estimator="k1"),
    "actor/grad_norm": Column("policy/grad_norm"),
    "actor/lr": Column("lr"),
    "actor/lr(1e-4)": Column("lr", scale=1e-4),
    "critic/score/mean": Column("reward/proxy_mean"),  # the reward function's score per response
    "critic/rewards/mean": Column("reward/total_mean"),  # the score minus the in-reward KL penalty
    "critic/advantages/mean": Column("adv/mean"),
    "critic/vf_loss": Column("value/loss"),
    "critic/vf_clipfrac": Column("value/clipfrac"),
    "critic/vf_explained_var": Column("value/explained_variance"),
    "response_length/mean": Column("response/length_mean"),
    "response_length/clip_ratio": Column("response/truncated_frac"),
    # The rollout engine against the trainer (verl/utils/debug/metrics.py: |exp(old logp) - exp(rollout logp)|,
    # a probability; verl/trainer/ppo/rollout_corr_helper.py, `mismatch/` before v0.6.1).
    "training/rollout_probs_diff_mean": Column("mismatch/prob_abs_diff"),
    "rollout_corr/kl": Column("mismatch/kl", estimator="k1"),
    "mismatch/mismatch_kl": Column("mismatch/kl", estimator="k1", fallback=True),
    "rollout_corr/rollout_is_mean": Column("mismatch/is_ratio_mean"),
    "mismatch/rollout_is_mean": Column("mismatch/is_ratio_mean", fallback=True),
}
# Validation scores on the held-out test sets: the run's truth where it has one.
VALIDATION = re.compile(r"^(val/test_score/.+|val-core/.+/(acc|reward)/mean@\d+)$")
IGNORED = frozenset({
    "timing/*", "timing_s/*", "timing_per_token_ms/*", "perf/*", "mfu/*", "global_seqlen/*", "prompt_length/*",
    "training/*", "*/max", "*/min", "critic/lr(1e-4)", "critic/lr", "critic/grad_norm", "critic/vpred_mean",
    "critic/values/mean", "critic/returns/mean", "actor/pg_clipfrac_lower", "actor/loss", "val-aux/*",
    "response_length/clip_ratio_non_aborted", "response/aborted_ratio", "critic/score/std",
})
VOCABULARY = {
    "kl_coef": "algorithm.kl_ctrl.kl_coef", "kl_estimator": "algorithm.kl_penalty",
    "kl_target": "algorithm.kl_ctrl.target_kl", "kl_horizon": "algorithm.kl_ctrl.horizon",
    "clip_eps": "actor_rollout_ref.actor.clip_ratio", "lr": "actor_rollout_ref.actor.optim.lr",
    "entropy_coef": "actor_rollout_ref.actor.entropy_coeff", "response_length": "data.max_response_length",
    "batch_size": "data.train_batch_size", "group_size": "actor_rollout_ref.rollout.n",
    "value_clip_eps": "critic.cliprange_value", "importance_sampling_correction": "algorithm.rollout_correction.rollout_is=token",
}
KL_LOSS_VOCABULARY = {"kl_coef": "actor_rollout_ref.actor.kl_loss_coef",
                      "kl_estimator": "actor_rollout_ref.actor.kl_loss_type"}


def _interpret(table: MetricTable, names: frozenset[str]) -> None:
    """A run whose KL is a loss term (`actor/kl_loss`, GRPO's usual setting) is fixed with
    `actor.kl_loss_coef`, not the in-reward controller's coefficient; the first logged
    coefficient is the run's beta."""
    if "actor/kl_loss" in names and not {"critic/kl", "actor/reward_kl_penalty"} & names:
        table.settings = replace(table.settings, kl_in_reward=False)
        table.vocabulary.update(KL_LOSS_VOCABULARY)
        table.notes.append("KL to the reference is a loss term here (actor/kl_loss; k3 assumed, veRL's default "
                           "kl_loss_type low_var_kl)")
    elif {"critic/kl", "actor/reward_kl_penalty"} & names:
        table.settings = replace(table.settings, kl_in_reward=True)
        table.notes.append("KL to the reference is in the reward (k1 assumed, veRL's default algorithm.kl_penalty)")
    coef = table.get("kl/coef")
    if coef is not None and table.settings.kl_coef is None:
        table.settings = replace(table.settings, kl_coef=coef.values[0])


DIALECT = Dialect(
    name="verl",
    description="veRL PPO/GRPO (critic/*, actor/*, response_length/*, val/test_score/*)",
    handles=("KL per token (k1 in the reward, k3 as a loss); `lr(1e-4)` scaled; the first validation score is the truth"
             " (`reward/gold_mean`)"),
    columns=COLUMNS,
    markers=frozenset({"critic/kl", "critic/kl_coeff", "actor/entropy_loss", "actor/pg_loss", "actor/pg_clipfrac",
                       "actor/ppo_kl", "critic/score/mean", "critic/rewards/mean", "response_length/mean",
                       "actor/reward_kl_penalty", "actor/kl_loss", "response_length/clip_ratio", "actor/lr(1e-4)",
                       "training/rollout_probs_diff_mean", "rollout_corr/kl", "rollout_corr/k3_kl"}),
    ignored=IGNORED,
    vocabulary=VOCABULARY,
    held_out=(VALIDATION,),
    interpret=_interpret,
)

# --- console lines ------------------------------------------------------------------------
_STEP_LINE = re.compile(r"(?:^|\s|\))step:(\d+) - ")
_NUMPY_SCALAR = re.compile(r"^np\.(?:float|int)\d*\((.*)\)$")
_CONFIG_START = re.compile(r"^\{'(actor_rollout_ref|algorithm|data|critic|trainer)'")
_RAY_TAG = re.compile(r"^\([^)]*pid=\d+[^)]*\)\s?")


def _value(text: str) -> float | None:
    text = text.strip()
    match = _NUMPY_SCALAR.match(text)
    if match:
        text = match.group(1)
    if text in ("True", "False"):
        return None
    try:
        return float(text)
    except ValueError:
        return None


def parse_step_line(line: str) -> dict[str, Any] | None:
    """`step:N - key:value - ...` as {"step": N, key: value}; non-numeric values are skipped."""
    match = _STEP_LINE.search(line)
    if match is None:
        return None
    record: dict[str, Any] = {"step": int(match.group(1))}
    for item in line[match.end():].split(" - "):
        key, sep, value = item.rpartition(":")
        number = _value(value) if sep else None
        if key and number is not None:
            record[key.strip()] = number
    return record


def settings_from_config(config: dict) -> dict[str, Any]:
    """RunSettings fields from the config veRL prints at start (a nested dict)."""

    def get(*keys):
        node: Any = config
        for key in keys:
            if not isinstance(node, dict) or key not in node:
                return None
            node = node[key]
        return node

    if get("actor_rollout_ref", "actor", "use_kl_loss"):
        kl_coef = get("actor_rollout_ref", "actor", "kl_loss_coef")
    else:
        kl_coef = get("algorithm", "kl_ctrl", "kl_coef")
    settings = {
        "kl_coef": kl_coef,
        "clip_eps": get("actor_rollout_ref", "actor", "clip_ratio"),
        "entropy_coef": get("actor_rollout_ref", "actor", "entropy_coeff"),
        "lr": get("actor_rollout_ref", "actor", "optim", "lr"),
        "response_length": get("data", "max_response_length"),
        "batch_size": get("data", "train_batch_size"),
        "group_size": get("actor_rollout_ref", "rollout", "n"),
    }
    kinds = {"kl_coef": float, "clip_eps": float, "entropy_coef": float, "lr": float, "response_length": int,
             "batch_size": int, "group_size": int}
    read = {k: kinds[k](v) for k, v in settings.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    controller = get("algorithm", "kl_ctrl", "type")  # `fixed` or `adaptive` (veRL's core_algos.get_kl_controller)
    if controller in ("fixed", "adaptive") and not get("actor_rollout_ref", "actor", "use_kl_loss"):
        read["kl_controller"] = controller
    return read


def _read_console(path: Path, mapping: UserMapping) -> RawLog:
    """Every `step:N - ...` line (anywhere in a console capture) and the config the driver
    prints at start (its continuation lines are those with the same Ray tag, up to the
    first step line: a config whose braces never balance, cut or holding a template's
    braces in a string, must not swallow the steps). A config printed again before a step
    counter that started over begins another run (formats/runs.py), with its own settings."""
    records: list[dict[str, Any]] = []
    configs: list[tuple[int, dict[str, Any]]] = []  # (records before it, its settings)
    config_lines: list[str] | None = None
    config_tag = ""
    with open_text(path) as handle:
        for raw in handle:
            bare = plain(raw.rstrip("\n"))
            tag_match = _RAY_TAG.match(bare)
            tag = tag_match.group(0) if tag_match else ""
            line = bare[len(tag):]
            if config_lines is not None and tag == config_tag and parse_step_line(line) is not None:
                config_lines = None  # a step line ends a printed config whose braces never balanced
            if config_lines is None and _CONFIG_START.match(line):
                config_lines, config_tag = [], tag
            if config_lines is not None and tag == config_tag:
                config_lines.append(line)
                text = "\n".join(config_lines)
                if text.count("{") <= text.count("}"):  # a config printed on one line ends here too
                    configs.append((len(records), _parse_config(text)))
                    config_lines = None
                elif len(config_lines) > 2000:
                    config_lines = None
                continue
            record = parse_step_line(line)
            if record is not None:
                records.append(record)
    starts = run_starts([r["step"] for r in records], {at for at, _ in configs})
    run_settings = [next((found for at, found in reversed(configs) if at <= start and found), {})
                    for start in [0, *starts]]
    settings = run_settings[-1] if starts else next((found for _, found in configs if found), {})
    notes = [] if settings else ["no printed config found: the run's settings (beta, clip, lr) are unknown"]
    return RawLog(records, settings=settings, notes=notes, dialect=DIALECT.name, run_starts=starts,
                  run_settings=run_settings if starts else [])


def _parse_config(text: str) -> dict[str, Any]:
    try:
        config = ast.literal_eval(text.strip())
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return {}
    return settings_from_config(config) if isinstance(config, dict) else {}


def _recognise_console(path: Path) -> bool:
    if not path.is_file() or path.suffix in (".json", ".jsonl", ".csv"):
        return False
    with path.open("rb") as handle:
        head = handle.read(1 << 20).replace(b"\0", b"").decode("utf-8", errors="replace")
    return any(_STEP_LINE.search(plain(line)) and ":" in line.split("step:", 1)[-1]
               for line in head.splitlines() if "step:" in line and " - " in line)


CONSOLE = LogFormat(
    name="verl-console",
    description="veRL's console output: `step:N - key:value - ...` lines (ANSI codes and Ray tags allowed)",
    reads=("veRL's console: `step:N - key:value - ...` lines anywhere in a capture (ANSI codes, NUL bytes, Ray `(... "
           "pid=N)` tags), and the config it prints at start (beta, clip, lr, lengths, group size)"),
    recognise=_recognise_console,
    read=_read_console,
    dialects=(DIALECT,),
)


# --- JSONL file logger ----------------------------------------------------------------------
def _recognise_jsonl(path: Path) -> bool:
    if not path.is_file() or path.suffix not in (".jsonl", ".json", ".log", ""):
        return False
    with path.open("rb") as handle:
        first = b""
        for _ in range(100):  # the first line that is not blank
            first = handle.readline(1 << 20)
            if first.strip() or not first:
                break
        first = first.decode("utf-8", errors="replace")
    try:
        row = json.loads(first)
    except json.JSONDecodeError:
        return False
    return isinstance(row, dict) and isinstance(row.get("data"), dict) and "step" in row


def _read_jsonl(path: Path, mapping: UserMapping) -> RawLog:
    records: list[dict[str, Any]] = []
    notes: list[str] = []
    for number, row in json_objects(path, notes):
        if not isinstance(row.get("data"), dict):
            raise LogFormatError(f"{path}:{number}: expected {{\"step\": N, \"data\": {{...}}}} (veRL's file logger)")
        step = row.get("step")
        if isinstance(step, bool) or not isinstance(step, int):
            raise LogFormatError(f"{path}:{number}: step {step!r} is not a whole number")
        records.append({**row["data"], "step": step})
    return RawLog(records, dialect=DIALECT.name, notes=notes)


JSONL = LogFormat(
    name="verl-jsonl",
    description="veRL's file logger (trainer.logger=['file']): {\"step\": N, \"data\": {...}} per line",
    reads=("veRL's file logger: `{\"step\": N, \"data\": {...}}` per line"),
    recognise=_recognise_jsonl,
    read=_read_jsonl,
    dialects=(DIALECT,),
)


# --- samples: `trainer.rollout_data_dir` (every training step) and `trainer.validation_data_dir`
# (every validation), one `{global_step}.jsonl` per step, lines `{input, output, gts, score,
# step, <reward extras>}` (veRL's `RayPPOTrainer._dump_generations`, verl/trainer/ppo/ray_trainer.py).
_STEP_FILE = re.compile(r"^(\d+)\.jsonl$")


def read_samples(path: Path, mapping: Mapping[str, str] | None = None, split: Split = "train") -> SampleSet:
    """A `rollout_data_dir` or `validation_data_dir` (or one `{step}.jsonl` of it)."""
    files = ([path] if path.is_file() else
             sorted((p for p in path.iterdir() if _STEP_FILE.match(p.name)), key=lambda p: int(p.stem)))
    columns = {"step": "step", "prompt": "input", "response": "output", "reward": "score"}
    samples: list[Sample] = []
    for file in files:
        rows = read_rows(file)
        for row in rows:
            row.setdefault("step", int(file.stem) if file.stem.isdigit() else 0)
        samples.extend(samples_of_rows(rows, {**columns, **{o: t for t, o in (mapping or {}).items()}}, str(file)))
    return SampleSet(samples, str(path), "verl", split)


def _is_verl(path: Path) -> bool:
    if path.is_file():
        return bool(_STEP_FILE.match(path.name)) and first_keys(path) >= {"input", "output"}
    files = [p for p in path.iterdir() if _STEP_FILE.match(p.name)] if path.is_dir() else []
    return bool(files) and first_keys(files[0]) >= {"input", "output"}


# veRL's config keys for its dumps, as its startup config print or a Hydra override shows them.
_DUMP_DIRS = {"train": "rollout_data_dir", "eval": "validation_data_dir"}
_CONFIG_VALUE = r"""['"]?{key}['"]?\s*[:=]\s*['"]?([^'",}}\s]+)"""


def find_samples(log: Path) -> list[SampleSet]:
    """The dump directories a veRL log's printed config names (relative paths from the log's
    directory)."""
    if not log.is_file():
        return []
    try:
        with log.open(encoding="utf-8", errors="replace") as handle:
            head = handle.read(2_000_000)  # the config is printed at startup
    except OSError:
        return []
    sets = []
    for split, key in _DUMP_DIRS.items():
        match = re.search(_CONFIG_VALUE.format(key=key), head)
        if not match or match.group(1) in ("None", "null"):
            continue
        directory = Path(match.group(1))
        directory = directory if directory.is_absolute() else log.parent / directory
        if directory.is_dir() and _is_verl(directory):
            sets.append(read_samples(directory, split=split))
    return sets


SAMPLES = SampleFormat("verl", "veRL rollout_data_dir / validation_data_dir: {step}.jsonl files", _is_verl,
                       read_samples, find_samples)


# --- launching it (an ablation plan for its log: doctor/plan.py) ---------------------------------
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
LAUNCHER = Launcher("verl", ("verl",), "overrides", "python3 -m verl.trainer.main_ppo data.train_files=... "
                   "actor_rollout_ref.model.path=...",
                   dotted, ("data.seed", "actor_rollout_ref.actor.data_loader_seed", "critic.data_loader_seed"),
                   (("trainer.default_local_dir", "{out}"), ("trainer.experiment_name", "{name}")), VERL_KEYS,
                   fixed=(("trainer.logger", "[console]"),),
                   notes=("trainer.resume_mode is auto: a run resumes what it finds in trainer.default_local_dir, so each "
                          "run has its own",
                          "trainer.logger=[console]: the doctor reads each run's console; list your other loggers beside it "
                          "([console,wandb]) to keep them"))
