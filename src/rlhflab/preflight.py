"""Everything a run will need, checked before its first stage writes anything: the place it
writes to, the optional parts its config asks for (a rollout engine, LoRA's peft), the
components it names (`module:function`), the model directories and data files of every
stage it will run, read and validated as those stages will read them, and, when it
resumes, that its checkpoint was written under the config it resumes with.

A run that would fail at stage 3 for its config fails here, in a second, with the one-line
error the stage would have given, and no run directory behind it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

from rlhflab.checkpoint import STATE_FILE
from rlhflab.config import ConfigError, PipelineConfig, training_keys
from rlhflab.data.files import load_preferences, load_prompts, load_sft
from rlhflab.errors import MissingExtra, writable_directory
from rlhflab.models.lm import check_model_dir, load_tokenizer
from rlhflab.ppo.components import PPOComponents
from rlhflab.ppo.samplers import check_engine
from rlhflab.runs import RunDir
from rlhflab.sources import context_length, longest_prompt, split_heldout, stage1_tokenizer

STAGES = ("pretrain", "reward", "ppo")


def preflight(config: PipelineConfig, run: RunDir, components: PPOComponents, stages: Sequence[str] = STAGES,
              resume: bool = False) -> None:
    """Raise the error the run would meet (module docstring), or return with nothing written."""
    writable_directory(run.root)
    if "ppo" in stages:
        check_engine(config.rollout, components.sample)
        if config.lora.rank:
            _importable("peft", "lora.rank > 0 adapts the policy through peft: pip install 'rlhflab[train]'")
    _check_model_dirs(config, stages)
    check_response_room(config, stages)
    _check_data(config, stages)
    if resume:
        check_resume(config, run)


def check_response_room(config: PipelineConfig, stages: Sequence[str] = STAGES) -> None:
    """A prompt and the response a stage samples after it must fit the sampling model's
    positions: past them, sampling indexes a position the model does not have."""
    sampled = []
    if "reward" in stages and not config.data.preferences:  # stage 2 labels samples of stage 1
        sampled.append(("reward", "reward.response_length", config.reward.response_length, config.data.model))
    if "ppo" in stages:
        sampled.append(("ppo", "ppo.response_length", config.ppo.response_length,
                        config.data.policy or config.data.model))
    for stage, key, length, start in sampled:
        context = context_length(_path(start), config)
        prompt, why = longest_prompt(config, stage)
        if length > context - prompt:
            where = f"{start}'s" if start else "pretrain.n_positions ="
            raise ConfigError(f"{key} = {length}: the model it samples attends over {where} {context} positions "
                              f"and {prompt} go to {why}; expected at most {context - prompt}")


def _importable(module: str, why: str) -> None:
    try:
        __import__(module)
    except ImportError as err:
        raise MissingExtra(f"{why} ({err})") from None


def _check_model_dirs(config: PipelineConfig, stages: Sequence[str]) -> None:
    data = config.data
    models = {"pretrain": [("data.model", data.model)], "reward": [("data.reward_base", data.reward_base)],
              "ppo": [("data.policy", data.policy), ("data.reward_model", data.reward_model)]}
    for stage in stages:
        for key, directory in models[stage]:
            if directory:
                _model_dir(key, directory)


def _check_data(config: PipelineConfig, stages: Sequence[str]) -> None:
    data = config.data
    if "pretrain" in stages and data.sft:
        loaded = load_sft(data.sft, skip_invalid=data.skip_invalid, tokenizer=stage1_tokenizer(config),
                          max_tokens=context_length(_path(data.model), config) - 2)
        split_heldout(list(loaded.records), data.heldout_fraction, config.seed, data.sft)
    if "reward" in stages and data.preferences:
        base = data.reward_base or data.model
        tokenizer = load_tokenizer(Path(base)) if base else stage1_tokenizer(config)
        loaded = load_preferences(data.preferences, skip_invalid=data.skip_invalid, tokenizer=tokenizer,
                                  max_tokens=context_length(_path(base), config) - 2)
        split_heldout(list(loaded.records), data.heldout_fraction, config.seed, data.preferences)
    if "ppo" in stages and data.prompts:
        start = data.policy or data.model
        tokenizer = load_tokenizer(Path(start)) if start else stage1_tokenizer(config)
        loaded = load_prompts(data.prompts, skip_invalid=data.skip_invalid, tokenizer=tokenizer,
                              max_tokens=context_length(_path(start), config) - config.ppo.response_length - 1)
        split_heldout([r.prompt for r in loaded.records], data.heldout_fraction, config.seed, data.prompts)


def _path(text: str) -> Path | None:
    return Path(text) if text else None


def _model_dir(key: str, directory: str) -> None:
    from rlhflab.models.lm import ModelDirError

    try:
        check_model_dir(Path(directory))
    except ModelDirError as err:
        raise ModelDirError(f"{key}: {err}") from None


def check_resume(config: PipelineConfig, run: RunDir) -> None:
    """A checkpoint written under other training keys than `config`'s is not this run's."""
    state_file = run.checkpoints / "ppo" / STATE_FILE
    if not state_file.is_file():
        return
    written = json.loads(state_file.read_text(encoding="utf-8")).get("config")
    if written is None:  # written before checkpoints recorded their config
        return
    now = training_keys(config)
    differ = sorted(k for k in set(written) | set(now) if written.get(k) != now.get(k))
    if differ:
        shown = ", ".join(f"{k} = {written.get(k)!r} there, {now.get(k)!r} in {run.config.name}" for k in differ[:3])
        raise ConfigError(f"{state_file.parent}: written under another config ({shown}); resume a run with the "
                          "config it was trained with, or start a new run (rlhflab verify reruns with a change)")
