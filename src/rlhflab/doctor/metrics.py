"""The canonical metric names (DESIGN.md, docs/metrics.md), each with its unit.

Formats map their trainer's names onto these; the table converts a logged series to the
unit given here when the log allows it. Names outside this registry that a format maps
(e.g. TRL's `objective/non_score_reward`) are known to that format, and kept.
"""

from __future__ import annotations

from rlhflab.doctor.units import Unit

PPO_METRICS: dict[str, Unit] = {
    "reward/proxy_mean": "value", "reward/proxy_std": "value", "reward/gold_mean": "value",
    "reward/total_mean": "value",
    "kl/mean": "nats/sequence", "kl/k3_mean": "nats/sequence", "kl/coef": "value",
    "policy/entropy": "nats/token", "policy/approxkl": "value", "policy/clipfrac": "fraction",
    "policy/ratio_mean": "value", "policy/ratio_max": "value", "policy/loss": "value", "policy/grad_norm": "value",
    "value/loss": "value", "value/clipfrac": "fraction", "value/explained_variance": "value",
    "adv/mean": "value", "adv/std": "value",
    "response/length_mean": "tokens", "response/eos_rate": "fraction",
    "response/distinct_1": "fraction", "response/distinct_2": "fraction", "response/self_bleu": "fraction",
    "lr": "value", "time/rollout_s": "seconds", "time/train_s": "seconds", "tokens/generated": "tokens",
}
# Canonical names that other trainers' logs fill (DESIGN.md); rlhflab logs the equivalents above.
OTHER_TRAINERS_METRICS: dict[str, Unit] = {
    "kl/token_mean": "nats/token", "response/truncated_frac": "fraction", "reward/zero_std_frac": "fraction",
}
# How far the inference engine's logprobs are from the trainer's for the same sampled tokens
# (the training-inference mismatch), each quantity in the unit its trainers log it in.
MISMATCH_METRICS: dict[str, Unit] = {
    "mismatch/logp_abs_diff": "nats/token",  # mean |logp_trainer - logp_sampler| over response tokens
    "mismatch/prob_abs_diff": "value",  # mean |p_trainer - p_sampler| (a probability difference)
    "mismatch/kl": "nats/token",  # a per-token KL estimate between sampler and trainer (estimator as logged)
    "mismatch/prob_ratio_error": "value",  # mean exp(|logp_trainer - logp_sampler|): 1 is a perfect match
    "mismatch/is_ratio_mean": "value",  # mean importance ratio pi_trainer / pi_sampler: 1 is a perfect match
}
# Logged by rlhflab beyond the canonical set; known, so never reported as unknown.
EXTRA_METRICS: dict[str, Unit] = {
    "reward/score_mean": "value", "reward/length_corr": "value", "response/identical_frac": "fraction",
    "prompts/unique_frac": "fraction", "time/score_s": "seconds", "time/advantages_s": "seconds",
    "guard/skipped_updates": "count", "epoch": "value", "policy/ratio_first": "value",
    "memory/peak_gib": "value",  # GiB: the largest CUDA allocation of any process so far
    "time/sync_s": "seconds",  # pushing the updated weights to the sampler (`rollout.engine`)
    "correction/weight_mean": "value",  # the importance weights' mean over response tokens (`rollout.correction`)
    "correction/changed_frac": "fraction",  # response tokens whose weight was truncated or masked
}
# Measured by the doctor from sample files (doctor/sample_measures.py), per step, over the
# words of the responses kept that step: pooled across them, or averaged over them.
TEXT_METRICS: dict[str, Unit] = {
    "text/samples": "count",  # responses measured at the step
    "text/distinct_1": "fraction",  # unique words / words, pooled over the step's responses (Li et al. 2016)
    "text/distinct_2": "fraction",  # unique word bigrams / bigrams, pooled
    "text/opening_share": "fraction",  # share of responses opening with the step's most common first 3 words (of all)
    "text/near_duplicate_frac": "fraction",  # responses whose word bigrams resemble another's (Jaccard >= 0.8)
    "text/identical_frac": "fraction",  # responses with an exact duplicate (same words) that step
    "text/repetition": "fraction",  # mean seq-rep-2 within a response (Welleck et al. 2019)
    "text/prompt_copy": "fraction",  # mean share of a response's word trigrams found in its prompt
    "text/length_words": "words",  # mean response length
    "text/truncated_frac": "fraction",  # responses cut at the length limit (where the file tells)
    "text/reward_mean": "value",  # mean reward of the measured responses
    "text/reward_length_corr": "value",  # Pearson correlation of reward with length over the step's responses
    "text/reward_repetition_corr": "value",  # ... with seq-rep-2
    "text/reward_gold_corr": "value",  # ... with the samples' gold, where they carry one: the proxy tracking the truth
}
REWARD_METRICS: dict[str, Unit] = {
    "rm/train_loss": "value", "rm/train_acc": "fraction", "rm/val_acc": "fraction",
    "rm/gold_agreement": "fraction", "rm/length_corr": "value",
}
PRETRAIN_METRICS: dict[str, Unit] = {"lm/train_loss": "value", "lm/val_loss": "value",
                                     "lm/grammatical_rate": "fraction"}

CANONICAL: dict[str, Unit] = (PPO_METRICS | OTHER_TRAINERS_METRICS | MISMATCH_METRICS | EXTRA_METRICS | TEXT_METRICS
                              | REWARD_METRICS | PRETRAIN_METRICS)
KNOWN = frozenset(CANONICAL)
# Evaluation metrics (a trainer's `eval_*` rows) are kept under this prefix, apart from
# the training series they share names with.
EVAL_PREFIX = "eval/"
# One series per reward function of a run scored by several (TRL's `rewards/<function>/mean`).
REWARD_FUNCTION_PREFIX = "reward/function/"


def canonical_unit(name: str) -> Unit | None:
    """The unit the doctor expects `name` in, or None for a name outside the registry."""
    return CANONICAL.get(name)
