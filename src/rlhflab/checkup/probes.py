"""The checkup: cheap probes that localise a bug without a training run.

Each probe builds what it needs from a run's stage-1 and stage-2 models (and the PPO
components in use, so a fault's replacement is what gets probed), measures one number,
and passes when it is within a tolerance. A failed probe names its component; the
doctor ranks that component first for the findings of the same run.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Callable

import torch

from rlhflab.config import PipelineConfig
from rlhflab.data.batching import encode_prompts, encode_responses, join_prompt_response
from rlhflab.data.files import PreferenceRecord
from rlhflab.data.prompt_pool import PromptSource
from rlhflab.distributed import default_device
from rlhflab.doctor.findings import Component
from rlhflab.doctor.rules.responses import EOS_RATE_LIMIT, PROMPT_UNIQUE_LIMIT
from rlhflab.doctor.rules.reward_model import RM_LENGTH_CORR_LIMIT, RM_VAL_ACC_LIMIT
from rlhflab.metrics.stats import pearson
from rlhflab.models.forward import response_logprobs
from rlhflab.models.precision import forward_dtype
from rlhflab.ppo import losses
from rlhflab.ppo.components import PPOComponents
from rlhflab.ppo.rollout import make_rollout
from rlhflab.ppo.trainer import PPOState, compute_advantages, load_ppo_state
from rlhflab.runs import RunDir, write_json
from rlhflab.seeding import derive_seed, torch_generator
from rlhflab.sources import context_length, policy_dir, preference_data, prompt_task
from rlhflab.worlds.reviews import ReviewsWorld


@dataclass(frozen=True)
class ProbeResult:
    name: str
    component: Component
    passed: bool
    measured: float
    tolerance: str
    detail: str


class ProbeSkipped(Exception):
    """A probe that cannot run on this input (e.g. no labelled pairs to test the RM on)."""


@dataclass
class ProbeContext:
    """What the probes share: one PPO state and one rollout from it, before any update.
    `world` is the embedded world when the run uses it; own models bring their prompts
    (`source`) and, optionally, held-out preference pairs to test the reward model on."""

    config: PipelineConfig
    state: PPOState
    source: PromptSource
    prompts: list[str]
    world: ReviewsWorld | None = None
    pairs: tuple[PreferenceRecord, ...] = ()

    def rollout(self):
        generator = torch_generator(self.config.seed, "checkup", "sampling")
        return make_rollout(self.state.policy, self.state.reference, self.state.reward, self.state.tokenizer,
                            self.prompts, self.config.ppo.response_length, self.config.ppo.temperature, generator,
                            self.state.components)


# Tolerances of the probes that compare two forward passes, by the dtype the forwards run
# in. fp32: last-bit differences of the kernels (healthy runs measure <= 2.4e-6). bf16
# (CUDA autocast; measured by bench/checkup_bf16.py with CPU bf16 autocast on the smoke
# run, no GPU being at hand; table in docs/benchmarks.md): healthy, the sampler's KV-cache
# logprobs differ from the padded forward's by up to 0.041 and a reward read alone or in a
# batch by 9.8e-4, while the faults these probes catch move them by 2.9 or more
# (temperature_mismatch, logprob_off_by_one, dropout_in_rollout, no_response_mask) and
# 1.4 (rm_reads_pad); each bf16 tolerance sits about 6x and more above the healthy value
# and 10x below the smallest fault's.
FORWARD_TOLERANCES: dict[str, dict[torch.dtype, float]] = {
    "kl_zero_before_update": {torch.float32: 1e-4, torch.bfloat16: 1e-4},  # one forward path: 0 in both
    "first_ratio_is_one": {torch.float32: 1e-5, torch.bfloat16: 1e-5},  # one forward path: 0 in both
    "sampled_logprobs_match_training_forward": {torch.float32: 1e-4, torch.bfloat16: 0.25},
    "logprob_padding_invariance": {torch.float32: 1e-4, torch.bfloat16: 0.05},
    "reward_padding_invariance": {torch.float32: 1e-4, torch.bfloat16: 0.05},
}


def _forward_result(ctx: "ProbeContext", name: str, component, measured: float, detail: str) -> ProbeResult:
    """A probe comparing two forward passes, against the tolerance of the forwards' dtype."""
    dtype = forward_dtype(next(ctx.state.policy.parameters()).device)
    result = _result(name, component, measured, FORWARD_TOLERANCES[name][dtype], detail)
    return replace(result, tolerance=f"{result.tolerance} ({str(dtype).removeprefix('torch.')})")


