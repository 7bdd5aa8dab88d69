"""Configuration: one frozen dataclass per stage, composed into `PipelineConfig`.

Sources, applied in order: the dataclass defaults, a preset (`smoke`, `demo`,
`full`), a TOML file, then dotted overrides such as `ppo.kl_coef=0.05`. Unknown
keys, values of the wrong type and out-of-range values are `ConfigError`s that name
the key (and the file, when the value came from one). The resolved config, every
default included, is written to `RUN/config.toml`.
"""

from __future__ import annotations

import math
import os
import re
import types
import typing
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Callable, Literal, Optional, Union, get_args, get_origin

import tomllib

from rlhflab.doctor import stop_rules
from rlhflab.errors import InputError
from rlhflab.worlds.reviews.config import WorldConfig


class ConfigError(InputError):
    """A config key is unknown, or its value has the wrong type or range."""

    label = "config error"


@dataclass(frozen=True)
class PretrainConfig:
    """Stage 1: a tiny causal LM trained from scratch on the world's corpus."""

    steps: int = 500
    """Optimizer steps (each a batch of reviews of similar length, see `length_grouped_batches`)."""
    lr: float = 3e-3
    """Peak AdamW learning rate (linear warm-up, cosine decay to 10%)."""
    batch_size: int = 64
    """Reviews per step."""
    warmup_steps: int = 30
    """Steps of linear learning-rate warm-up."""
    weight_decay: float = 0.01
    """AdamW weight decay on matrices (not on biases, norms or embeddings)."""
    corpus_size: int = 20000
    """Reviews sampled from the grammar for training."""
    val_size: int = 500
    """Held-out reviews for `lm/val_loss`."""
    eval_every: int = 100
    """Steps between validation-loss and grammaticality evaluations."""
    eval_samples: int = 256
    """Reviews sampled from the model to measure `lm/grammatical_rate`."""
    n_layer: int = 3
    """Transformer blocks."""
    n_embd: int = 128
    """Hidden size."""
    n_head: int = 4
    """Attention heads."""
    n_positions: int = 64
    """Context length in tokens; prompt plus response must fit."""
    dropout: float = 0.0
    """Dropout in embeddings, attention and residuals (0 keeps rollouts and training forwards identical)."""
    max_grad_norm: float = 1.0
    """Gradient-norm clip."""


@dataclass(frozen=True)
class RewardConfig:
    """Stage 2: a scalar reward model trained with the Bradley-Terry loss."""

    pairs: int = 24000
    """Labelled comparisons of stage-1 samples used for training (all pairs of K responses per prompt)."""
    responses_per_prompt: int = 4
    """K: stage-1 samples per prompt; every one of their K(K-1)/2 pairs is labelled."""
    val_pairs: int = 1200
    """Labelled comparisons held out for `rm/val_acc`."""
    gold_pairs: int = 3000
    """Fresh comparisons on held-out prompts for `rm/gold_agreement` (against gold, not labels); at an agreement
    of 0.75 the binomial standard error is sqrt(0.75 x 0.25 / n): 0.008 for 3000 pairs, 0.013 for 1200."""
    epochs: int = 2
    """Passes over the training pairs."""
    lr: float = 2e-3
    """Peak AdamW learning rate (linear warm-up over 5% of steps, linear decay)."""
    batch_size: int = 32
    """Prompts per step, each with its K responses and all their pairs."""
    weight_decay: float = 0.01
    """AdamW weight decay on matrices."""
    sample_temperature: float = 1.0
    """Temperature of the stage-1 samples that are compared."""
    response_length: int = 32
    """Maximum tokens of a sampled response (same default as PPO's)."""
    max_grad_norm: float = 1.0
    """Gradient-norm clip."""


