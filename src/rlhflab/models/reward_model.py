"""The scalar reward model: an `AutoModelForSequenceClassification` with one label.

Initialised from the stage-1 LM (Ouyang et al. 2022 initialise the RM from the SFT
model). The score is read at the last real token of each row, found from the attention
mask rather than the pad id, so it is correct under left, right or mixed padding and
when the pad id also occurs as a real token. The mean/std of the scores on stage-1
samples are stored in the model's config (`reward_mean`, `reward_std`) so the PPO stage
can standardise rewards (Ziegler et al. 2019, sec. 2.2).
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import Tensor
from transformers import AutoModelForSequenceClassification, PreTrainedModel

from rlhflab.models.forward import padded_forward
from rlhflab.models.lm import check_model_dir
from rlhflab.models.precision import autocast


def reward_model_from_lm(lm_dir: Path) -> PreTrainedModel:
    """A 1-label sequence classifier whose trunk is the LM in `lm_dir` (new score head)."""
    model = AutoModelForSequenceClassification.from_pretrained(
        str(check_model_dir(lm_dir)), num_labels=1, use_safetensors=True, trust_remote_code=False
    )
    model.config.problem_type = "regression"
    return model


def load_reward_model(path: Path) -> PreTrainedModel:
    return AutoModelForSequenceClassification.from_pretrained(str(check_model_dir(path)), use_safetensors=True,
                                                              trust_remote_code=False)


def load_reward_tokenizer(path: Path):
    """The tokenizer saved with a reward model, or None when the directory has none (the
    reward model then reads the policy's tokens, as the world's does)."""
    path = Path(path)
    if not any((path / name).is_file() for name in ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")):
        return None
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(path), trust_remote_code=False)


def max_input_length(model: PreTrainedModel) -> int | None:
    """The longest input the model's position embeddings allow, when its config says."""
    config = model.config
    return getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)


def last_real_index(attention_mask: Tensor) -> Tensor:
    """Index of the last True in each row. (B, L) -> (B,)"""
    positions = torch.arange(attention_mask.shape[1], device=attention_mask.device)
    return torch.where(attention_mask.bool(), positions, -1).max(dim=1).values


def score_sequences(model: PreTrainedModel, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
    """Raw reward scores. (B, L) -> (B,)

    A decoder classifier (a `.score` head over every position, as GPT-2 and Llama
    `...ForSequenceClassification`) is read at the last real token, found from the mask.
    Any other classifier (an encoder's pooled `[CLS]` head, as BERT- or DeBERTa-style
    models) is read through the model's own output, which knows where its head looks."""
    if not hasattr(model, "score"):
        with autocast(input_ids.device):
            return model(input_ids=input_ids, attention_mask=attention_mask.long()).logits[:, 0].float()
    hidden = padded_forward(model.base_model, input_ids, attention_mask).last_hidden_state.float()  # (B, L, H)
    last = last_real_index(attention_mask)
    picked = hidden[torch.arange(hidden.shape[0], device=hidden.device), last]  # (B, H)
    return model.score(picked).squeeze(-1)


def reward_normalizer(model: PreTrainedModel) -> tuple[float, float]:
    """(mean, std) saved with the reward model; (0, 1) if it was saved without them."""
    mean = float(getattr(model.config, "reward_mean", 0.0))
    std = float(getattr(model.config, "reward_std", 1.0))
    return mean, max(std, 1e-6)
