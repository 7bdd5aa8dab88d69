"""The fault zoo: named, documented, deliberately wrong replacements for one pipeline
component each, to prove the doctor and the checkup find real bugs.

A fault either replaces one field of `PPOComponents` (code bugs) or sets the config of
one component (misconfigurations), never both components at once, and the main code
has no branch on a fault. `--fault NAME` on `pipeline`/`ppo` applies it; the run's
`config.toml` records the fault's name and its resolved config.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterator

import torch
from torch import Tensor

from rlhflab.config import ConfigError, PipelineConfig, PPOConfig, apply_overrides
from rlhflab.doctor import Component
from rlhflab.models.forward import position_ids_from_mask
from rlhflab.models.sampling import sample_responses
from rlhflab.ppo import advantages
from rlhflab.ppo.components import PPOComponents, component_path, components_from_record
from rlhflab.ppo.kl import AdaptiveKLController


@dataclass(frozen=True)
class Fault:
    name: str
    component: Component
    symptom: str  # what the doctor should see
    reproduces: str  # the real-world bug it reproduces
    replaces: str  # the component field or config keys it replaces
    config: Callable[[PipelineConfig], dict[str, Any]] = lambda config: {}
    code: dict[str, Callable] = field(default_factory=dict)

    def components(self, base: PPOComponents = PPOComponents()) -> PPOComponents:
        return replace(base, **self.code)


# --- wrong implementations ---------------------------------------------------------------
def shape_rewards_kl_added(scores, logprobs, ref_logprobs, mask, kl_coef, kl_estimator="k1"):
    """KL added to the reward instead of subtracted: the policy is paid to move away."""
    rewards, kl = advantages.shape_rewards(scores, logprobs, ref_logprobs, mask, 0.0, kl_estimator)
    return rewards + kl_coef * torch.where(mask, kl, 0.0), kl


class InvertedAdaptiveKLController(AdaptiveKLController):
    """Moves beta down when KL is above target and up when below (the error's sign flipped)."""

    def update(self, current_kl: float, n_steps: int) -> None:
        mirrored = 2 * self.target - current_kl  # same |error|, opposite sign
        super().update(max(mirrored, 0.0), n_steps)


def inverted_controller(config: PPOConfig):
    return InvertedAdaptiveKLController(config.kl_coef, config.kl_target or 6.0, config.kl_horizon)


def reference_is_policy(stage1_dir, policy_lm):
    """The 'reference' is the policy itself: KL is always 0 and the penalty does nothing."""
    return policy_lm


def response_logits_unshifted(model, input_ids, attention_mask, prompt_len, temperature, output_hidden_states=False):
    """Logits at position t scored against token t instead of t + 1 (no shift)."""
    out = model(input_ids=input_ids, attention_mask=attention_mask.long(),
                position_ids=position_ids_from_mask(attention_mask),
                output_hidden_states=output_hidden_states, use_cache=False)
    logits = out.logits[:, prompt_len:] / temperature
    hidden = out.hidden_states[-1][:, prompt_len:] if output_hidden_states else None
    return logits, hidden


def sample_at_lower_temperature(model, prompt_ids, prompt_mask, max_new_tokens, temperature, eos_id, pad_id, generator):
    """Samples at 0.6 x the configured temperature while logprobs use the configured one."""
    return sample_responses(model, prompt_ids, prompt_mask, max_new_tokens, 0.6 * temperature, eos_id, pad_id, generator)


class _NoEOS(torch.nn.Module):
    """Wraps a causal LM so EOS can never be sampled."""

    def __init__(self, lm: torch.nn.Module, eos_id: int) -> None:
        super().__init__()
        self.lm, self.eos_id = lm, eos_id

    def forward(self, **kwargs):
        out = self.lm(**kwargs)
        out.logits[..., self.eos_id] = float("-inf")
        return out


def sample_without_eos(model, prompt_ids, prompt_mask, max_new_tokens, temperature, eos_id, pad_id, generator):
    """Responses never end: EOS is removed from the sampling distribution."""
    return sample_responses(_NoEOS(model, eos_id), prompt_ids, prompt_mask, max_new_tokens, temperature, eos_id,
                            pad_id, generator)


@contextmanager
def train_mode_with_dropout(model: torch.nn.Module) -> Iterator[None]:
    """Old logprobs recorded in train mode with dropout 0.1, the update in eval mode."""
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.1
    model.train()
    yield


def mask_everything(mask: Tensor) -> Tensor:
    """Every response position counts, padding after EOS included."""
    return torch.ones_like(mask)


def score_at_last_position(model, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
    """The score read at the last position of the padded row, a pad token for short responses."""
    out = model.base_model(input_ids=input_ids, attention_mask=attention_mask.long(),
                           position_ids=position_ids_from_mask(attention_mask), use_cache=False)
    return model.score(out.last_hidden_state[:, -1]).squeeze(-1)


def raw_scores_times_100(raw: Tensor, mean: float, std: float, normalize: bool) -> Tensor:
    """No standardisation, and scores 100x larger."""
    return 100.0 * raw


def gae_forward_in_time(rewards, values, mask, gamma, lam):
    """Advantages accumulated forward in time (from the first token) instead of backward."""
    flipped = [torch.flip(x, dims=[1]) for x in (rewards, values, mask)]
    adv, ret = advantages.gae(*flipped, gamma, lam)
    return torch.flip(adv, dims=[1]), torch.flip(ret, dims=[1])


def one_prompt(world, n: int, seed: int) -> list[str]:
    """Every batch is one prompt repeated (the same one for the whole run)."""
    return world.prompts(1, 0) * n


FAULTS: tuple[Fault, ...] = (
    Fault("kl_sign_flipped", "kl_control", "exploding KL, reward hacking",
          "the KL term added to the reward instead of subtracted (a sign slip in reward shaping)",
          "PPOComponents.shape_rewards", code={"shape_rewards": shape_rewards_kl_added}),
    Fault("kl_coef_zero", "kl_control", "exploding KL, reward hacking",
          "no KL penalty (beta = 0 left in a config)", "ppo.kl_coef", config=lambda c: {"ppo.kl_coef": 0.0}),
    Fault("adaptive_kl_inverted", "kl_control", "exploding KL, controller moving the wrong way",
          "an adaptive KL controller whose update has the wrong sign", "PPOComponents.make_kl_controller",
          config=lambda c: {"ppo.kl_target": c.ppo.kl_target or 3.0},
          code={"make_kl_controller": inverted_controller}),
    Fault("ref_is_policy", "kl_control", "reward hacking with KL stuck at 0",
          "the reference model is the policy object (shared weights), so KL is always 0",
          "PPOComponents.make_reference", code={"make_reference": reference_is_policy}),
    Fault("logprob_off_by_one", "logprob_bookkeeping", "PPO instability, wrong KL",
          "logits not shifted against the tokens they score", "PPOComponents.response_logits",
          code={"response_logits": response_logits_unshifted}),
    Fault("temperature_mismatch", "logprob_bookkeeping", "negative KL, ratio far from 1",
          "sampling at one temperature, computing logprobs at another", "PPOComponents.sample",
          code={"sample": sample_at_lower_temperature}),
    Fault("dropout_in_rollout", "logprob_bookkeeping", "ratio != 1 on the first minibatch, noisy KL",
          "old logprobs computed in train mode with dropout on", "PPOComponents.rollout_mode",
          code={"rollout_mode": train_mode_with_dropout}),
    Fault("no_response_mask", "advantages_values", "KL and losses polluted by padding",
          "padding after EOS included in loss, KL and advantages", "PPOComponents.response_mask",
          code={"response_mask": mask_everything}),
    Fault("rm_reads_pad", "reward_model", "length-biased reward, reward hacking",
          "PPO reads the reward at the last position, padding included, from a reward model trained to read "
          "the last real token", "PPOComponents.score",
          code={"score": score_at_last_position}),
    Fault("reward_scale_100x", "reward_scaling", "huge advantages, PPO instability",
          "scores not normalised and 100x larger", "PPOComponents.reward_transform",
          code={"reward_transform": raw_scores_times_100}),
    Fault("lr_100x", "ppo_hyperparameters", "exploding KL, entropy collapse, large approx-KL",
          "a learning rate 100x too large", "ppo.lr", config=lambda c: {"ppo.lr": 100 * c.ppo.lr}),
    Fault("clip_disabled", "ppo_hyperparameters", "large clipfrac-free steps, ratio far from 1",
          "the PPO clip range set so wide it never clips", "ppo.clip_eps, ppo.value_clip_eps",
          config=lambda c: {"ppo.clip_eps": 1000.0, "ppo.value_clip_eps": 1000.0}),
    Fault("entropy_bonus_negative", "ppo_hyperparameters", "entropy collapse, mode collapse",
          "the entropy bonus with the wrong sign (entropy minimised)", "ppo.entropy_coef",
          config=lambda c: {"ppo.entropy_coef": -0.05}),
    Fault("gae_reversed", "advantages_values", "value function fails, slow or no learning",
          "advantages accumulated forward in time", "PPOComponents.gae", code={"gae": gae_forward_in_time}),
    Fault("narrow_prompts", "prompt_data", "mode collapse, identical responses",
          "one prompt repeated as the whole prompt set", "PPOComponents.prompts", code={"prompts": one_prompt}),
    Fault("rm_overfit", "reward_model", "weak, overfit reward model, reward hacking",
          "a tiny comparison set trained for many epochs", "reward.pairs, reward.epochs",
          config=lambda c: {"reward.pairs": 120, "reward.epochs": 40}),
    Fault("missing_eos_penalty_off_and_no_eos", "sampling", "EOS rate 0, length at the limit",
          "responses that never end, with no penalty for it", "PPOComponents.sample, ppo.missing_eos_penalty",
          config=lambda c: {"ppo.missing_eos_penalty": 0.0}, code={"sample": sample_without_eos}),
)
BY_NAME = {fault.name: fault for fault in FAULTS}


def get_fault(name: str) -> Fault:
    if name not in BY_NAME:
        raise KeyError(f"unknown fault {name!r}; known: {', '.join(BY_NAME)}")
    return BY_NAME[name]


def with_fault(config: PipelineConfig, name: str | None) -> PipelineConfig:
    """`config` with the fault `name` injected: its name recorded and its own config applied
    last (it sets its component's keys); where the config already records its components,
    the fault's replacements are written into the record. Without a name, the config's own
    `fault` is checked. An unknown fault is a ConfigError."""
    if not name:
        components_for(config)
        return config
    try:
        fault = get_fault(name)
    except KeyError as err:
        raise ConfigError(str(err.args[0])) from None
    code = {f"components.{field_name}": component_path(f) for field_name, f in fault.code.items()}
    return apply_overrides(config, {"fault": name, **fault.config(config), **(code if config.components else {})},
                           source=f"fault {name}")


def components_for(config: PipelineConfig) -> PPOComponents:
    """The components a run uses: its `[components]` record where it has one (what the run
    started with, and any swapped back since), else the defaults with its fault's
    replacements (a config not yet run, or written before runs recorded them)."""
    if config.fault and config.fault not in BY_NAME:
        raise ConfigError(f"fault = {config.fault!r}: unknown fault; known: {', '.join(BY_NAME)}")
    if config.components:
        return components_from_record(config.component_record)
    return BY_NAME[config.fault].components() if config.fault else PPOComponents()
