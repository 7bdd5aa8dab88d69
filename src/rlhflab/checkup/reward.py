"""Probes of the reward model and its scaling: it prefers chosen over rejected responses on
held-out pairs, is not mostly length, is read at a response's last token, scores a sequence
the same alone or in any batch and with either padding side, and its standardised scores
have unit spread."""

from __future__ import annotations

import torch

from rlhflab.checkup.context import ProbeContext
from rlhflab.checkup.logprobs import alone_and_batched
from rlhflab.checkup.results import ProbeResult, ProbeSkipped, forward_within, within
from rlhflab.data.batching import encode_prompts, encode_responses, join_prompt_response
from rlhflab.doctor import THRESHOLDS
from rlhflab.metrics.stats import pearson
from rlhflab.models.precision import autocast
from rlhflab.seeding import derive_seed, torch_generator


def probe_reward_model_health(ctx: ProbeContext) -> list[ProbeResult]:
    if ctx.pairs:
        (accuracy, length_corr), what = _pair_accuracy(ctx), "held-out preference pairs from the user's file"
    elif ctx.world is not None:
        (accuracy, length_corr), what = _world_accuracy(ctx), "fresh labelled pairs of stage-1 samples"
    else:
        raise ProbeSkipped("no labelled pairs: give --pairs FILE to test the reward model")
    return [
        within("rm_prefers_chosen", "reward_model", accuracy, THRESHOLDS["RM_VAL_ACC_LIMIT"].value, f"accuracy on {what}",
               below=False),
        within("rm_score_not_mostly_length", "reward_model", abs(length_corr), THRESHOLDS["RM_LENGTH_CORR_LIMIT"].value,
               "|corr(score, response length)| on those pairs"),
    ]


def _world_accuracy(ctx: ProbeContext) -> tuple[float, float]:
    from rlhflab.stages.reward import evaluate_reward_model, sample_comparisons

    cfg = ctx.config.reward
    prompts = ctx.world.prompts(64, derive_seed(ctx.config.seed, "checkup-rm-prompts"))
    pairs = sample_comparisons(ctx.state.reference, ctx.state.tokenizer, ctx.world, prompts, cfg.responses_per_prompt,
                               cfg.response_length, cfg.sample_temperature, derive_seed(ctx.config.seed, "checkup-labels"),
                               torch_generator(ctx.config.seed, "checkup", "rm"))
    reward = ctx.state.reward
    metrics = evaluate_reward_model(reward.model, pairs, pairs, lambda model, ids, mask: reward.raw_scores(ids, mask))
    return metrics["rm/val_acc"], metrics["rm/length_corr"]


@torch.no_grad()
def _pair_accuracy(ctx: ProbeContext, batch_size: int = 64) -> tuple[float, float]:
    """Share of pairs whose chosen response outscores the rejected one, and corr(score, length)."""
    tokenizer, reward = ctx.state.tokenizer, ctx.state.reward
    prompts = [p.prompt for p in ctx.pairs] * 2
    responses = [p.chosen for p in ctx.pairs] + [p.rejected for p in ctx.pairs]
    scores, lengths = [], []
    for start in range(0, len(prompts), batch_size):
        device = next(reward.model.parameters()).device
        prompt_ids, prompt_mask = (t.to(device) for t in encode_prompts(tokenizer, prompts[start : start + batch_size]))
        response_ids, response_mask = (t.to(device) for t in
                                       encode_responses(tokenizer, responses[start : start + batch_size]))
        ids, mask = join_prompt_response(prompt_ids, prompt_mask, response_ids, response_mask)
        scores.append(reward.raw_scores(ids, mask))
        lengths.append(response_mask.sum(1).float())
    score, length = torch.cat(scores), torch.cat(lengths)
    n = len(ctx.pairs)
    return float((score[:n] > score[n:]).float().mean()), pearson(score, length)


