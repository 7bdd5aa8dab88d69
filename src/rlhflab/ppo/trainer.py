"""The PPO step of stage 3: PPO fine-tuning of the policy against the reward model (Schulman et al. 2017;
Ziegler et al. 2019; Stiennon et al. 2020), with a per-token KL penalty to the frozen
stage-1 model.

The loop is composed of replaceable components (`PPOComponents`); the defaults are the
correct implementations, and a fault is a documented wrong replacement for one of them.
Every metric of the update is averaged over all minibatches and epochs.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import torch
from torch import Tensor

from rlhflab.metrics.diversity import distinct_n, identical_fraction, self_bleu
from rlhflab.metrics.stats import explained_variance, masked_mean, masked_var, pearson
from rlhflab.ppo import losses
from rlhflab.ppo.correction import Correction, correction_metrics, importance_weights, mismatch_metrics
from rlhflab.ppo.kl import kl_estimate
from rlhflab.ppo.rollout import Rollout, make_rollout
from rlhflab.ppo.state import PPOState
from rlhflab.seeding import RowStreams, torch_generator


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


def ppo_update(state: PPOState, rollout: Rollout, adv: Advantages, generator: torch.Generator,
               correction: Correction | None = None) -> dict[str, float]:
    """`epochs` passes of `minibatches` clipped-PPO steps over one rollout batch; with a
    `correction`, each token's policy loss weighted by its importance weight (a weight w >= 0
    on the advantage is w on the clipped objective: min(r wA, clip(r) wA) = w min(rA, clip(r) A))."""
    cfg, c, cluster = state.config, state.components, state.cluster
    totals: dict[str, float] = {}
    ratio_max, n, skipped = 0.0, 0, 0
    # The policy stays in eval mode: dropout off in rollout and update alike, so the
    # first ratio is exactly 1 (Huang et al. 2023, "disable dropout").
    for minibatch in c.minibatch_schedule(len(rollout.prompts), cfg.minibatches, cfg.epochs, generator):
        # Under torchrun each process takes its share of the minibatch's rows; its loss is a
        # token mean over `fraction` of the minibatch's tokens, weighted by the engine so that
        # the combined gradient is the whole minibatch's token mean.
        index = cluster.shard(minibatch)
        mb = rollout.select(index)
        fraction = float(mb.mask.sum()) / float(rollout.mask[minibatch].sum())
        logits, values = state.trained(mb.input_ids, mb.attention_mask, mb.prompt_len, cfg.temperature,
                                      c.response_logits)
        logprobs = losses.logprobs_from_logits(logits, mb.response_ids)
        advantages = adv.advantages[index] if correction is None else adv.advantages[index] * correction.weights[index]
        pg_loss, pg = c.policy_loss(logprobs, mb.logprobs, advantages, mb.mask, cfg.clip_eps)
        vf_loss, vf = c.value_loss(values, mb.values, adv.returns[index], mb.mask, cfg.value_clip_eps)
        # Without a bonus the entropy is only logged: keep it out of the graph.
        entropy = c.entropy(logits if cfg.entropy_coef else logits.detach(), mb.mask)
        loss = pg_loss + cfg.vf_coef * vf_loss - cfg.entropy_coef * entropy
        weighted = loss * state.engine.loss_weight(fraction)
        grad_norm = c.gradient_step(state.optimizer, state.policy.parameters(), weighted, cfg.max_grad_norm)
        # A step with gradients that are not finite is skipped (gradient_step): count it. The
        # same on every process: the gradients are averaged.
        skipped += not bool(torch.isfinite(grad_norm))
        token_means = {
            "policy/loss": pg_loss.item(),
            "value/loss": vf_loss.item(),
            "policy/entropy": entropy.item(),
            "policy/approxkl": float(pg.approxkl),
            "policy/clipfrac": float(pg.clipfrac),
            "policy/ratio_mean": float(pg.ratio_mean),
            "value/clipfrac": float(vf.clipfrac),
        }
        step_metrics = cluster.sum({k: v * fraction for k, v in token_means.items()})
        step_metrics["policy/grad_norm"] = float(grad_norm)
        if n == 0:  # before any step: 1 by construction (the doctor checks it in the log)
            first_ratio = step_metrics["policy/ratio_mean"]
        for key, value in step_metrics.items():
            totals[key] = totals.get(key, 0.0) + value
        ratio_max = max(ratio_max, cluster.max(float(pg.ratio_max)))
        n += 1
    return {key: value / n for key, value in totals.items()} | {"policy/ratio_max": ratio_max,
                                                                 "policy/ratio_first": first_ratio,
                                                                 "guard/skipped_updates": float(skipped)}


def ppo_iteration(state: PPOState, prompts: list[str], seed: int, step: int) -> tuple[Rollout, dict[str, float]]:
    """One PPO iteration: rollout, score, advantages, update, KL-controller step. Every
    random draw of iteration `step` comes from streams named by the seed and the step (a
    prompt's sample from its own, by its index in the batch), so the iteration is the
    same whether it runs first or after a resume, on one process or several."""
    streams = RowStreams(seed, ("ppo", "sampling", str(step)), list(range(len(prompts))))
    rollout, timings = make_rollout(state, prompts, streams)
    start = time.perf_counter()
    adv = compute_advantages(state, rollout)
    advantages_s = time.perf_counter() - start
    kl_coef = state.controller.value
    low, high = state.rollout_config.correction_bounds()
    correction = importance_weights(rollout.logprobs, rollout.sampled_logprobs, rollout.mask,
                                    state.rollout_config.correction, low, high)
    start = time.perf_counter()
    update = ppo_update(state, rollout, adv, torch_generator(seed, "ppo", "minibatches", str(step)), correction)
    train_s = time.perf_counter() - start
    # The sampler gets the updated weights now, and only now: the next rollout is on-policy.
    start = time.perf_counter()
    state.sampler.push(state.policy.lm)
    sync_s = time.perf_counter() - start
    metrics = rollout_metrics(rollout, adv, kl_coef, full_mismatch=not state.sampler.is_trainer) | update
    metrics |= correction_metrics(correction, rollout.mask)
    if math.isfinite(metrics["kl/mean"]):  # a NaN would stay in an adaptive beta for good
        state.controller.update(state.components.kl_signal(metrics), len(prompts))
    metrics |= {
        "lr": state.optimizer.param_groups[0]["lr"],
        "time/rollout_s": timings.sample,
        "time/score_s": timings.score,
        "time/advantages_s": advantages_s,
        "time/train_s": train_s,
        "time/sync_s": sync_s,
    }
    device = next(state.policy.parameters()).device
    if device.type == "cuda":
        metrics["memory/peak_gib"] = state.cluster.max(torch.cuda.max_memory_allocated(device) / 2**30)
    return rollout, metrics


def rollout_metrics(rollout: Rollout, adv: Advantages, kl_coef: float, full_mismatch: bool = False
                    ) -> dict[str, float]:
    """Reward, KL, advantage and response statistics of one rollout batch (before the
    update), and its sampler/trainer mismatch: the logprob gap always, and with
    `full_mismatch` (a sampler that is not the trainer) its KL and importance ratio too."""
    mask = rollout.mask
    log_ratio = (rollout.logprobs - rollout.ref_logprobs) * mask
    k1 = log_ratio.sum(1)
    k3 = (kl_estimate(rollout.logprobs, rollout.ref_logprobs, "k3") * mask).sum(1)
    lengths = mask.sum(1).float()
    # Undefined (and left out) when every response has the same length, e.g. none ends.
    length_corr = pearson(rollout.proxy, lengths)
    mismatch = mismatch_metrics(rollout.logprobs, rollout.sampled_logprobs, mask)
    return {
        "reward/proxy_mean": float(rollout.proxy.mean()),
        "reward/proxy_std": float(rollout.proxy.std()),
        "reward/score_mean": float(rollout.scores.mean()),
        # What the advantages were computed from: the shaped per-token rewards, summed.
        "reward/total_mean": float((adv.rewards * mask).sum(1).mean()),
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
        # The sampler's logprobs (its KV-cache passes, or the engine's) against the padded training
        # forward's for the same tokens: float noise when both are one model, growing when the
        # sampler's weights lag.
        **(mismatch if full_mismatch else {"mismatch/logp_abs_diff": mismatch["mismatch/logp_abs_diff"]}),
    }