@dataclass(frozen=True)
class PPOConfig:
    """Stage 3: PPO against the reward model with a per-token KL penalty to the reference."""

    iterations: int = 80
    """Rollout-then-update iterations."""
    batch_size: int = 64
    """Rollouts (prompt, response) per iteration."""
    response_length: int = 32
    """Maximum new tokens per response."""
    epochs: int = 2
    """Passes over each rollout batch (2 keeps the demo's median policy/approxkl near 0.01, docs/benchmarks.md)."""
    minibatches: int = 4
    """Minibatches per epoch; batch_size must divide evenly."""
    lr: float = 3e-4
    """Adam learning rate of policy and value head (constant)."""
    kl_coef: float = 0.2
    """Initial KL penalty coefficient beta per nat (fixed unless kl_target is set); rewards are standardised,
    so it is relative to one reward std."""
    kl_target: Optional[float] = None
    """Target per-sequence KL in nats; when set, beta adapts (Ziegler et al. 2019)."""
    kl_horizon: int = 256
    """Horizon of the adaptive KL controller, in rollouts: beta moves by at most 0.2 x batch_size / horizon per
    iteration (5% at the demo's 64), enough to correct a 4x-off beta within half a demo run; lm-human-preferences'
    10000 suits runs of 10^5-10^6 episodes and lets beta move 1.1x in a demo run."""
    kl_estimator: Literal["k1", "k2", "k3"] = "k1"
    """Per-token KL estimator used in the reward penalty."""
    clip_eps: float = 0.2
    """Policy ratio clip range."""
    value_clip_eps: float = 0.2
    """Value clip range around the rollout values."""
    vf_coef: float = 0.1
    """Weight of the value loss."""
    entropy_coef: float = 0.0
    """Weight of the entropy bonus (0 disables it)."""
    gamma: float = 1.0
    """Discount factor."""
    lam: float = 0.95
    """GAE lambda."""
    temperature: float = 1.0
    """Sampling temperature; logprobs are computed at the same temperature."""
    whiten_advantages: bool = True
    """Normalise advantages to zero mean and unit variance per batch."""
    normalize_reward: bool = True
    """Standardise reward-model scores with the mean/std saved with the reward model."""
    missing_eos_penalty: float = 1.0
    """Subtracted from the score of a response that ends without EOS."""
    max_grad_norm: float = 1.0
    """Gradient-norm clip."""
    eval_prompts: int = 256
    """Held-out prompts on which the stage-1 model and the final policy are compared."""
    samples_per_iteration: int = 64
    """Responses written to samples/ppo.jsonl each iteration (the first of the batch; 0: none). The doctor's text
    measures need 16 or more a step (doctor/sample_measures.py); 64 keeps the demo's whole batch."""
    doctor_every: int = 10
    """Iterations between live runs of the doctor's detectors during training."""
    checkpoint_every: int = 10
    """Iterations between resumable checkpoints in RUN/checkpoints/ppo (0: only on SIGINT/SIGTERM and stops)."""
    max_nonfinite_iterations: int = 3
    """Iterations in a row with a skipped (NaN/Inf) update after which the run stops with a checkpoint."""
    seed: Optional[int] = None
    """Seed of this stage's own random streams (sampling, prompt batches, minibatch order, value-head init); unset:
    the run's `seed`. An ablation's seeds vary it alone, so its arms share stages 1-2 (`rlhflab ablate`)."""
    stop_on: tuple[str, ...] = ()
    """Doctor rules (e.g. ["kl_explosion", "reward_hacking_gold"]; on the command line comma-separated) that stop
    the run, with a checkpoint and the diagnosis, when they fire at medium or high severity (a low one is a note)."""


@dataclass(frozen=True)
class DataConfig:
    """Your own models and data; an empty field means the embedded reviews world (or the run's own stage output)."""

    model: str = ""
    """HF causal-LM directory stage 1 starts from, with its tokenizer; empty: a tiny GPT-2 trained from scratch."""
    sft: str = ""
    """Stage-1 file of `prompt`/`completion` records (.jsonl/.parquet); empty: the world's corpus."""
    preferences: str = ""
    """Stage-2 file of `prompt`/`chosen`/`rejected` records (or message lists); empty: labelled stage-1 samples."""
    reward_base: str = ""
    """HF causal-LM directory the reward model's trunk starts from; empty: RUN/stage1_lm."""
    prompts: str = ""
    """Stage-3 file of `prompt` records; empty: the world's prompts (with a gold reward)."""
    policy: str = ""
    """HF causal-LM directory PPO starts from (and its reference); empty: RUN/stage1_lm."""
    reward_model: str = ""
    """HF 1-label sequence-classifier directory PPO optimises; empty: RUN/stage2_rm."""
    skip_invalid: bool = False
    """Skip invalid data records (reported with their lines) instead of stopping at the first."""
    heldout_fraction: float = 0.1
    """Share of an own data file held out for validation (at least one record)."""


