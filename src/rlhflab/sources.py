"""Where each stage's models, tokenizer and data come from: the user's own directories
and files (config section `data`), or the embedded reviews world and the run's own
earlier stages. The stages ask this module and never branch on which it is.

Only the world knows a gold utility; with the user's prompts, gold metrics are absent
and the doctor lists the rules it could not run for lack of them.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from transformers import PreTrainedTokenizerBase

from rlhflab.config import PipelineConfig
from rlhflab.data.files import DataError, Loaded, PreferenceRecord, load_preferences, load_prompts, load_sft
from rlhflab.data.prompt_pool import PromptPool, PromptSource
from rlhflab.models.lm import load_tokenizer
from rlhflab.progress import console
from rlhflab.runs import RunDir
from rlhflab.seeding import derive_seed
from rlhflab.worlds.reviews import ReviewsWorld

Gold = Callable[[list[str], list[str]], list[float]]


def stage1_tokenizer(config: PipelineConfig) -> PreTrainedTokenizerBase:
    """The tokenizer of the model stage 1 starts from, or the world's."""
    return load_tokenizer(Path(config.data.model)) if config.data.model else ReviewsWorld(config.world).tokenizer()


def context_length(model_dir: Path | None, config: PipelineConfig) -> int:
    """Tokens the model can attend over: from its HF config, or the tiny GPT-2's `n_positions`."""
    if model_dir is None:
        return config.pretrain.n_positions
    from transformers import AutoConfig

    model_config = AutoConfig.from_pretrained(str(model_dir))
    for name in ("max_position_embeddings", "n_positions"):
        if getattr(model_config, name, None):
            return int(getattr(model_config, name))
    return config.pretrain.n_positions


def longest_prompt(config: PipelineConfig, stage: str) -> tuple[int, str]:
    """Positions the longest prompt `stage` samples from takes, its `<bos>` included, and
    where that bound comes from: the world's longest opening (stage 2 always samples the
    world's prompts), or one token for the user's prompts (each longer one is checked
    against the room left when the file is read)."""
    if stage == "ppo" and config.data.prompts:
        return 2, "a prompt of one token and <bos>"
    return ReviewsWorld(config.world).longest_prompt_tokens + 1, "the world's longest prompt and <bos>"


def reward_base_dir(config: PipelineConfig, run: RunDir) -> Path:
    return Path(config.data.reward_base) if config.data.reward_base else run.stage1_lm


def policy_dir(config: PipelineConfig, run: RunDir) -> Path:
    return Path(config.data.policy) if config.data.policy else run.stage1_lm


def reward_model_dir(config: PipelineConfig, run: RunDir) -> Path:
    return Path(config.data.reward_model) if config.data.reward_model else run.stage2_rm


def _report(loaded: Loaded) -> Loaded:
    if loaded.skipped:
        console.print(f"[yellow]skipped invalid records:[/yellow] {loaded.summary()}")
    return loaded


def split_heldout(records: list, fraction: float, seed: int, path: str) -> tuple[list, list]:
    """A seeded split of a file's records into (train, held out), at least one in each."""
    if len(records) < 2:
        raise DataError(f"{path}: {len(records)} valid record(s); expected at least 2, one to hold out for validation")
    order = list(range(len(records)))
    random.Random(f"heldout/{Path(path).name}/{seed}").shuffle(order)
    n_held = min(len(records) - 1, max(1, round(fraction * len(records))))
    held = sorted(order[:n_held])
    kept = sorted(order[n_held:])
    return [records[i] for i in kept], [records[i] for i in held]


@dataclass(frozen=True)
class SFTData:
    """Stage-1 examples as (prompt, completion) pairs; the loss is on the completions."""

    train: list[tuple[str, str]]
    val: list[tuple[str, str]]
    world: ReviewsWorld | None  # set when the examples are the world's corpus (grammar is measurable)


def sft_data(config: PipelineConfig, tokenizer: PreTrainedTokenizerBase, context: int) -> SFTData:
    """The user's SFT file (split into train and held out) or the world's corpus; `context`
    is the model's length limit in tokens."""
    cfg = config.pretrain
    if config.data.sft:
        loaded = _report(load_sft(config.data.sft, skip_invalid=config.data.skip_invalid, tokenizer=tokenizer,
                                  max_tokens=context - 2))  # room for BOS and EOS
        pairs = [(r.prompt, r.completion) for r in loaded.records]
        train, val = split_heldout(pairs, config.data.heldout_fraction, config.seed, config.data.sft)
        return SFTData(train, val, None)
    world = ReviewsWorld(config.world)
    corpus = world.corpus(cfg.corpus_size, derive_seed(config.seed, "corpus"))
    val = world.corpus(cfg.val_size, derive_seed(config.seed, "val-corpus"))
    return SFTData([("", text) for text in corpus], [("", text) for text in val], world)


def preference_data(config: PipelineConfig, tokenizer: PreTrainedTokenizerBase, context: int
                    ) -> tuple[list[PreferenceRecord], list[PreferenceRecord]]:
    """(train, held-out) pairs of the user's preference file."""
    loaded = _report(load_preferences(config.data.preferences, skip_invalid=config.data.skip_invalid,
                                      tokenizer=tokenizer, max_tokens=context - 2))
    return split_heldout(list(loaded.records), config.data.heldout_fraction, config.seed,
                          config.data.preferences)


@dataclass(frozen=True)
class PromptTask:
    """Stage-3 prompts: a source for training batches, held-out prompts, and gold if known."""

    train: PromptSource
    eval_prompts: list[str]
    gold: Gold | None
    world: ReviewsWorld | None


def prompt_task(config: PipelineConfig, tokenizer: PreTrainedTokenizerBase, context: int) -> PromptTask:
    """The user's prompt file (split into train and held out) or the world's prompts."""
    if config.data.prompts:
        # A prompt must leave room for BOS and a full-length response in the context.
        loaded = _report(load_prompts(config.data.prompts, skip_invalid=config.data.skip_invalid, tokenizer=tokenizer,
                                      max_tokens=context - config.ppo.response_length - 1))
        train, held = split_heldout([r.prompt for r in loaded.records], config.data.heldout_fraction, config.seed,
                                    config.data.prompts)
        return PromptTask(PromptPool(train), held[: config.ppo.eval_prompts] or train[:1], None, None)
    world = ReviewsWorld(config.world)
    eval_prompts = world.prompts(config.ppo.eval_prompts, derive_seed(config.seed, "eval-prompts"), split="heldout")
    return PromptTask(world, eval_prompts, world.gold, world)
