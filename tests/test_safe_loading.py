"""Weights only from safetensors, never a pickle from a user path; config files are data,
never code."""

import re
from pathlib import Path

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from rlhflab.config import ConfigError, load_config
from rlhflab.models.lm import ModelDirError, load_causal_lm
from rlhflab.models.reward_model import load_reward_model

SRC = Path(__file__).resolve().parents[1] / "src" / "rlhflab"


def test_a_pickled_checkpoint_is_refused_with_what_to_do(tmp_path):
    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=50, n_positions=16))
    model.config.save_pretrained(tmp_path)
    torch.save(model.state_dict(), tmp_path / "pytorch_model.bin")  # what older tools write
    for load in (load_causal_lm, load_reward_model):
        with pytest.raises(ModelDirError, match=r"no \*\.safetensors weights.*pytorch_model\.bin.*not loaded"):
            load(tmp_path)
    with pytest.raises(ModelDirError, match="no config.json"):
        load_causal_lm(_empty_dir(tmp_path))


def _empty_dir(tmp_path: Path) -> Path:
    empty = tmp_path / "empty"
    empty.mkdir()
    return empty


def test_a_config_file_is_parsed_as_toml_never_run(tmp_path):
    marker = tmp_path / "ran"
    config = tmp_path / "evil.toml"
    config.write_text(f"seed = __import__('os').system('touch {marker}')\n")
    with pytest.raises(ConfigError, match="invalid TOML"):
        load_config("smoke", config_file=config)
    assert not marker.exists()


def test_no_code_path_unpickles_or_runs_remote_code():
    sources = {path: path.read_text() for path in SRC.rglob("*.py")}
    for path, text in sources.items():
        assert not re.search(r"^\s*(import pickle|from pickle|import dill)", text, re.M), path
        assert "trust_remote_code=True" not in text, path
        for call in re.findall(r"torch\.load\([^)]*\)", text):
            assert "weights_only=True" in call, f"{path}: {call}"