@dataclass(frozen=True)
class DistributedConfig:
    """How the trained models are spread over the processes torchrun starts (docs/distributed.md)."""

    strategy: Optional[Literal["single", "ddp", "fsdp2"]] = None
    """single, ddp (every process holds the model, gradients averaged) or fsdp2 (parameters, gradients and
    optimiser state sharded with torch.distributed.fsdp.fully_shard); unset: single outside torchrun, ddp under
    it. The run's config.toml records the strategy used. One process runs any strategy as single."""
    shard_frozen: bool = False
    """Under fsdp2, shard the frozen reference and reward model of stage 3 too (less memory, an all-gather per
    forward); false replicates them on every process."""
    param_dtype: Literal["float32", "bfloat16"] = "float32"
    """Under fsdp2, the dtype parameters are gathered and computed in (MixedPrecisionPolicy); the sharded
    master weights and optimiser state stay float32."""
    reduce_dtype: Literal["float32", "bfloat16"] = "float32"
    """Under fsdp2, the dtype gradients are reduce-scattered in."""
    reshard_after_forward: bool = True
    """Under fsdp2, free each block's gathered parameters after its forward (gathered again for the
    backward): less memory for one more all-gather per block."""


@dataclass(frozen=True)
class LoRAConfig:
    """Low-rank adapters (Hu et al. 2021) through peft for the PPO policy (docs/own_models.md)."""

    rank: int = 0
    """r of every adapter; 0 fine-tunes every weight. Under LoRA the reference is the policy with its adapters
    switched off (no second copy), the value head shares the adapted trunk, and the saved policy is a merged HF
    directory with the peft adapter in its `adapter/`."""
    alpha: float = 16.0
    """lora_alpha: the adapters' update is scaled by alpha / rank."""
    dropout: float = 0.0
    """Dropout on the adapters' input (PPO keeps the policy in eval mode, where it is off)."""
    target_modules: str = ""
    """Comma-separated names of the modules to adapt (e.g. q_proj,k_proj,v_proj,o_proj); empty: peft's default
    for the architecture (GPT-2: c_attn; Llama: q_proj,v_proj)."""
    critic: Literal["shared", "adapter"] = "shared"
    """With rank > 0, what the value head reads: the policy's adapted trunk (shared), or the same frozen base
    through adapters of its own (adapter: no gradient of the value loss reaches the policy's adapters; one more
    forward per update)."""
    reward_model: bool = False
    """With rank > 0, stage 2 trains the reward model's trunk through adapters of its own (its score head whole)
    and saves it merged into plain weights; false trains every weight of it, as without LoRA."""


@dataclass(frozen=True)
class ComputeConfig:
    """Memory savers of the trained models' forwards and backwards."""

    bf16: Literal["auto", "on", "off"] = "auto"
    """Forwards under bf16 autocast (logits upcast to fp32 before any logprob or loss; weights and Adam's moments
    fp32). auto: on for CUDA devices, off on the CPU."""
    activation_checkpointing: Literal["auto", "on", "off"] = "auto"
    """Recompute each transformer block's activations in the backward instead of keeping them. auto: on for CUDA
    devices, off on the CPU. Generation never runs under it (it runs without gradients, in eval mode)."""