def _result(name, component, measured: float, limit: float, detail: str, below: bool = True) -> ProbeResult:
    passed = measured <= limit if below else measured >= limit
    return ProbeResult(name, component, bool(passed), float(measured), f"{'<=' if below else '>='} {limit:g}", detail)


def probe_kl_zero_before_update(ctx: ProbeContext) -> ProbeResult:
    rollout = ctx.rollout()
    kl = float(((rollout.logprobs - rollout.ref_logprobs) * rollout.mask).sum(1).abs().max())
    return _forward_result(ctx, "kl_zero_before_update", "logprob_bookkeeping", kl,
                   "max |per-sequence KL| between the untrained policy and the reference")


def probe_first_ratio_is_one(ctx: ProbeContext) -> ProbeResult:
    rollout = ctx.rollout()
    adv = compute_advantages(ctx.state, rollout)
    size = len(rollout.prompts) // ctx.config.ppo.minibatches
    mb = rollout.select(torch.arange(size))
    with torch.no_grad():
        logits, _ = ctx.state.policy(mb.input_ids, mb.attention_mask, mb.prompt_len, ctx.config.ppo.temperature,
                                     ctx.state.components.response_logits)
        logprobs = losses.logprobs_from_logits(logits, mb.response_ids)
        _, stats = ctx.state.components.policy_loss(logprobs, mb.logprobs, adv.advantages[:size], mb.mask,
                                                    ctx.config.ppo.clip_eps)
    deviation = max(abs(float(stats.ratio_mean) - 1.0), float(stats.approxkl))
    return _forward_result(ctx, "first_ratio_is_one", "logprob_bookkeeping", deviation,
                   "max(|ratio_mean - 1|, approxkl) on the first minibatch before any update")


def probe_sampled_logprobs_match(ctx: ProbeContext) -> ProbeResult:
    rollout = ctx.rollout()
    gap = float((rollout.sampled_logprobs - rollout.logprobs)[rollout.mask].abs().max())
    return _forward_result(ctx, "sampled_logprobs_match_training_forward", "logprob_bookkeeping", gap,
                   "max |logprob at sampling - logprob in the padded training forward|")


def _alone_and_batched(ctx: ProbeContext, rows: int = 4):
    """(one row alone, the same row inside the padded batch) for the first `rows` rows."""
    rollout = ctx.rollout()
    batch_ids, batch_mask = join_prompt_response(rollout.prompt_ids, rollout.prompt_mask,
                                                 rollout.response_ids, rollout.mask)
    for row in range(min(rows, len(rollout.prompts))):
        prompt = rollout.prompt_ids[row][rollout.prompt_mask[row]][None]
        response = rollout.response_ids[row][rollout.mask[row]][None]
        ids = torch.cat([prompt, response], 1)
        yield (ids, torch.ones_like(ids, dtype=torch.bool), prompt.shape[1]), \
              (batch_ids, batch_mask, rollout.prompt_len, row, rollout.mask[row])