@torch.no_grad()
def probe_reward_padding_invariance(ctx: ProbeContext) -> ProbeResult:
    """A sequence's reward-model score alone and inside a padded batch of other sequences
    (through the reward model's own tokenizer when it has another vocabulary)."""
    score = ctx.state.reward.raw_scores
    worst = 0.0
    for (ids, mask, _), (batch_ids, batch_mask, _, row, _) in alone_and_batched(ctx):
        worst = max(worst, abs(float(score(ids, mask)[0] - score(batch_ids, batch_mask)[row])))
    return forward_within("reward_padding_invariance", "reward_model", worst, ctx.dtype,
                          "max |reward score of a sequence alone - in a padded batch|")


@torch.no_grad()
def probe_reward_read_at_the_last_token(ctx: ProbeContext) -> ProbeResult:
    """The score the trainer reads for a rollout row in its padded batch is the reward
    model's output at that row's last token, the row scored alone and unpadded: stage 2
    trains the head there, and alone and unpadded the last position is the last real token,
    with no mask arithmetic (a second path). A score read at padding, one token early or at
    the prompt fails. A classifier without a per-position head (an encoder's pooled one) is
    read through its own forward."""
    rollout, reward = ctx.rollout(), ctx.state.reward
    batched = reward.raw_scores(rollout.input_ids, ctx.attention_mask())
    model, worst = reward.model, 0.0
    for (ids, mask, _), (_, _, _, row, _) in alone_and_batched(ctx):
        if reward.encode is not None:
            ids, mask = reward.encode(ids, mask)
        with autocast(ids.device):
            if hasattr(model, "score"):
                own = model.score(model.base_model(input_ids=ids).last_hidden_state[:, -1]).squeeze(-1)
            else:
                own = model(input_ids=ids).logits[:, 0]
        worst = max(worst, abs(float(own.float()[0] - batched[row])))
    return forward_within("reward_read_at_the_last_token", "reward_model", worst, ctx.dtype,
                          "max |score the trainer reads in the padded batch - the reward head at the last token of "
                          "the row alone, unpadded|")


def _left_aligned(ids: torch.Tensor, mask: torch.Tensor, pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The same rows with every padding token moved to the left."""
    order = torch.argsort(mask.long(), dim=1, stable=True)  # padding (0) first, real tokens in their order
    return torch.where(mask.gather(1, order), ids.gather(1, order), pad_id), mask.gather(1, order)


@torch.no_grad()
def probe_reward_padding_side_invariance(ctx: ProbeContext) -> ProbeResult:
    """The rollout's rows scored as the trainer pads them ([left-padded prompt |
    right-padded response]) and with all their padding on the left."""
    rollout, score = ctx.rollout(), ctx.state.reward.raw_scores
    ids, mask = rollout.input_ids, ctx.attention_mask()
    left_ids, left_mask = _left_aligned(ids, mask, ctx.state.tokenizer.pad_token_id)
    gap = float((score(ids, mask) - score(left_ids, left_mask)).abs().max())
    return forward_within("reward_padding_side_invariance", "reward_model", gap, ctx.dtype,
                          "max |reward score with the trainer's padding - with all padding on the left|")


def probe_reward_normalised(ctx: ProbeContext) -> ProbeResult:
    std = float(ctx.rollout().proxy.std())
    return within("rewards_standardised", "reward_scaling", abs(std - 1.0), 0.5,
                  f"|std of standardised scores of untrained-policy samples - 1| (std = {std:.3f})")


@torch.no_grad()
def probe_scores_standardised_with_the_models_statistics(ctx: ProbeContext) -> ProbeResult:
    """The proxy the rollout got is the reward model's raw score standardised with the mean
    and std stored with the model at the end of stage 2 (raw when `ppo.normalize_reward` is
    off): the definition of the transform, whatever the scores' spread happens to be."""
    rollout, reward = ctx.rollout(), ctx.state.reward
    raw = reward.raw_scores(rollout.input_ids, ctx.attention_mask())
    expected = (raw - reward.mean) / reward.std if reward.normalize else raw
    gap = float((rollout.proxy - expected).abs().max())
    return within("scores_standardised_with_the_models_statistics", "reward_scaling", gap, 1e-4,
                  f"max |proxy - (raw score - {reward.mean:.4g}) / {reward.std:.4g}| (the reward model's stored "
                  f"statistics; normalize_reward = {reward.normalize})")