@dataclass(frozen=True)
class RolloutConfig:
    """What samples stage 3's rollouts, and how the update corrects for a sampler that is not the trainer
    (docs/implementation_details.md, "Rollouts on an inference engine")."""

    engine: Literal["native", "vllm"] = "native"
    """native: rlhflab's own decoder on the trained weights (the sampler is the trainer). vllm: a vLLM engine
    started once per run from the policy's directory (each process its own under torchrun), the policy's
    weights pushed to it after every update; needs the `vllm` extra (`make vllm` builds .venv-vllm)."""
    correction: Literal["none", "token_truncate", "token_mask", "sequence_truncate", "sequence_mask"] = "none"
    """Importance sampling of the policy loss by trainer/sampler probability ratios (the trainer's old
    logprobs over the sampler's): token_truncate is truncated IS (Yao et al. 2025, TIS: each token's loss
    times min(ratio, max)); sequence_truncate the same on the sequence's ratio (the product over its tokens);
    token_mask and sequence_mask drop (weight 0) tokens or whole sequences whose ratio is outside [min, max]
    (masked IS, Liu et al. 2025; TRL's `vllm_importance_sampling_mode`, whose default is sequence_mask); the
    truncations clamp from below at min too, as TRL's do.
    none: no correction (the native sampler's ratio is 1 up to float noise)."""
    correction_max: Optional[float] = None
    """The ratio's upper bound; unset: the published default of the mode: 2.0 for the truncations (Yao et al.
    2025's C; veRL `algorithm.rollout_correction.rollout_is_threshold`), 3.0 for the masks (TRL
    `vllm_importance_sampling_clip_max`)."""
    correction_min: Optional[float] = None
    """The ratio's lower bound (the masks drop what is below it, the truncations raise it to it); unset: none
    (TRL `vllm_importance_sampling_clip_min`). Bounds are unused when correction = none."""
    vllm_dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    """The dtype vLLM computes in; auto: the trainer's forwards' (float32, bfloat16 under compute.bf16), not
    vLLM's own auto, which runs a float32 checkpoint in half precision."""
    vllm_gpu_memory_utilization: float = 0.3
    """On a GPU, the share of its memory vLLM takes for weights and KV cache (the trainer needs the rest)."""
    vllm_kv_cache_gib: Optional[float] = None
    """vLLM's KV cache, in GiB; unset: on a GPU, what vllm_gpu_memory_utilization leaves; on the CPU, 1 GiB
    (there vLLM would otherwise reserve vllm_gpu_memory_utilization of the machine's RAM)."""

    def correction_bounds(self) -> tuple[float | None, float]:
        """(min, max) of the ratio the correction uses, the published default where unset."""
        high = self.correction_max if self.correction_max is not None else PUBLISHED_CORRECTION_MAX[self.correction]
        return self.correction_min, high


# The upper bound each correction's publishers use by default (RolloutConfig.correction_max).
PUBLISHED_CORRECTION_MAX = {"none": math.inf, "token_truncate": 2.0, "sequence_truncate": 2.0,
                            "token_mask": 3.0, "sequence_mask": 3.0}


