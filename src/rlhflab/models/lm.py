"""Causal language models: build a tiny GPT-2 from a config, load and save HF dirs.

Weights are always written as safetensors (`save_pretrained` default) and loaded with
`use_safetensors=True`, so no pickle is read from a user path.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    GPT2Config,
    GPT2LMHeadModel,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from rlhflab.config import PretrainConfig
from rlhflab.errors import InputError


class ModelDirError(InputError):
    """A model directory is missing, or lacks what rlhflab needs (weights, tokenizer, EOS)."""

    label = "input error"


def build_tiny_lm(tokenizer: PreTrainedTokenizerBase, config: PretrainConfig, seed: int) -> GPT2LMHeadModel:
    """A GPT-2 (Radford et al. 2019) sized by `config`, randomly initialised under `seed`.

    Deliberate deviation: GELU is PyTorch's fused tanh approximation
    (`gelu_pytorch_tanh`), the same function as GPT-2's `gelu_new` to float rounding
    but one kernel instead of seven, forward and backward (docs/benchmarks.md)."""
    model_config = GPT2Config(
        vocab_size=len(tokenizer),
        n_positions=config.n_positions,
        n_embd=config.n_embd,
        n_layer=config.n_layer,
        n_head=config.n_head,
        resid_pdrop=config.dropout,
        embd_pdrop=config.dropout,
        attn_pdrop=config.dropout,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=True,
        activation_function="gelu_pytorch_tanh",
    )
    torch.manual_seed(seed)
    return GPT2LMHeadModel(model_config)


def check_model_dir(path: Path) -> Path:
    """A local HF model directory with a config and safetensors weights, or a ModelDirError
    that says what is missing. Pickled weights (`*.bin`, `*.pt`) are never loaded: unpickling
    a file from a user path can run arbitrary code."""
    path = Path(path)
    if not path.is_dir():
        raise ModelDirError(f"{path}: not a directory; expected a Hugging Face model directory")
    if not (path / "config.json").is_file():
        raise ModelDirError(f"{path}: no config.json; expected a directory written by save_pretrained")
    if not any(path.glob("*.safetensors")):
        pickled = sorted(p.name for p in path.iterdir() if p.suffix in (".bin", ".pt", ".pth", ".ckpt"))
        hint = (f" (found {', '.join(pickled)}: pickled weights are not loaded; convert them with "
                "model.save_pretrained(DIR, safe_serialization=True) in a session you trust)") if pickled else ""
        raise ModelDirError(f"{path}: no *.safetensors weights; expected model.safetensors{hint}")
    return path


def load_causal_lm(path: Path) -> PreTrainedModel:
    """Load any local `AutoModelForCausalLM` directory (safetensors only, no remote code)."""
    return AutoModelForCausalLM.from_pretrained(str(check_model_dir(path)), use_safetensors=True,
                                                trust_remote_code=False)


def save_pretrained(model: PreTrainedModel, out: Path, state_dict: dict | None = None) -> None:
    """`model.save_pretrained`, from `state_dict` when given (the full weights of a sharded
    model), recording the model's own architecture: a class an engine mixed into it
    (FSDP2's `FSDPGPT2LMHeadModel`) is not one transformers can load."""
    model.save_pretrained(str(out), state_dict=state_dict)
    own = next(cls for cls in type(model).__mro__ if cls.__module__.startswith("transformers"))
    config_file = Path(out) / "config.json"
    config = json.loads(config_file.read_text(encoding="utf-8"))
    if config.get("architectures") != [own.__name__]:
        config["architectures"] = [own.__name__]
        config_file.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def count_parameters(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def load_tokenizer(path: Path) -> PreTrainedTokenizerBase:
    """The tokenizer saved in an HF model directory, ready for padded batches.

    Responses must be able to end, so an EOS token is required. A tokenizer without a
    pad token pads with EOS (positions are masked, so the id only has to exist), and
    the prompt is not prefixed with BOS when the tokenizer has none.
    """
    path = Path(path)
    if not path.is_dir():
        raise ModelDirError(f"{path}: not a directory; expected a Hugging Face model directory")
    if not any((path / name).is_file() for name in ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")):
        raise ModelDirError(f"{path}: no tokenizer (tokenizer.json or tokenizer_config.json); expected a model "
                            "directory saved with its tokenizer (tokenizer.save_pretrained(DIR))")
    tokenizer = AutoTokenizer.from_pretrained(str(path), trust_remote_code=False)
    if tokenizer.eos_token_id is None:
        raise ModelDirError(f"{path}: the tokenizer has no EOS token; expected one (responses end with it)")
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer
