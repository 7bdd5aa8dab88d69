"""The reward of a PPO response: the frozen reward model's score, standardised, with the
penalty for a response that never ended; and how the reward model reads the policy's ids."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Callable

import torch
from torch import Tensor

from rlhflab.data.batching import retokenize, same_vocabulary
from rlhflab.models.reward_model import max_input_length, score_sequences
from rlhflab.ppo.components import standardise


@dataclass(frozen=True)
class RewardFunction:
    """The reward model plus the standardisation and EOS penalty applied to its score.

    `encode` turns the policy's token ids into the reward model's: None when both share a
    vocabulary, else a re-tokenization through text (`data.batching.retokenize`), so a
    reward model with its own tokenizer never reads the policy's ids."""

    model: torch.nn.Module
    mean: float
    std: float
    normalize: bool
    missing_eos_penalty: float
    score_fn: Callable = score_sequences
    transform: Callable = standardise
    encode: Callable[[Tensor, Tensor], tuple[Tensor, Tensor]] | None = None

    @torch.no_grad()
    def raw_scores(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        """The reward model's score of `[prompt | response]` rows in the policy's ids. (B,)"""
        if self.encode is not None:
            input_ids, attention_mask = self.encode(input_ids, attention_mask)
        return self.score_fn(self.model, input_ids, attention_mask)

    @torch.no_grad()
    def __call__(self, input_ids: Tensor, attention_mask: Tensor, has_eos: Tensor) -> tuple[Tensor, Tensor]:
        raw = self.raw_scores(input_ids, attention_mask)
        proxy = self.transform(raw, self.mean, self.std, self.normalize)
        # Penalise truncated responses (TRL `missing_eos_penalty`; Huang et al. 2023).
        scores = proxy - self.missing_eos_penalty * (~has_eos).float()
        return proxy, scores


def reward_encoder(policy_tokenizer, reward_tokenizer, reward_model) -> Callable | None:
    """How the reward model reads the policy's token ids: as they are when both tokenizers
    share a vocabulary (or the reward model has no tokenizer of its own), else through
    text, re-tokenized with the reward model's tokenizer."""
    if reward_tokenizer is None or same_vocabulary(policy_tokenizer, reward_tokenizer):
        return None
    return partial(retokenize, policy_tokenizer, reward_tokenizer, max_length=max_input_length(reward_model))