@torch.no_grad()
def probe_logprob_padding_invariance(ctx: ProbeContext) -> ProbeResult:
    """A sequence's logprobs alone and inside a left/right-padded batch."""
    lm, T, logits_fn = ctx.state.policy.lm, ctx.config.ppo.temperature, ctx.state.components.response_logits
    worst = 0.0
    for (ids, mask, P), (batch_ids, batch_mask, batch_P, row, real) in _alone_and_batched(ctx):
        alone = response_logprobs(lm, ids, mask, P, T, logits_fn)[0]
        batched = response_logprobs(lm, batch_ids, batch_mask, batch_P, T, logits_fn)[row][real]
        worst = max(worst, float((alone - batched).abs().max()))
    return _forward_result(ctx, "logprob_padding_invariance", "logprob_bookkeeping", worst,
                   "max |logprob of a sequence alone - in a padded batch|")


@torch.no_grad()
def probe_reward_padding_invariance(ctx: ProbeContext) -> ProbeResult:
    """A sequence's reward-model score alone and inside a padded batch (through the reward
    model's own tokenizer when it has another vocabulary)."""
    score = ctx.state.reward.raw_scores
    worst = 0.0
    for (ids, mask, _), (batch_ids, batch_mask, _, row, _) in _alone_and_batched(ctx):
        worst = max(worst, abs(float(score(ids, mask)[0] - score(batch_ids, batch_mask)[row])))
    return _forward_result(ctx, "reward_padding_invariance", "reward_model", worst,
                   "max |reward score of a sequence alone - in a padded batch|")


def probe_reference_frozen(ctx: ProbeContext) -> ProbeResult:
    policy_ptrs = {p.untyped_storage().data_ptr() for p in ctx.state.policy.parameters()}
    shared = sum(p.untyped_storage().data_ptr() in policy_ptrs for p in ctx.state.reference.parameters())
    trainable = sum(p.requires_grad for p in ctx.state.reference.parameters())
    return _result("reference_frozen_and_separate", "kl_control", shared + trainable, 0,
                   f"{shared} reference tensors share storage with the policy, {trainable} require grad")


def probe_mask_covers_response(ctx: ProbeContext) -> ProbeResult:
    rollout = ctx.rollout()
    eos = ctx.state.tokenizer.eos_token_id
    wrong = 0
    for ids, mask in zip(rollout.response_ids, rollout.mask):
        hits = (ids == eos).nonzero().flatten()
        end = int(hits[0]) + 1 if len(hits) else len(ids)
        expected = torch.arange(len(ids), device=ids.device) < end
        wrong += int((expected != mask).sum())
    return _result("mask_covers_response_through_eos", "advantages_values", wrong, 0,
                   "response positions where the loss mask differs from 'up to and including the first EOS'")


def probe_gae_matches_naive_loop(ctx: ProbeContext) -> ProbeResult:
    rollout = ctx.rollout()
    g = torch.Generator().manual_seed(0)
    rewards = torch.randn(rollout.mask.shape, generator=g).to(rollout.mask.device) * rollout.mask
    values = torch.randn(rollout.mask.shape, generator=g).to(rollout.mask.device) * rollout.mask
    gamma, lam = ctx.config.ppo.gamma, ctx.config.ppo.lam
    advantages, _ = ctx.state.components.gae(rewards, values, rollout.mask, gamma, lam)
    worst = 0.0
    for b in range(rewards.shape[0]):
        real = rollout.mask[b].nonzero().flatten().tolist()
        running = 0.0
        for k in reversed(range(len(real))):
            t = real[k]
            next_value = float(values[b, real[k + 1]]) if k + 1 < len(real) else 0.0
            delta = float(rewards[b, t]) + gamma * next_value - float(values[b, t])
            running = delta + gamma * lam * running
            worst = max(worst, abs(running - float(advantages[b, t])))
    return _result("gae_matches_naive_loop", "advantages_values", worst, 1e-4,
                   "max |gae() - a per-token reference loop| on random rewards and values")


