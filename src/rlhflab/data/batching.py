"""Token batches: prompts left-padded (so generation appends on the right), responses
right-padded, and the two concatenated as `[prompt | response]` for training forwards."""

from __future__ import annotations

import torch
from torch import Tensor
from transformers import PreTrainedTokenizerBase


def length_grouped_batches(lengths: Tensor, batch_size: int, generator: torch.Generator,
                           pool: int = 50) -> list[Tensor]:
    """One epoch of row indices in batches of similar length, in random order.

    The rows are shuffled, cut into pools of `pool` batches, each pool sorted by length
    and cut into batches; the batches are then shuffled. Every row appears once, the
    batches still differ from epoch to epoch, and a batch pads to a length close to its
    rows' own (the megabatch scheme of Hugging Face Trainer's `group_by_length`, 50
    batches per pool). With random batches of the embedded corpus, half of a batch's
    tokens are padding: its reviews run 4-41 tokens and a batch is as wide as its longest.
    """
    order = torch.randperm(len(lengths), generator=generator)
    batches: list[Tensor] = []
    for start in range(0, len(order), pool * batch_size):
        chunk = order[start : start + pool * batch_size]
        chunk = chunk[torch.argsort(lengths[chunk], descending=True, stable=True)]
        batches += list(chunk.split(batch_size))
    return [batches[i] for i in torch.randperm(len(batches), generator=generator).tolist()]


def _bos(tokenizer: PreTrainedTokenizerBase) -> list[int]:
    """The BOS prefix: one token, or none for tokenizers without BOS."""
    return [] if tokenizer.bos_token_id is None else [tokenizer.bos_token_id]


def encode_prompts(tokenizer: PreTrainedTokenizerBase, prompts: list[str]) -> tuple[Tensor, Tensor]:
    """`<bos> prompt` per row, left-padded. Returns ids (B, P) and mask (B, P), True = real."""
    rows = [[*_bos(tokenizer), *tokenizer.encode(p, add_special_tokens=False)] for p in prompts]
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), tokenizer.pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.bool)
    for i, row in enumerate(rows):
        ids[i, width - len(row) :] = torch.tensor(row)
        mask[i, width - len(row) :] = True
    return ids, mask


def encode_sft(
    tokenizer: PreTrainedTokenizerBase, examples: list[tuple[str, str]], max_len: int
) -> tuple[Tensor, Tensor, Tensor]:
    """`<bos> prompt completion <eos>` per (prompt, completion), right-padded and cut at
    `max_len`. Returns ids, mask (True for real tokens) and targets (True for the
    completion and EOS, the tokens the loss is on), each (B, L)."""
    rows, starts = [], []
    for prompt, completion in examples:
        context = [*_bos(tokenizer), *tokenizer.encode(prompt, add_special_tokens=False)] if prompt else _bos(tokenizer)
        rows.append([*context, *tokenizer.encode(completion, add_special_tokens=False),
                     tokenizer.eos_token_id][:max_len])
        starts.append(len(context))
    ids, mask = _right_padded(rows, tokenizer.pad_token_id)
    targets = mask & (torch.arange(ids.shape[1])[None, :] >= torch.tensor(starts)[:, None])
    return ids, mask, targets


def encode_responses(tokenizer: PreTrainedTokenizerBase, responses: list[str]) -> tuple[Tensor, Tensor]:
    """`response <eos>` per row, right-padded, as sampled responses are laid out. Returns ids, mask (B, T)."""
    rows = [[*tokenizer.encode(r, add_special_tokens=False), tokenizer.eos_token_id] for r in responses]
    return _right_padded(rows, tokenizer.pad_token_id)


def _right_padded(rows: list[list[int]], pad_id: int) -> tuple[Tensor, Tensor]:
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.bool)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = torch.tensor(row)
        mask[i, : len(row)] = True
    return ids, mask


def join_prompt_response(
    prompt_ids: Tensor, prompt_mask: Tensor, response_ids: Tensor, mask: Tensor
) -> tuple[Tensor, Tensor]:
    """`[prompt | response]` ids and attention mask. (B, P) + (B, T) -> (B, P + T)"""
    return torch.cat([prompt_ids, response_ids], dim=1), torch.cat([prompt_mask, mask], dim=1)


def through_first(ids: Tensor, token_id: int) -> Tensor:
    """(B, T) bool: True up to and including each row's first `token_id`, every position of
    a row without one: a response's extent when `token_id` is EOS."""
    hit = (ids == token_id).long()
    return (hit.cumsum(1) - hit) == 0


def same_vocabulary(a: PreTrainedTokenizerBase, b: PreTrainedTokenizerBase) -> bool:
    """Whether token ids mean the same in both tokenizers (by vocabulary, not by name)."""
    return a.get_vocab() == b.get_vocab()


def retokenize(source: PreTrainedTokenizerBase, target: PreTrainedTokenizerBase, ids: Tensor, mask: Tensor,
               max_length: int | None = None) -> tuple[Tensor, Tensor]:
    """Rows of `source` token ids as `target` token ids: each row's real tokens decoded to
    text (special tokens dropped) and encoded again with `target`'s own special tokens
    (`[CLS] ... [SEP]`, `<s> ...`), right-padded. (B, L) -> (B, L'), mask True = real."""
    texts = [source.decode(row[row_mask].tolist(), skip_special_tokens=True).strip() for row, row_mask in zip(ids, mask)]
    encoded = target(texts, padding=True, truncation=max_length is not None, max_length=max_length,
                     return_tensors="pt")
    return encoded["input_ids"].to(ids.device), encoded["attention_mask"].bool().to(ids.device)


def decode_responses(tokenizer: PreTrainedTokenizerBase, response_ids: Tensor, mask: Tensor) -> list[str]:
    """Response text without EOS or padding."""
    return [
        tokenizer.decode(ids[row_mask].tolist(), skip_special_tokens=True).strip()
        for ids, row_mask in zip(response_ids, mask)
    ]