@dataclass(frozen=True)
class PipelineConfig:
    """All three stages on the embedded `reviews` world."""

    seed: int = 0
    """Seed of every random stream (data, init, sampling)."""
    fault: str = ""
    """Name of an injected fault from the zoo (`rlhflab faults list`); empty for a correct pipeline."""
    world: WorldConfig = field(default_factory=WorldConfig)
    pretrain: PretrainConfig = field(default_factory=PretrainConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    ppo: PPOConfig = field(default_factory=PPOConfig)
    data: DataConfig = field(default_factory=DataConfig)
    distributed: DistributedConfig = field(default_factory=DistributedConfig)
    lora: LoRAConfig = field(default_factory=LoRAConfig)
    compute: ComputeConfig = field(default_factory=ComputeConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    components: tuple[tuple[str, str], ...] = ()
    """The PPO components a run used (`[components]` in config.toml: a `PPOComponents` field = the function's
    `module:qualname`, or "default"), recorded when the run starts; empty: the defaults with the fault's
    replacements (ppo/components.py). `components.gae=default` swaps one back, as an ablation's component arm does."""

    @property
    def ppo_seed(self) -> int:
        """The seed of the PPO stage's streams: `ppo.seed`, else the run's."""
        return self.seed if self.ppo.seed is None else self.ppo.seed

    @property
    def component_record(self) -> dict[str, str]:
        return dict(self.components)


SECTIONS = ("world", "pretrain", "reward", "ppo", "data", "distributed", "lora", "compute", "rollout")
# Config keys naming a file or directory that must exist, and which.
_PATHS = {"data.model": "dir", "data.sft": "file", "data.preferences": "file", "data.reward_base": "dir",
          "data.prompts": "file", "data.policy": "dir", "data.reward_model": "dir"}

# Presets are overrides on top of the defaults (the defaults are the demo preset).
PRESETS: dict[str, dict[str, Any]] = {
    "demo": {},
    "smoke": {
        # 400 steps: with fewer, stage 1 writes broken sentences whose gold falls with length, so the
        # reward model learns to score length and the doctor rightly flags it (docs/benchmarks.md).
        "pretrain.steps": 400,
        "pretrain.corpus_size": 4000,
        "pretrain.val_size": 200,
        "pretrain.eval_every": 200,
        "pretrain.eval_samples": 64,
        "pretrain.lr": 5e-3,
        "pretrain.n_layer": 2,
        "pretrain.n_embd": 64,
        # 7200 pairs: with 2400 the smoke RM straddled the doctor's rm_weak limits (seeds 0-4: val acc
        # 0.59-0.65, gold agreement 0.60-0.66); with 7200, 0.68-0.71 and 0.70-0.73 (docs/benchmarks.md, "smoke").
        "reward.pairs": 7200,
        "reward.val_pairs": 600,
        "reward.gold_pairs": 600,
        "reward.epochs": 2,
        "reward.batch_size": 8,
        "ppo.iterations": 20,
        "ppo.batch_size": 32,
        "ppo.minibatches": 2,
        "ppo.lr": 1e-3,
        "ppo.eval_prompts": 64,
    },
    "full": {
        "pretrain.steps": 2000,
        "pretrain.corpus_size": 60000,
        "pretrain.n_layer": 6,
        "pretrain.n_embd": 192,
        "pretrain.n_head": 6,
        "reward.pairs": 48000,
        "reward.epochs": 3,
        "ppo.iterations": 300,
        "ppo.batch_size": 128,
        "ppo.eval_prompts": 512,
    },
}

_RANGES: dict[str, tuple[float, float]] = {
    # key: (low, high), inclusive; anything numeric not listed must be >= 0.
    "ppo.clip_eps": (1e-6, 1e6),
    "ppo.value_clip_eps": (1e-6, 1e6),
    "ppo.entropy_coef": (-1.0, 1.0),
    "ppo.gamma": (0.0, 1.0),
    "ppo.lam": (0.0, 1.0),
    "ppo.temperature": (1e-3, 100.0),
    "pretrain.dropout": (0.0, 0.9),
    "lora.dropout": (0.0, 0.9),
    "data.heldout_fraction": (0.0, 0.5),
    "rollout.vllm_gpu_memory_utilization": (0.01, 1.0),
}
_POSITIVE = {
    "pretrain.steps", "pretrain.lr", "pretrain.batch_size", "pretrain.corpus_size",
    "pretrain.val_size", "pretrain.eval_every", "pretrain.eval_samples", "pretrain.n_layer",
    "pretrain.n_embd", "pretrain.n_head", "pretrain.n_positions", "reward.pairs",
    "reward.val_pairs", "reward.gold_pairs", "reward.epochs", "reward.lr",
    "reward.batch_size", "reward.response_length", "reward.responses_per_prompt", "reward.sample_temperature",
    "ppo.iterations", "ppo.batch_size", "ppo.response_length", "ppo.epochs",
    "ppo.minibatches", "ppo.lr", "ppo.kl_target", "ppo.kl_horizon", "ppo.eval_prompts", "ppo.doctor_every",
    "ppo.max_nonfinite_iterations", "lora.alpha", "rollout.correction_max", "rollout.correction_min",
    "rollout.vllm_kv_cache_gib",
}


def _field_hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


# Keys whose values another module parses and checks (the one parser of each).
_PARSERS: dict[str, Callable[[Any], Any]] = {"ppo.stop_on": stop_rules}


def _coerce(key: str, raw: Any, hint: Any, source: str) -> Any:
    """Convert `raw` (a TOML value or an override string) to the field's type."""
    where = f"{source}: {key}" if source else key
    if key in _PARSERS:
        try:
            return _PARSERS[key](raw)
        except (TypeError, ValueError) as err:
            raise ConfigError(f"{where} = {raw!r}: {err}") from None
    origin = get_origin(hint)
    if origin is Literal:
        choices = get_args(hint)
        if raw not in choices:
            raise ConfigError(f"{where} = {raw!r}: expected one of {', '.join(map(repr, choices))}")
        return raw
    if origin in (Union, types.UnionType):
        args = [a for a in get_args(hint) if a is not type(None)]
        if raw is None or (isinstance(raw, str) and raw.lower() in ("none", "null", "")):
            return None
        return _coerce(key, raw, args[0], source)
    if hint is bool:
        if isinstance(raw, bool):
            return raw
        if isinstance(raw, str) and raw.lower() in ("true", "1", "yes", "false", "0", "no"):
            return raw.lower() in ("true", "1", "yes")
        raise ConfigError(f"{where} = {raw!r}: expected true or false")
    if hint is int:
        if isinstance(raw, bool):
            raise ConfigError(f"{where} = {raw!r}: expected an integer")
        if isinstance(raw, int):
            return raw
        if isinstance(raw, float) and raw.is_integer():
            return int(raw)
        if isinstance(raw, str):
            try:
                value = float(raw)
            except ValueError:
                value = math.nan
            if value.is_integer():
                return int(value)
        raise ConfigError(f"{where} = {raw!r}: expected an integer")
    if hint is float:
        if isinstance(raw, bool):
            raise ConfigError(f"{where} = {raw!r}: expected a number")
        try:
            value = float(raw)
        except (TypeError, ValueError):
            raise ConfigError(f"{where} = {raw!r}: expected a number") from None
        if not math.isfinite(value):
            raise ConfigError(f"{where} = {raw!r}: expected a finite number")
        return value
    if hint is str:
        return str(raw)
    raise ConfigError(f"{where}: unsupported field type {hint!r}")  # pragma: no cover


def _check_range(key: str, value: Any, source: str) -> None:
    where = f"{source}: {key}" if source else key
    if key in _PATHS and value:
        kind = _PATHS[key]
        if not (Path(value).is_dir() if kind == "dir" else Path(value).is_file()):
            raise ConfigError(f"{where} = {value!r}: not found; expected an existing "
                              f"{'Hugging Face model directory' if kind == 'dir' else '.jsonl or .parquet file'}")
    if value is None or isinstance(value, (bool, str, tuple)):
        return
    if key in _RANGES:
        low, high = _RANGES[key]
        if not low <= value <= high:
            raise ConfigError(f"{where} = {value}: expected a value in [{low}, {high}]")
    elif key in _POSITIVE:
        if value <= 0:
            raise ConfigError(f"{where} = {value}: expected a value > 0")
    elif value < 0:
        raise ConfigError(f"{where} = {value}: expected a value >= 0")


COMPONENT_PATH = re.compile(r"^(default|[A-Za-z_][\w.]*:[A-Za-z_<>][\w.<>]*)$")


def _component_entry(key: str, raw: Any, source: str) -> tuple[str, str]:
    """`components.NAME = "module:qualname"` (or "default"): checked for form here; whether
    NAME is a component and the path imports is checked where components are built."""
    where = f"{source}: {key}" if source else key
    name = key.split(".", 1)[1]
    if not name.isidentifier():
        raise ConfigError(f"{where}: expected components.FIELD with FIELD a PPOComponents field name")
    if not isinstance(raw, str) or not COMPONENT_PATH.match(raw.strip()):
        raise ConfigError(f"{where} = {raw!r}: expected \"module:function\" (e.g. rlhflab.ppo.advantages:gae) "
                          "or \"default\"")
    return name, raw.strip()


def apply_overrides(config: PipelineConfig, overrides: dict[str, Any], source: str = "") -> PipelineConfig:
    """Return a copy of `config` with dotted keys (`ppo.kl_coef`) set, each coerced and checked."""
    sections = {name: getattr(config, name) for name in SECTIONS}
    top: dict[str, Any] = {}
    components = config.component_record
    for key, raw in overrides.items():
        parts = key.split(".")
        if len(parts) == 2 and parts[0] == "components":
            name, path = _component_entry(key, raw, source)
            components[name] = path
            top["components"] = tuple(sorted(components.items()))
            continue
        if len(parts) == 1:
            if key not in ("seed", "fault"):
                raise ConfigError(_unknown(key, source, ["seed", "fault", *SECTIONS]))
            top[key] = _coerce(key, raw, int if key == "seed" else str, source)
            _check_range(key, top[key], source)
            continue
        if len(parts) != 2 or parts[0] not in sections:
            raise ConfigError(_unknown(key, source, ["seed", *SECTIONS, "components"]))
        section_name, name = parts
        section = sections[section_name]
        hints = _field_hints(type(section))
        if name not in hints:
            raise ConfigError(_unknown(key, source, [f"{section_name}.{n}" for n in hints]))
        value = _coerce(key, raw, hints[name], source)
        if key in _PATHS and value:
            value = str(Path(value).expanduser().resolve())  # the run's config works from any directory
        _check_range(key, value, source)
        try:
            sections[section_name] = replace(section, **{name: value})
        except ValueError as err:  # a section's own __post_init__ check
            raise ConfigError(f"{source + ': ' if source else ''}{key} = {value!r}: {err}") from None
    resolved = replace(config, **sections, **top)
    _check_consistency(resolved)
    return resolved


def _unknown(key: str, source: str, known: list[str]) -> str:
    where = f"{source}: " if source else ""
    return f"{where}unknown config key {key!r}; known keys: {', '.join(known)}"


def _check_consistency(config: PipelineConfig) -> None:
    ppo, pre = config.ppo, config.pretrain
    if ppo.batch_size % ppo.minibatches:
        raise ConfigError(
            f"ppo.batch_size = {ppo.batch_size} must be divisible by ppo.minibatches = {ppo.minibatches}"
        )
    if config.reward.responses_per_prompt < 2:
        raise ConfigError(f"reward.responses_per_prompt = {config.reward.responses_per_prompt}: expected at least 2")
    if config.data.reward_base and not config.data.preferences:
        raise ConfigError("data.reward_base needs data.preferences: the world's comparisons are samples of "
                          "RUN/stage1_lm, scored by a reward model of the same tokenizer")
    if pre.n_embd % pre.n_head:
        raise ConfigError(f"pretrain.n_embd = {pre.n_embd} must be divisible by pretrain.n_head = {pre.n_head}")
    rollout = config.rollout
    low, high = rollout.correction_bounds()
    shown_high = f"{high}" if rollout.correction_max is not None else f"{high} (the default of {rollout.correction})"
    # A ratio of 1 (sampler = trainer) must keep its weight: bounds that cut it would zero or
    # shrink a healthy run's policy gradient.
    if rollout.correction != "none" and high < 1:
        raise ConfigError(f"rollout.correction_max = {shown_high}: expected a value >= 1 (a ratio of 1 is a "
                          "perfect match and keeps its weight)")
    if low is not None and low > 1:
        raise ConfigError(f"rollout.correction_min = {low}: expected a value <= 1 (a ratio of 1 is a perfect match "
                          f"and keeps its weight; rollout.correction_max = {shown_high})")
    if rollout.engine != "native" and config.lora.rank:
        raise ConfigError(f"rollout.engine = {rollout.engine!r} with lora.rank = {config.lora.rank}: pushing adapted "
                          "weights to an inference engine is not supported; use rollout.engine = 'native' under LoRA")
    if rollout.engine != "native" and config.distributed.strategy == "fsdp2":
        raise ConfigError(f"rollout.engine = {rollout.engine!r} with distributed.strategy = 'fsdp2': every process's "
                          "engine needs the whole weights after each update; use ddp (or rollout.engine = 'native')")



def parse_override(text: str) -> tuple[str, str]:
    """Split `key=value` (the CLI form) into its two halves."""
    if "=" not in text:
        raise ConfigError(f"override {text!r}: expected key=value, e.g. ppo.kl_coef=0.05")
    key, value = text.split("=", 1)
    return key.strip(), value.strip()


def flatten_toml(data: dict[str, Any], source: str) -> dict[str, Any]:
    """Turn `{ppo: {kl_coef: 0.1}}` into `{"ppo.kl_coef": 0.1}`."""
    flat: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict):
            for sub, inner in value.items():
                if isinstance(inner, dict):
                    raise ConfigError(f"{source}: [{key}.{sub}] nested tables are not config keys")
                flat[f"{key}.{sub}"] = inner
        else:
            flat[key] = value
    return flat


# Where set, the demo preset (the default) runs at this preset's size instead: the documented
# workflows' test runs the docs' demo commands as written, at smoke size (docs/contributing.md).
DEMO_PRESET_VARIABLE = "RLHFLAB_DEMO_PRESET"


def preset_in_force(name: str) -> str:
    """The preset `name` resolves to: itself, except `demo` where $RLHFLAB_DEMO_PRESET is set."""
    if name != "demo" or not os.environ.get(DEMO_PRESET_VARIABLE):
        return name
    mapped = os.environ[DEMO_PRESET_VARIABLE]
    if mapped not in PRESETS:
        raise ConfigError(f"{DEMO_PRESET_VARIABLE}={mapped!r}: expected one of {', '.join(PRESETS)}")
    return mapped


def load_config(
    preset: str = "demo",
    config_file: Path | None = None,
    overrides: list[str] | dict[str, Any] | None = None,
    base: PipelineConfig | None = None,
) -> PipelineConfig:
    """Defaults, then the preset (or `base`, e.g. an existing run's config), then the TOML
    file, then the dotted overrides. (A fault's own config comes last: `faults.zoo.with_fault`.)"""
    preset = preset_in_force(preset)
    if preset not in PRESETS:
        raise ConfigError(f"unknown preset {preset!r}; expected one of {', '.join(PRESETS)}")
    config = base or apply_overrides(PipelineConfig(), PRESETS[preset], source=f"preset {preset}")
    if config_file is not None:
        config = apply_overrides(config, read_toml(config_file), source=str(config_file))
    if overrides:
        pairs = overrides if isinstance(overrides, dict) else dict(parse_override(o) for o in overrides)
        config = apply_overrides(config, pairs, source="override")
    return config


def read_toml(path: Path) -> dict[str, Any]:
    """Read a config TOML file into flat dotted keys; a syntax error names the file and line."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: config file not found")
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as err:
        raise ConfigError(f"{path}: not UTF-8 text ({err.reason} at byte {err.start})") from None
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{path}: invalid TOML: {err}") from None
    return flatten_toml(data, str(path))


def to_toml(config: PipelineConfig) -> str:
    """Every field written out; unset optional fields appear as a comment."""
    lines = ["# rlhflab resolved config: every default written out", f"seed = {config.seed}",
             f"fault = {_toml_value(config.fault)}", ""]
    for section_name in SECTIONS:
        section = getattr(config, section_name)
        lines.append(f"[{section_name}]")
        for f in fields(section):
            value = getattr(section, f.name)
            if value is None:
                lines.append(f"# {f.name} is unset")
            else:
                lines.append(f"{f.name} = {_toml_value(value)}")
        lines.append("")
    if config.components:
        lines.append("[components]  # the PPO components the run used: PPOComponents field = module:qualname")
        lines.extend(f"{name} = {_toml_value(path)}" for name, path in config.components)
        lines.append("")
    return "\n".join(lines)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, tuple):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"cannot write {value!r} to TOML")  # pragma: no cover


def save_config(config: PipelineConfig, path: Path) -> None:
    Path(path).write_text(to_toml(config), encoding="utf-8")


PLACEMENT = ("distributed.",)
"""Keys a resumed run may change: where it runs, not what it trains."""


def training_keys(config: PipelineConfig) -> dict[str, Any]:
    """The config as flat `section.key` values, less where it runs (`PLACEMENT`): what a
    checkpoint records, so a resume under another config is refused (`preflight.check_resume`)."""
    keys = flatten_toml(tomllib.loads(to_toml(config)), "config")
    return {k: v for k, v in keys.items() if not k.startswith(PLACEMENT)}


def config_from_run(run_dir: Path) -> PipelineConfig:
    """The resolved config a run was made with (its `config.toml`)."""
    path = Path(run_dir) / "config.toml"
    return apply_overrides(PipelineConfig(), read_toml(path), source=str(path))


def resolve_strategy(requested: str | None, world: int) -> str:
    """The strategy a run uses and records: one process runs any strategy as single;
    under several, unset means ddp, and so does `single` (a run begun on one process and
    resumed on more), since every process training alone would be several runs."""
    if world == 1:
        return "single"
    return "ddp" if requested in (None, "single") else requested


def with_strategy(config: PipelineConfig, world: int) -> PipelineConfig:
    """`config` with the strategy it runs under at `world` processes written in."""
    strategy = resolve_strategy(config.distributed.strategy, world)
    return replace(config, distributed=replace(config.distributed, strategy=strategy))
