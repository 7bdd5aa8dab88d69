"""Low-rank adapters on the policy through peft (Hu et al. 2021, "LoRA: Low-Rank
Adaptation of Large Language Models", eq. 3: W x + (alpha / r) B A x, with B = 0 at the
start, so the adapted model begins as the base model).

peft rather than adapters of our own: it is what users' checkpoints are saved with
(adapter_config.json + adapter_model.safetensors load in any peft-aware tool), it knows
each architecture's target modules, and its layers are plain modules that DDP and FSDP2
wrap like any other. Under LoRA the frozen reference is the policy with its adapters
switched off (`AdaptersOff`), so the base weights exist once in memory.
"""

from __future__ import annotations

import copy
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from peft.tuners.tuners_utils import BaseTunerLayer
from torch import nn
from transformers import AutoModelForCausalLM, PreTrainedModel

from rlhflab.config import LoRAConfig

ADAPTER_DIR = "adapter"  # the peft directory inside a saved merged policy
POLICY, CRITIC = "default", "critic"  # the policy's adapter, and the value head's own (`lora.critic = "adapter"`)


def _lora_config(config: LoRAConfig, task_type: str | None) -> LoraConfig:
    targets = [name.strip() for name in config.target_modules.split(",") if name.strip()] or None
    return LoraConfig(r=config.rank, lora_alpha=config.alpha, lora_dropout=config.dropout, target_modules=targets,
                      bias="none", task_type=task_type)


def with_adapters(lm: nn.Module, config: LoRAConfig) -> PeftModel:
    """`lm` with LoRA adapters of `config` (only the adapters train); with `critic =
    "adapter"`, a second set for the value head, trained too, active only in `active`."""
    adapted = get_peft_model(lm, _lora_config(config, "CAUSAL_LM"))
    if config.critic == "adapter":
        adapted.add_adapter(CRITIC, _lora_config(config, "CAUSAL_LM"))
        for name, p in adapted.named_parameters():
            if f".{CRITIC}." in name:
                p.requires_grad_(True)
    return adapted


def has_critic(lm: nn.Module) -> bool:
    return is_adapted(lm) and CRITIC in lm.peft_config


@contextmanager
def active(lm: PeftModel, name: str) -> Iterator[None]:
    """Forwards of `lm` through adapter `name` only. Unlike peft's `set_adapter`, which also
    freezes every other adapter, it leaves what trains alone: both adapters train, each
    through the forward it is active in."""
    layers = [m for m in lm.modules() if isinstance(m, BaseTunerLayer)]
    for layer in layers:
        layer._active_adapter = name
    try:
        yield
    finally:
        for layer in layers:
            layer._active_adapter = POLICY


def with_trunk_adapters(classifier: PreTrainedModel, config: LoRAConfig) -> PreTrainedModel:
    """A sequence classifier whose trunk (its `base_model`) carries LoRA adapters: the trunk's
    weights freeze, its adapters and the classifier's head train. The trunk stays where the
    classifier keeps it, so `score_sequences` reads it as before."""
    prefix = classifier.base_model_prefix
    setattr(classifier, prefix, get_peft_model(getattr(classifier, prefix), _lora_config(config, None)))
    return classifier


def merge_trunk(classifier: PreTrainedModel) -> PreTrainedModel:
    """The classifier with its trunk's adapters merged into plain weights."""
    prefix = classifier.base_model_prefix
    trunk = getattr(classifier, prefix)
    if is_adapted(trunk):
        setattr(classifier, prefix, trunk.merge_and_unload())
    return classifier


def is_adapted(lm: nn.Module) -> bool:
    return isinstance(lm, PeftModel)


class AdaptersOff(nn.Module):
    """The adapted policy's base model: its forward with the adapters switched off. It
    holds no parameters of its own (the base weights are the policy's, frozen), so it
    cannot be trained, moved or sharded apart from the policy."""

    def __init__(self, adapted: PeftModel) -> None:
        super().__init__()
        self.__dict__["adapted"] = adapted  # not a submodule: its parameters are the policy's

    @property
    def config(self):
        return self.adapted.config

    @property
    def device(self) -> torch.device:
        return next(self.adapted.parameters()).device

    def forward(self, *args, **kwargs):
        with self.adapted.disable_adapter():
            return self.adapted(*args, **kwargs)


def _load_adapted_state(model: nn.Module, state: dict[str, torch.Tensor]) -> None:
    missing, unexpected = model.load_state_dict(state, strict=False)
    tied = {key for key in missing if key.endswith("lm_head.weight")}  # tied to the embeddings, stored once
    if set(missing) - tied or unexpected:
        raise ValueError(f"adapted state does not fit its model: missing {sorted(set(missing) - tied)[:5]}, "
                         f"unexpected {sorted(unexpected)[:5]}")


def save_merged_classifier(adapted: PreTrainedModel, base_dir: Path, config: LoRAConfig,
                           state: dict[str, torch.Tensor], out: Path) -> None:
    """A reward model trained through trunk adapters, saved as a plain classifier: a fresh
    copy from `base_dir` with the same adapters, loaded with `state` (the full weights,
    gathered when sharded), merged; its config (with the score statistics) is `adapted`'s."""
    from rlhflab.models.reward_model import reward_model_from_lm

    fresh = with_trunk_adapters(reward_model_from_lm(base_dir), config)
    _load_adapted_state(fresh, state)
    merged = merge_trunk(fresh)
    merged.config = copy.deepcopy(adapted.config)
    merged.save_pretrained(str(out))


def save_adapted(adapted: PeftModel, state: dict[str, torch.Tensor], out: Path) -> None:
    """`out`: the adapted model merged into plain HF weights (what any tool loads), with
    the peft adapter alone in `out/adapter/`. `state` is the adapted model's full state
    dict (gathered from shards when it is sharded); the merge runs on a fresh copy built
    from the model's config, so a sharded or wrapped model is never changed."""
    base = AutoModelForCausalLM.from_config(copy.deepcopy(adapted.base_model.model.config))
    fresh = get_peft_model(base, copy.deepcopy(adapted.peft_config[POLICY]))
    if CRITIC in adapted.peft_config:  # saved beside the policy's adapter (adapter/critic/), not merged
        fresh.add_adapter(CRITIC, copy.deepcopy(adapted.peft_config[CRITIC]))
    _load_adapted_state(fresh, state)
    fresh.save_pretrained(str(Path(out) / ADAPTER_DIR))
    fresh.merge_and_unload(adapter_names=[POLICY]).save_pretrained(str(out))
