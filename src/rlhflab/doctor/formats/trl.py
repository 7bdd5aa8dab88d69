"""TRL's PPOTrainer (`trl.trainer.ppo_trainer`, later `trl.experimental.ppo`): the
`log_history` of its `trainer_state.json`, in the names TRL's PPO logs."""

from __future__ import annotations

import json
from pathlib import Path

from rlhflab.doctor.formats.spec import Column, LogFormat, LogFormatError, RawLog, UserMapping

# TRL PPOTrainer log_history names -> canonical names (TRL's logging docs, PPOTrainer.train).
PPO_COLUMNS = {
    "objective/kl": Column("kl/mean"),  # batch mean of the per-sequence k1 sum, as ours
    # The per-sequence sum of -logprobs; used only when the per-token entropy is absent.
    "objective/entropy": Column("policy/entropy", unit="nats/sequence", fallback=True),
    "objective/non_score_reward": Column("reward/kl_penalty_mean"),
    "objective/rlhf_reward": Column("reward/total_mean"),
    "objective/scores": Column("reward/proxy_mean"),
    "policy/approxkl_avg": Column("policy/approxkl"),
    "policy/clipfrac_avg": Column("policy/clipfrac"),
    "policy/entropy_avg": Column("policy/entropy"),
    "loss/policy_avg": Column("policy/loss"),
    "loss/value_avg": Column("value/loss"),
    "val/clipfrac_avg": Column("value/clipfrac"),
    "val/ratio": Column("policy/ratio_mean"),
    "val/ratio_var": Column("policy/ratio_var"),
    "val/num_eos_tokens": Column("response/eos_count"),  # a count per batch, not a canonical rate
    "learning_rate": Column("lr"),
    "lr": Column("lr"),
}
# Bookkeeping columns of TRL's log_history that carry no training signal.
IGNORED = frozenset({"eps", "episode", "epoch", "step", "total_flos", "train_runtime", "train_samples_per_second",
                     "train_steps_per_second", "train_loss"})
# RunSettings field -> TRL's PPOConfig field (OnPolicyConfig and TrainingArguments included).
VOCABULARY = {
    "kl_coef": "PPOConfig.kl_coef", "kl_estimator": "PPOConfig.kl_estimator", "clip_eps": "PPOConfig.cliprange",
    "value_clip_eps": "PPOConfig.cliprange_value", "lr": "PPOConfig.learning_rate",
    "response_length": "PPOConfig.response_length", "missing_eos_penalty": "PPOConfig.missing_eos_penalty",
    "reward_epochs": "RewardConfig.num_train_epochs",
}


def _load_state(path: Path) -> dict:
    try:
        state = json.loads(Path(path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise LogFormatError(f"{path}:{err.lineno}: invalid JSON ({err.msg})") from None
    except UnicodeDecodeError as err:
        raise LogFormatError(f"{path}: not UTF-8 text ({err.reason} at byte {err.start})") from None
    if not isinstance(state, dict) or not isinstance(state.get("log_history"), list):
        raise LogFormatError(f"{path}: expected a trainer_state.json with a 'log_history' list")
    return state


def state_file(path: Path) -> Path:
    """`path` itself, or the trainer_state.json inside a run's output directory."""
    return path / "trainer_state.json" if path.is_dir() else path


def _recognise(path: Path) -> bool:
    path = state_file(path)
    if not path.is_file() or path.suffix != ".json":
        return False
    if path.name == "trainer_state.json":
        return True
    try:
        return "log_history" in json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError, TypeError):
        return False


def _read(path: Path, mapping: UserMapping) -> RawLog:
    """The log_history rows as TRL wrote them; the step is TRL's `step` (else the episode,
    else the row's index) unless the user names another step column."""
    state = _load_state(state_file(path))
    records = []
    for index, entry in enumerate(state["log_history"]):
        if mapping.step_key:
            records.append(dict(entry))
        else:
            records.append({**entry, "step": entry.get("step", entry.get("episode", index))})
    return RawLog(records)


FORMAT = LogFormat(
    name="trl",
    description="TRL PPOTrainer: trainer_state.json (its log_history), or the output directory holding it",
    recognise=_recognise,
    read=_read,
    columns=PPO_COLUMNS,
    ignored=IGNORED - {"step"},
    vocabulary=VOCABULARY,
)