def probe_reward_model_health(ctx: ProbeContext) -> list[ProbeResult]:
    if ctx.pairs:
        (accuracy, length_corr), what = _pair_accuracy(ctx), "held-out preference pairs from the user's file"
    elif ctx.world is not None:
        (accuracy, length_corr), what = _world_accuracy(ctx), "fresh labelled pairs of stage-1 samples"
    else:
        raise ProbeSkipped("no labelled pairs: give --pairs FILE to test the reward model")
    return [
        _result("rm_prefers_chosen", "reward_model", accuracy, RM_VAL_ACC_LIMIT.value, f"accuracy on {what}",
                below=False),
        _result("rm_score_not_mostly_length", "reward_model", abs(length_corr), RM_LENGTH_CORR_LIMIT.value,
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


def probe_reward_normalised(ctx: ProbeContext) -> ProbeResult:
    rollout = ctx.rollout()
    std = float(rollout.proxy.std())
    return _result("rewards_standardised", "reward_scaling", abs(std - 1.0), 0.5,
                   f"|std of standardised scores of untrained-policy samples - 1| (std = {std:.3f})")


def probe_responses_end(ctx: ProbeContext) -> ProbeResult:
    rollout = ctx.rollout()
    return _result("responses_end", "sampling", float(rollout.has_eos.float().mean()), EOS_RATE_LIMIT.value,
                   f"fraction of the untrained policy's responses that end with EOS within "
                   f"ppo.response_length = {ctx.config.ppo.response_length}", below=False)


def probe_prompts_distinct(ctx: ProbeContext) -> ProbeResult:
    # The first batch PPO trains on, drawn exactly as the trainer draws it.
    prompts = ctx.state.components.prompts(ctx.source, ctx.config.ppo.batch_size,
                                           derive_seed(ctx.config.seed, "ppo-prompts", "0"))
    return _result("prompts_distinct", "prompt_data", len(set(prompts)) / len(prompts), PROMPT_UNIQUE_LIMIT.value,
                   "fraction of distinct prompts in the first PPO batch", below=False)


PROBES: tuple[Callable[[ProbeContext], ProbeResult | list[ProbeResult]], ...] = (
    probe_kl_zero_before_update, probe_first_ratio_is_one, probe_sampled_logprobs_match,
    probe_logprob_padding_invariance, probe_reward_padding_invariance,
    probe_reference_frozen, probe_mask_covers_response, probe_gae_matches_naive_loop, probe_reward_model_health,
    probe_reward_normalised, probe_responses_end, probe_prompts_distinct,
)


def run_probes(ctx: ProbeContext, out_dir: Path) -> list[ProbeResult]:
    """Every probe on `ctx`; writes out_dir/checkup.json with the results and the probes
    that could not run, and why."""
    results: list[ProbeResult] = []
    skipped: dict[str, str] = {}
    for probe in PROBES:
        try:
            out = probe(ctx)
        except ProbeSkipped as why:
            skipped[probe.__name__.removeprefix("probe_")] = str(why)
            continue
        results.extend(out if isinstance(out, list) else [out])
    write_json(Path(out_dir) / "checkup.json", {"probes": [asdict(r) for r in results], "skipped": skipped})
    return results


def run_checkup(config: PipelineConfig, run: RunDir, components: PPOComponents = PPOComponents()) -> list[ProbeResult]:
    """Every probe on a run's models (its stages, or the user's `data.policy` and
    `data.reward_model`) and prompts; writes RUN/checkup.json. The reward model is tested
    on the held-out share of `data.preferences`, or on fresh labelled world samples."""
    state = load_ppo_state(config, run, components, default_device())
    context = context_length(policy_dir(config, run), config)
    task = prompt_task(config, state.tokenizer, context)
    prompts = task.train.prompts(config.ppo.batch_size, derive_seed(config.seed, "checkup-prompts"))
    pairs = tuple(preference_data(config, state.tokenizer, context)[1]) if config.data.preferences else ()
    return run_probes(ProbeContext(config, state, task.train, prompts, task.world, pairs), run.root)
