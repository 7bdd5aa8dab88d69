"""Canonical metric names (DESIGN.md) and the mapping from TRL's PPO names to them."""

from __future__ import annotations

PPO_METRICS = (
    "reward/proxy_mean", "reward/proxy_std", "reward/gold_mean", "reward/total_mean",
    "kl/mean", "kl/k3_mean", "kl/coef",
    "policy/entropy", "policy/approxkl", "policy/clipfrac", "policy/ratio_mean", "policy/ratio_max",
    "policy/loss", "policy/grad_norm",
    "value/loss", "value/clipfrac", "value/explained_variance",
    "adv/mean", "adv/std",
    "response/length_mean", "response/eos_rate", "response/distinct_1", "response/distinct_2",
    "response/self_bleu", "lr", "time/rollout_s", "time/train_s", "tokens/generated",
)
# Logged by rlhflab beyond the canonical set; known, so never reported as unknown.
EXTRA_METRICS = (
    "reward/score_mean", "reward/length_corr", "response/identical_frac", "prompts/unique_frac", "time/score_s", "time/advantages_s",
    "guard/skipped_updates", "epoch",
)
REWARD_METRICS = ("rm/train_loss", "rm/train_acc", "rm/val_acc", "rm/gold_agreement", "rm/length_corr")
PRETRAIN_METRICS = ("lm/train_loss", "lm/val_loss", "lm/grammatical_rate")
KNOWN = frozenset(PPO_METRICS + EXTRA_METRICS + REWARD_METRICS + PRETRAIN_METRICS)

# TRL PPOTrainer (trl.experimental.ppo / trl.trainer.ppo_trainer) log_history names.
TRL_PPO_NAMES = {
    "objective/kl": "kl/mean",  # mean over the batch of the per-sequence k1 sum, as ours
    "objective/entropy": "policy/sequence_entropy",  # per-sequence sum of -logprobs
    "objective/non_score_reward": "reward/kl_penalty_mean",
    "objective/rlhf_reward": "reward/total_mean",
    "objective/scores": "reward/proxy_mean",
    "policy/approxkl_avg": "policy/approxkl",
    "policy/clipfrac_avg": "policy/clipfrac",
    "policy/entropy_avg": "policy/entropy",
    "loss/policy_avg": "policy/loss",
    "loss/value_avg": "value/loss",
    "val/clipfrac_avg": "value/clipfrac",
    "val/ratio": "policy/ratio_mean",
    "val/ratio_var": "policy/ratio_var",
    "val/num_eos_tokens": "response/eos_count",
    "learning_rate": "lr",
    "lr": "lr",
}
# Bookkeeping columns of TRL's log_history that carry no training signal.
TRL_IGNORED = frozenset({"eps", "episode", "epoch", "step", "total_flos", "train_runtime",
                         "train_samples_per_second", "train_steps_per_second", "train_loss"})
TRL_KNOWN = frozenset(set(TRL_PPO_NAMES.values()))
