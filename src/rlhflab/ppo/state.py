"""What one PPO iteration reads and updates (`PPOState`), and how a run's state is built: the
policy with its value head, the reference, the reward, the optimiser, the KL controller and
the sampler, placed by the run's engine. Built by keyword, here only: the rollout and the step
(`ppo/rollout.py`, `ppo/trainer.py`) read it and import neither each other nor this builder's
parts."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch

from rlhflab.config import DistributedConfig, PipelineConfig, PPOConfig, RolloutConfig
from rlhflab.distributed import Cluster
from rlhflab.engines import Engine, SingleEngine, make_engine
from rlhflab.models.blocks import checkpoint_blocks_if
from rlhflab.models.lm import load_causal_lm, load_tokenizer
from rlhflab.models.lora import with_adapters
from rlhflab.models.optim import adam
from rlhflab.models.precision import use_bf16
from rlhflab.models.reward_model import load_reward_model, load_reward_tokenizer, reward_normalizer
from rlhflab.models.value_head import PolicyWithValue
from rlhflab.ppo.components import PPOComponents
from rlhflab.ppo.kl import KLController
from rlhflab.ppo.reward import RewardFunction, reward_encoder
from rlhflab.ppo.samplers import NativeSampler, Sampler, start_sampler
from rlhflab.runs import RunDir
from rlhflab.seeding import derive_seed
from rlhflab.sources import policy_dir, reward_model_dir


@dataclass
class PPOState:
    """What one PPO iteration reads and updates."""

    config: PPOConfig
    policy: PolicyWithValue
    reference: torch.nn.Module
    reward: RewardFunction
    tokenizer: object
    optimizer: torch.optim.Optimizer
    controller: KLController
    components: PPOComponents = field(default_factory=PPOComponents)
    cluster: Cluster = field(default_factory=Cluster.single)
    engine: Engine = field(default_factory=lambda: SingleEngine(DistributedConfig(), Cluster.single()))
    wrapper: torch.nn.Module | None = None  # the policy inside the engine's wrapper (DDP); None: no wrapper
    rollout_config: RolloutConfig = field(default_factory=RolloutConfig)
    sampler: Sampler | None = None  # None: the `sample` component on the trained weights (NativeSampler)

    def __post_init__(self) -> None:
        if self.sampler is None:
            self.sampler = NativeSampler(self.components.sample)

    @property
    def trained(self) -> torch.nn.Module:
        """The module whose forward the update calls: where DDP and FSDP2 hook their communication."""
        return self.policy if self.wrapper is None else self.wrapper


def build_ppo_state(config: PipelineConfig, policy_dir: Path, reward_dir: Path, tokenizer,
                    components: PPOComponents, device: torch.device = torch.device("cpu"),
                    cluster: Cluster = Cluster.single()) -> PPOState:
    """Policy (with a fresh value head) and reference from `policy_dir`, the frozen reward
    model from `reward_dir`, and the optimiser and KL controller from the config; the
    models placed by the engine of `config.distributed` (the optimiser is made after,
    over the parameters the engine left: FSDP2's shards)."""
    cfg = config.ppo
    use_bf16(config.compute.bf16)  # the forwards' precision, for every caller (the run, the checkup, benches)
    engine = make_engine(config.distributed, cluster)
    torch.manual_seed(derive_seed(config.ppo_seed, "ppo-init"))
    lm = load_causal_lm(policy_dir)
    if config.lora.rank:
        lm = with_adapters(lm, config.lora)
    policy = PolicyWithValue(lm).to(device)
    checkpoint_blocks_if(config.compute.activation_checkpointing, policy, device.type)
    reference = components.make_reference(policy_dir, policy.lm).to(device)
    if not shares_parameters(reference, policy):  # a fault may make the policy its own reference
        reference = engine.frozen(reference)
    reward_model = engine.frozen(load_reward_model(reward_dir).eval().requires_grad_(False).to(device))
    mean, std = reward_normalizer(reward_model)
    encode = reward_encoder(tokenizer, load_reward_tokenizer(reward_dir), reward_model)
    reward = RewardFunction(reward_model, mean, std, cfg.normalize_reward, cfg.missing_eos_penalty,
                            components.score, components.reward_transform, encode)
    trained = engine.trained(policy)
    optimizer = adam([p for p in policy.parameters() if p.requires_grad], lr=cfg.lr, eps=1e-5)
    sampler = start_sampler(components.sample, policy_dir, config.rollout,
                            derive_seed(config.ppo_seed, "ppo-sampler", str(cluster.rank)), device)
    return PPOState(config=cfg, policy=policy, reference=reference, reward=reward, tokenizer=tokenizer,
                    optimizer=optimizer, controller=components.make_kl_controller(cfg), components=components,
                    cluster=cluster, engine=engine, wrapper=None if trained is policy else trained,
                    rollout_config=config.rollout, sampler=sampler)


def shares_parameters(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    ids = {id(p) for p in b.parameters()}
    return any(id(p) in ids for p in a.parameters())


def load_ppo_state(config: PipelineConfig, run: RunDir, components: PPOComponents,
                   device: torch.device = torch.device("cpu"), cluster: Cluster = Cluster.single()) -> PPOState:
    """The PPO state of a run: its stage-1 and stage-2 models, or the user's (`data.policy`,
    `data.reward_model`), with the policy directory's tokenizer."""
    policy = policy_dir(config, run)
    return build_ppo_state(config, policy, reward_model_dir(config, run), load_tokenizer(policy), components, device,
                           cluster)
