"""DeepSpeed-Chat step 3 (microsoft/DeepSpeedExamples,
`applications/DeepSpeed-Chat/training/step3_rlhf_finetuning/main.py`): its console, printed
on rank 0 after each generation batch:

    epoch: 0|step: 12|ppo_ep: 1|act_loss: 0.2|cri_loss: 0.1|unsuper_loss: 0.0
    average reward score: -0.67

(later versions print `Epoch: 0 | Step: 12 | PPO Epoch: 1 | Actor Loss: ... | Critic Loss:
... | Unsupervised Loss: ...` and `Average reward score: ...`). The reward is the reward
model's score per response. No KL, entropy or length is printed: the KL coefficient is
fixed in `ppo_trainer.py` (`self.kl_ctl = 0.1`).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from rlhflab.doctor.formats.spec import Column, Dialect, LogFormat, RawLog, UserMapping
from rlhflab.doctor.formats.text import open_text, plain

_STEP = re.compile(r"epoch:\s*(\d+)\s*\|\s*step:\s*(\d+)\s*\|\s*(?:ppo_ep|ppo epoch):\s*(\d+)\s*\|(.*)$", re.IGNORECASE)
_REWARD = re.compile(r"average reward score:\s*(\S+)", re.IGNORECASE)
_FIELD = re.compile(r"\s*([A-Za-z_ ]+?):\s*(\S+)\s*")
FIELDS = {"act_loss": "act_loss", "actor loss": "act_loss", "cri_loss": "cri_loss", "critic loss": "cri_loss",
          "unsuper_loss": "unsuper_loss", "unsupervised loss": "unsuper_loss"}

COLUMNS = {
    "average_reward_score": Column("reward/proxy_mean"),
    "act_loss": Column("policy/loss"),
    "cri_loss": Column("value/loss"),
}
VOCABULARY = {
    "kl_coef": "PPOTrainer.kl_ctl (ppo_trainer.py)", "clip_eps": "PPOTrainer.cliprange (ppo_trainer.py)",
    "lr": "--actor_learning_rate", "response_length": "--max_answer_seq_len",
    "batch_size": "--per_device_generation_batch_size",
}

DIALECT = Dialect(
    name="deepspeed-chat",
    description="DeepSpeed-Chat step 3 PPO (act_loss, cri_loss, average reward score)",
    handles=("no KL, entropy or length logged: \"cannot tell\""),
    columns=COLUMNS,
    markers=frozenset({"act_loss", "cri_loss", "average_reward_score"}),
    ignored=frozenset({"unsuper_loss", "epoch", "ppo_ep"}),
    vocabulary=VOCABULARY,
)


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _read(path: Path, mapping: UserMapping) -> RawLog:
    """One row per generation batch: its losses, and the reward printed after them. The
    printed step restarts each epoch, so rows are numbered in the order printed."""
    records: list[dict[str, Any]] = []
    epochs: set[int] = set()
    with open_text(path) as handle:
        for raw in handle:
            line = plain(raw).strip()
            match = _STEP.search(line)
            if match:
                epochs.add(int(match.group(1)))
                row: dict[str, Any] = {"step": len(records), "epoch": int(match.group(1))}
                for field in match.group(4).split("|"):
                    name, _, value = field.partition(":")
                    key = FIELDS.get(name.strip().lower())
                    number = _number(value.strip()) if key else None
                    if number is not None:
                        row[key] = number
                records.append(row)
                continue
            reward = _REWARD.search(line)
            if reward and records and "average_reward_score" not in records[-1]:
                number = _number(reward.group(1))
                if number is not None:
                    records[-1]["average_reward_score"] = number
    notes = ["steps are numbered in the order the batches were printed (the log's own step restarts each epoch)"] \
        if len(epochs) > 1 else []
    return RawLog(records, settings={"kl_coef": 0.1}, notes=notes + [
        "KL coefficient assumed 0.1: upstream DeepSpeed-Chat hard-codes kl_ctl = 0.1 in ppo_trainer.py (forks may "
        "differ); no KL is logged"], dialect=DIALECT.name)


def _recognise(path: Path) -> bool:
    if not path.is_file() or path.suffix in (".json", ".jsonl", ".csv"):
        return False
    with path.open("rb") as handle:
        head = handle.read(1 << 20).decode("utf-8", errors="replace")
    return any(_STEP.search(line) for line in head.splitlines() if "|" in line)


FORMAT = LogFormat(
    name="deepspeed-chat",
    description="DeepSpeed-Chat step 3 console: `epoch: E|step: S|ppo_ep: P|act_loss: ...` and "
                "`average reward score: ...` lines",
    reads=("DeepSpeed-Chat step 3's console: `epoch: E|step: S|ppo_ep: P|act_loss: ...` and `average reward score: ...`"
           " lines"),
    recognise=_recognise,
    read=_read,
    dialects=(DIALECT,),
)
