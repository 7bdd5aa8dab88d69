"""rlhflab's own run directories: `RUN/metrics/{ppo,reward,pretrain}.jsonl` in canonical
names, the settings in `RUN/config.toml`, the reward model's training range in
`RUN/stage2_rm/config.json`, and the checkup's verdict in `RUN/checkup.json`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

import tomllib

from rlhflab.doctor.causes import CheckupVerdict
from rlhflab.doctor.formats.spec import Dialect, LogFormat, LogFormatError, RawLog, UserMapping
from rlhflab.doctor.formats.text import json_objects
from rlhflab.doctor.samples import SampleFormat, SampleSet, read_rows, samples_of_rows
from rlhflab.runs import RunDir

# config.toml key -> RunSettings field; read both ways (settings, and fixes as overrides).
CONFIG_KEYS = {
    "ppo.kl_coef": "kl_coef", "ppo.kl_estimator": "kl_estimator", "ppo.kl_target": "kl_target",
    "ppo.kl_horizon": "kl_horizon", "ppo.clip_eps": "clip_eps", "ppo.value_clip_eps": "value_clip_eps",
    "ppo.lr": "lr", "ppo.entropy_coef": "entropy_coef", "ppo.batch_size": "batch_size",
    "ppo.response_length": "response_length", "ppo.normalize_reward": "normalize_reward",
    "ppo.epochs": "epochs", "ppo.minibatches": "minibatches",
    "ppo.missing_eos_penalty": "missing_eos_penalty", "reward.pairs": "reward_pairs", "reward.epochs": "reward_epochs",
}
# Stage 1 and 2 metrics files share the run's table; their own names only (their steps
# count other things than PPO iterations, so `lr` and `epoch` stay PPO's).
STAGE_PREFIXES = {"reward": "rm/", "pretrain": "lm/"}


def settings_from_config(config: dict[str, Any]) -> dict[str, Any]:
    """RunSettings fields from a nested config (`config.toml` as read, or the
    `PipelineConfig` as a dict): `{"ppo": {"kl_coef": 0.2, ...}, ...}`."""
    settings = {}
    for key, setting in CONFIG_KEYS.items():
        section, name = key.split(".")
        value = config.get(section, {}).get(name)
        if value is not None:
            settings[setting] = value
    if "ppo" in config:  # config.toml writes every default: no target there is a fixed beta
        settings["kl_controller"] = "fixed" if config["ppo"].get("kl_target") is None else "adaptive"
        settings["kl_in_reward"] = True
    if "rollout" in config:
        settings["importance_sampling_correction"] = config["rollout"].get("correction", "none") != "none"
        settings["separate_sampler"] = config["rollout"].get("engine", "native") != "native"
    return settings


def reward_train_max(rm_config: dict) -> float | None:
    """The highest standardised score the RM gave on its training data (None if not saved)."""
    if not {"reward_mean", "reward_std", "reward_max"} <= rm_config.keys():
        return None
    return (rm_config["reward_max"] - rm_config["reward_mean"]) / max(rm_config["reward_std"], 1e-6)


def read_checkup(run_dir: Path) -> CheckupVerdict | None:
    """A run's checkup results (`checkup.json`), or None when it has none."""
    path = Path(run_dir) / "checkup.json"
    if not path.is_file():
        return None
    checkup = json.loads(path.read_text())
    return CheckupVerdict.from_probes(checkup.get("probes", []), checkup.get("cleared", []))


def _recognise(path: Path) -> bool:
    return path.is_dir() and RunDir(path).metrics("ppo").is_file()


def _read(path: Path, mapping: UserMapping) -> RawLog:
    run = RunDir(Path(path))
    if not run.metrics("ppo").is_file():
        raise LogFormatError(f"{run.metrics('ppo')}: not found; is {path} an rlhflab run directory?")
    notes: list[str] = []  # a run killed mid-write ends in a cut line: read up to it, and said
    records = [r for _, r in json_objects(run.metrics("ppo"), notes)]
    for stage, prefix in STAGE_PREFIXES.items():
        if run.metrics(stage).is_file():
            records += [{k: v for k, v in r.items() if k == "step" or k.startswith(prefix)}
                        for _, r in json_objects(run.metrics(stage), notes)]
    settings: dict[str, Any] = {}
    if run.config.is_file():
        try:
            settings = settings_from_config(tomllib.loads(run.config.read_text(encoding="utf-8")))
        except tomllib.TOMLDecodeError as err:
            raise LogFormatError(f"{run.config}: invalid TOML: {err}") from None
    rm_config = run.stage2_rm / "config.json"
    if rm_config.is_file():
        limit = reward_train_max(json.loads(rm_config.read_text()))
        if limit is not None:
            settings["reward_train_max"] = limit
    return RawLog(records, settings, notes=notes)


DIALECT = Dialect(
    name="rlhflab",
    description="rlhflab's canonical names; fixes as config overrides (ppo.kl_coef=...)",
    handles="the canonical units (docs/metrics.md); its settings from the run's config.toml",
    # A correction is a mode, not a switch: turning it on is the truncation (Yao et al. 2025).
    vocabulary={setting: key for key, setting in CONFIG_KEYS.items()}
    | {"importance_sampling_correction": "rollout.correction=token_truncate"},
    verify=True,
    one_line_per_step=True,
)

FORMAT = LogFormat(
    name="rlhflab",
    description="an rlhflab run directory (RUN/metrics/*.jsonl, RUN/config.toml)",
    reads=("a run directory: `RUN/metrics/{ppo,reward,pretrain}.jsonl`, settings from `RUN/config.toml`, the RM's "
           "training range, the checkup verdict"),
    recognise=_recognise,
    read=_read,
    dialects=(DIALECT,),
)


# --- samples: RUN/samples/ppo.jsonl, {step, prompt, response, proxy, gold, ended} per response
# (ppo/run.py, `ppo.samples_per_iteration` of each batch). Sample field -> its key there.
SAMPLE_COLUMNS = {"step": "step", "prompt": "prompt", "response": "response", "reward": "proxy",
                          "gold": "gold", "ended": "ended"}


def read_samples(path: Path, mapping: Mapping[str, str] | None = None) -> SampleSet:
    """`RUN/samples/ppo.jsonl` (or the run directory)."""
    path = path / "samples" / "ppo.jsonl" if path.is_dir() else path
    rows = read_rows(path)
    return SampleSet(samples_of_rows(rows, SAMPLE_COLUMNS, str(path)), str(path), "rlhflab")




def _is_samples(path: Path) -> bool:
    return (path / "samples" / "ppo.jsonl").is_file() if path.is_dir() else (
        path.name == "ppo.jsonl" and path.parent.name == "samples")


SAMPLES = SampleFormat("rlhflab", "RUN/samples/ppo.jsonl", _is_samples, read_samples,
                       find=lambda log: [read_samples(log)] if _is_samples(log) else [])
