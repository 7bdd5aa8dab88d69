"""Stage 3: PPO fine-tuning of the policy against the reward model (Schulman et al. 2017;
Ziegler et al. 2019; Stiennon et al. 2020), with a per-token KL penalty to the frozen
stage-1 model.

The loop is composed of replaceable components (`PPOComponents`); the defaults are the
correct implementations, and a fault is a documented wrong replacement for one of them.
Every metric of the update is averaged over all minibatches and epochs.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import Tensor

from rlhflab.config import PipelineConfig, PPOConfig, stop_rules
from rlhflab.doctor.diagnose import diagnose, write_diagnosis
from rlhflab.doctor.readers import proxy_train_max
from rlhflab.doctor.table import MetricTable
from rlhflab.metrics.diversity import distinct_n, identical_fraction, self_bleu
from rlhflab.metrics.stats import explained_variance, masked_mean, masked_var, pearson
from rlhflab.models.lm import load_causal_lm
from rlhflab.models.reward_model import load_reward_model, reward_normalizer
from rlhflab.models.value_head import PolicyWithValue
from rlhflab.ppo import losses
from rlhflab.ppo.components import PPOComponents
from rlhflab.ppo.evaluation import evaluate_policy
from rlhflab.ppo.kl import KLController, kl_estimate
from rlhflab.ppo.rollout import RewardFunction, Rollout, make_rollout
from rlhflab.progress import console, progress_bar
from rlhflab.runs import RunDir, append_jsonl, stage_logger, write_json
from rlhflab.seeding import derive_seed, torch_generator
from rlhflab.worlds.reviews import ReviewsWorld


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


@dataclass(frozen=True)
class Advantages:
    rewards: Tensor  # (B, T) per-token reward: -kl_coef * kl, plus the score at the last token
    kl: Tensor  # (B, T) per-token KL estimate used in the penalty
    advantages: Tensor  # (B, T) GAE advantages, whitened when configured
    raw_advantages: Tensor  # (B, T) before whitening
    returns: Tensor  # (B, T) value targets


def compute_advantages(state: PPOState, rollout: Rollout) -> Advantages:
    c, cfg = state.components, state.config
    rewards, kl = c.shape_rewards(
        rollout.scores, rollout.logprobs, rollout.ref_logprobs, rollout.mask,
        state.controller.value, cfg.kl_estimator,
    )
    raw, returns = c.gae(rewards, rollout.values, rollout.mask, cfg.gamma, cfg.lam)
    advantages = c.whiten(raw, rollout.mask) if cfg.whiten_advantages else raw
    return Advantages(rewards, kl, advantages, raw, returns)


def ppo_update(state: PPOState, rollout: Rollout, adv: Advantages, generator: torch.Generator) -> dict[str, float]:
    """`epochs` passes of `minibatches` clipped-PPO steps over one rollout batch."""
    cfg, c = state.config, state.components
    totals: dict[str, float] = {}
    ratio_max, n = 0.0, 0
    batch = len(rollout.prompts)
    size = batch // cfg.minibatches
    # The policy stays in eval mode: dropout off in rollout and update alike, so the
    # first ratio is exactly 1 (Huang et al. 2023, "disable dropout").
    for _ in range(cfg.epochs):
        order = torch.randperm(batch, generator=generator)
        for start in range(0, batch, size):
            index = order[start : start + size]
            mb = rollout.select(index)
            logits, values = state.policy(mb.input_ids, mb.attention_mask, mb.prompt_len, cfg.temperature,
                                          c.response_logits)
            logprobs = losses.logprobs_from_logits(logits, mb.response_ids)
            pg_loss, pg = c.policy_loss(logprobs, mb.logprobs, adv.advantages[index], mb.mask, cfg.clip_eps)
            vf_loss, vf = c.value_loss(values, mb.values, adv.returns[index], mb.mask, cfg.value_clip_eps)
            # Without a bonus the entropy is only logged: keep it out of the graph.
            entropy_logits = logits if cfg.entropy_coef else logits.detach()
            entropy = masked_mean(losses.entropy_from_logits(entropy_logits), mb.mask)
            loss = pg_loss + cfg.vf_coef * vf_loss - cfg.entropy_coef * entropy
            state.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(state.policy.parameters(), cfg.max_grad_norm)
            state.optimizer.step()
            step_metrics = {
                "policy/loss": pg_loss.item(),
                "value/loss": vf_loss.item(),
                "policy/entropy": entropy.item(),
                "policy/approxkl": float(pg.approxkl),
                "policy/clipfrac": float(pg.clipfrac),
                "policy/ratio_mean": float(pg.ratio_mean),
                "policy/grad_norm": float(grad_norm),
                "value/clipfrac": float(vf.clipfrac),
            }
            for key, value in step_metrics.items():
                totals[key] = totals.get(key, 0.0) + value
            ratio_max = max(ratio_max, float(pg.ratio_max))
            n += 1
    return {key: value / n for key, value in totals.items()} | {"policy/ratio_max": ratio_max}


def ppo_iteration(state: PPOState, prompts: list[str], generator: torch.Generator) -> tuple[Rollout, dict[str, float]]:
    """One PPO iteration: rollout, score, advantages, update, KL-controller step."""
    timings: dict[str, float] = {}
    rollout = make_rollout(
        state.policy, state.reference, state.reward, state.tokenizer, prompts,
        state.config.response_length, state.config.temperature, generator, state.components, timings,
    )
    start = time.perf_counter()
    adv = compute_advantages(state, rollout)
    timings["advantages"] = time.perf_counter() - start
    kl_coef = state.controller.value
    start = time.perf_counter()
    update = ppo_update(state, rollout, adv, generator)
    timings["update"] = time.perf_counter() - start
    metrics = rollout_metrics(rollout, adv, kl_coef) | update
    state.controller.update(metrics["kl/mean"], len(prompts))
    metrics |= {
        "lr": state.optimizer.param_groups[0]["lr"],
        "time/rollout_s": timings["rollout"],
        "time/score_s": timings["score"],
        "time/advantages_s": timings["advantages"],
        "time/train_s": timings["update"],
    }
    return rollout, metrics


def rollout_metrics(rollout: Rollout, adv: Advantages, kl_coef: float) -> dict[str, float]:
    """Reward, KL, advantage and response statistics of one rollout batch (before the update)."""
    mask = rollout.mask
    kl_sum = (adv.kl * mask).sum(1)  # (B,) per-sequence KL with the penalty's estimator
    log_ratio = (rollout.logprobs - rollout.ref_logprobs) * mask
    k1 = log_ratio.sum(1)
    k3 = (kl_estimate(rollout.logprobs, rollout.ref_logprobs, "k3") * mask).sum(1)
    lengths = mask.sum(1).float()
    # Undefined (and left out) when every response has the same length, e.g. none ends.
    length_corr = pearson(rollout.proxy, lengths)
    return {
        "reward/proxy_mean": float(rollout.proxy.mean()),
        "reward/proxy_std": float(rollout.proxy.std()),
        "reward/score_mean": float(rollout.scores.mean()),
        "reward/total_mean": float((rollout.scores - kl_coef * kl_sum).mean()),
        "kl/mean": float(k1.mean()),
        "kl/k3_mean": float(k3.mean()),
        "kl/coef": kl_coef,
        "adv/mean": float(masked_mean(adv.raw_advantages, mask)),
        "adv/std": float(masked_var(adv.raw_advantages, mask, unbiased=False).sqrt()),
        "value/explained_variance": explained_variance(rollout.values, adv.returns, mask),
        "response/length_mean": float(lengths.mean()),
        **({"reward/length_corr": length_corr} if math.isfinite(length_corr) else {}),
        "response/eos_rate": float(rollout.has_eos.float().mean()),
        "response/distinct_1": distinct_n(rollout.responses, 1),
        "response/distinct_2": distinct_n(rollout.responses, 2),
        "response/self_bleu": self_bleu(rollout.responses),
        "response/identical_frac": identical_fraction(rollout.responses),
        "prompts/unique_frac": len(set(rollout.prompts)) / len(rollout.prompts),
        "tokens/generated": float(mask.sum()),
    }


def build_ppo_state(config: PipelineConfig, policy_dir: Path, reward_dir: Path, tokenizer,
                    components: PPOComponents) -> PPOState:
    """Policy (with a fresh value head) and reference from `policy_dir`, the frozen reward
    model from `reward_dir`, and the optimiser and KL controller from the config."""
    cfg = config.ppo
    torch.manual_seed(derive_seed(config.seed, "ppo-init"))
    policy = PolicyWithValue(load_causal_lm(policy_dir))
    reference = components.make_reference(policy_dir, policy.lm)
    reward_model = load_reward_model(reward_dir).eval().requires_grad_(False)
    mean, std = reward_normalizer(reward_model)
    reward = RewardFunction(reward_model, mean, std, cfg.normalize_reward, cfg.missing_eos_penalty,
                            components.score, components.reward_transform)
    optimizer = torch.optim.Adam(policy.parameters(), lr=cfg.lr, eps=1e-5)
    return PPOState(cfg, policy, reference, reward, tokenizer, optimizer, components.make_kl_controller(cfg), components)


def load_ppo_state(config: PipelineConfig, run: RunDir, components: PPOComponents) -> PPOState:
    """The PPO state of a pipeline run on the embedded world (its stage-1 and stage-2 models)."""
    return build_ppo_state(config, run.stage1_lm, run.stage2_rm, ReviewsWorld(config.world).tokenizer(), components)


def run_ppo(
    config: PipelineConfig,
    run: RunDir,
    components: PPOComponents = PPOComponents(),
    show_progress: bool = True,
) -> dict[str, dict[str, float]]:
    """Train, log `metrics/ppo.jsonl` and `samples/ppo.jsonl`, save the policy, and
    compare the stage-1 model with the final policy on held-out prompts."""
    cfg = config.ppo
    world = ReviewsWorld(config.world)
    state = load_ppo_state(config, run, components)
    eval_prompts = world.prompts(cfg.eval_prompts, derive_seed(config.seed, "eval-prompts"))
    evaluate = lambda lm: evaluate_policy(  # noqa: E731
        lm, state.reference, state.reward, world, state.tokenizer, eval_prompts,
        cfg.response_length, cfg.temperature, torch_generator(config.seed, "eval-sampling"),
    )
    before = evaluate(state.policy.lm)
    generator = torch_generator(config.seed, "ppo", "sampling")
    logger = stage_logger(run, "ppo")
    run.samples("ppo").unlink(missing_ok=True)
    watch = LiveDoctor(config, state)
    stopped = None
    with progress_bar("stage 3 ppo", cfg.iterations, show_progress) as bar:
        for step in range(cfg.iterations):
            prompts = components.prompts(world, cfg.batch_size, derive_seed(config.seed, "ppo-prompts", str(step)))
            rollout, metrics = ppo_iteration(state, prompts, generator)
            gold = world.gold(rollout.prompts, rollout.responses)
            metrics["reward/gold_mean"] = sum(gold) / len(gold)
            logger.log(step, metrics)
            _log_samples(run, step, rollout, gold, cfg.samples_per_iteration)
            bar.advance(info=f"proxy {metrics['reward/proxy_mean']:+.2f} gold {metrics['reward/gold_mean']:+.2f} kl {metrics['kl/mean']:.2f}")
            stopped = watch.observe(step, metrics)
            if stopped is not None:
                watch.stop(run, stopped)
                break
    logger.close()
    after = evaluate(state.policy.lm)
    state.policy.save(run.stage3_policy, state.tokenizer)
    summary = {"stage1": before, "policy": after}
    if stopped is not None:
        summary["stopped"] = {"step": step, "rule": stopped.rule, "title": stopped.title}
    write_json(run.root / "metrics" / "eval.json", summary)
    return summary


class LiveDoctor:
    """Runs the doctor's detectors on the metrics so far every `ppo.doctor_every` iterations;
    returns the first finding whose rule is in `ppo.stop_on`."""

    def __init__(self, config: PipelineConfig, state: PPOState) -> None:
        self.config, self.state = config, state
        self.stop_on = set(stop_rules(config.ppo))
        self.records: list[dict] = []
        self.last_diagnosis = None

    def observe(self, step: int, metrics: dict[str, float]):
        self.records.append({"step": step, **metrics})
        if not self.stop_on or (step + 1) % self.config.ppo.doctor_every:
            return None
        table = MetricTable.from_records(self.records, source="live")
        table.meta["config"] = self.config
        limit = proxy_train_max(self.state.reward.model.config.to_dict())
        if limit is not None:
            table.meta["proxy_train_max"] = limit
        self.last_diagnosis = diagnose(table)
        return next((f for f in self.last_diagnosis.findings if f.rule in self.stop_on), None)

    def stop(self, run: RunDir, finding) -> None:
        """Checkpoint the policy and write the diagnosis that stopped the run."""
        self.last_diagnosis.source = str(run.root)
        self.state.policy.save(run.checkpoints / "stopped", self.state.tokenizer)
        write_diagnosis(self.last_diagnosis, run.diagnosis)
        console.print(f"[red]stopped at iteration {self.records[-1]['step']}:[/red] {finding.title} "
                      f"(ppo.stop_on={finding.rule}); checkpoint in {run.checkpoints / 'stopped'}")


def _log_samples(run: RunDir, step: int, rollout: Rollout, gold: list[float], n: int) -> None:
    append_jsonl(run.samples("ppo"), [
        {"step": step, "prompt": rollout.prompts[i], "response": rollout.responses[i],
         "proxy": float(rollout.proxy[i]), "gold": gold[i]}
        for i in range(min(n, len(rollout.prompts)))
    ])
