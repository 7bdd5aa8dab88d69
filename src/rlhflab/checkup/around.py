"""Probes of the pipeline around the PPO step, each on the component the run uses: stage 1's
objective, stage 2's epochs and held-out split, the held-out evaluation, what a resume
restores, and the prompts each iteration draws."""

from __future__ import annotations

import json
import math
import statistics
import tempfile
from pathlib import Path

import torch

from rlhflab.checkpoint import ResumePoint, save_checkpoint
from rlhflab.checkup.context import ProbeContext
from rlhflab.checkup.results import ProbeResult, ProbeSkipped, within
from rlhflab.data.batching import encode_sft
from rlhflab.metrics.diversity import distinct_n, self_bleu
from rlhflab.models.precision import autocast
from rlhflab.ppo.kl import AdaptiveKLController
from rlhflab.ppo.rollout import make_rollout
from rlhflab.ppo.samplers import NativeSampler
from rlhflab.seeding import RowStreams, derive_seed
from rlhflab.worlds.reviews.world import prompt_split


# --- stage 1 --------------------------------------------------------------------------------------
def probe_stage1_loss_is_the_token_mean(ctx: ProbeContext) -> ProbeResult:
    """Stage 1's objective (`lm_loss`) on a batch of texts of different lengths, each
    `<bos> text <eos>`: it must be the mean over every target token of the batch (EOS
    included) of -log p(token), computed here token by token from the model's own
    distribution (a loop as the second path). An objective without the EOS (a model that
    never learns to stop) or a mean of per-text means (short texts weighing more) differs."""
    tokenizer, lm = ctx.state.tokenizer, ctx.state.policy.lm
    texts = [("", p) for p in ctx.prompts[:6]] + [("", " ".join(ctx.prompts[:3]))]
    ids, mask, targets = encode_sft(tokenizer, texts, 10_000)
    was_training = lm.training
    lm.eval()
    with torch.no_grad():
        loss = float(ctx.state.components.lm_loss(lm, ids, mask, targets))
        with autocast(ids.device):  # the dtype the objective's own forward runs in
            logits = lm(input_ids=ids, attention_mask=mask.long()).logits
        logprobs = torch.log_softmax(logits.double(), dim=-1)
    lm.train(was_training)
    total, count = 0.0, 0
    for row in range(ids.shape[0]):
        for position in range(1, ids.shape[1]):
            if targets[row, position]:
                total -= float(logprobs[row, position - 1, ids[row, position]])
                count += 1
    expected = total / count
    return within("stage1_loss_is_the_token_mean", "stage1", abs(loss - expected) / expected, 1e-4,
                  f"relative difference between stage 1's loss on {len(texts)} texts ({loss:.5f}) and the mean over "
                  f"their {count} target tokens, EOS included ({expected:.5f})")


# --- stage 2 --------------------------------------------------------------------------------------
def probe_reward_epochs_reshuffle(ctx: ProbeContext) -> ProbeResult:
    """Two epochs of the reward model's batches (`reward_batches`) drawn from one generator,
    as stage 2 draws them: each visits every training prompt once, and the second in
    another order than the first (a shuffle never told the epoch repeats the first)."""
    lengths = torch.randint(4, 40, (96,), generator=torch.Generator().manual_seed(0))
    generator = torch.Generator().manual_seed(derive_seed(ctx.config.seed, "checkup", "reward-order"))
    epochs = [ctx.state.components.reward_batches(lengths, 8, generator) for _ in range(2)]
    orders = [torch.cat(batches).tolist() for batches in epochs]
    missed = max(len(set(range(len(lengths))) ^ set(order)) + abs(len(order) - len(lengths)) for order in orders)
    same = float(orders[0] == orders[1])
    return within("reward_epochs_reshuffle", "reward_model", missed + same, 0.0,
                  f"rows missed or repeated in an epoch ({missed}), plus 1 if the second epoch repeats the first's "
                  f"order ({same:.0f})")


def probe_held_out_comparisons_apart(ctx: ProbeContext) -> ProbeResult:
    """Which labelled comparisons train the reward model and which hold it out
    (`comparison_split`), at the configured counts: the held-out ones are as many as asked,
    and none of them is a training one (a held-out accuracy on training pairs measures
    memory, not the reward model)."""
    from rlhflab.stages.reward import prompts_for  # the stage's own counts

    cfg = ctx.config.reward
    n_train, n_val = (prompts_for(n, cfg.responses_per_prompt) for n in (cfg.pairs, cfg.val_pairs))
    train, val = ctx.state.components.comparison_split(n_train, n_val)
    shared = len(set(train.tolist()) & set(val.tolist()))
    wrong_size = abs(len(set(val.tolist())) - n_val) + abs(len(set(train.tolist())) - n_train)
    return within("held_out_comparisons_apart", "reward_model", float(shared + wrong_size), 0.0,
                  f"held-out comparisons that are training ones ({shared}), plus those missing from the counts asked "
                  f"({wrong_size}; {n_train} training and {n_val} held-out prompts)")


# --- the held-out evaluation ------------------------------------------------------------------------
def probe_evaluation_scores_every_prompt(ctx: ProbeContext) -> ProbeResult:
    """The held-out evaluation (`evaluate`) of the policy on a few prompts, against their
    rollout sampled from the same streams (the second path): its mean length, proxy reward,
    KL, EOS rate, gold and grammaticality (on the world) and diversity must be those of every
    prompt it was given and its response (an evaluation that drops a batch, scores other
    responses or pairs a response with another prompt differs)."""
    cfg = ctx.config.ppo
    prompts = ctx.prompts[:10]
    streams = RowStreams(derive_seed(ctx.config.seed, "checkup", "evaluation"), ("eval",), list(range(len(prompts))))
    with torch.no_grad():
        try:
            metrics = ctx.state.components.evaluate(ctx.state, ctx.world, prompts, cfg.response_length,
                                                    cfg.temperature, streams)
        except (ArithmeticError, IndexError, ValueError) as err:  # an evaluation of no prompt divides by 0
            metrics = {"error": f"{type(err).__name__}: {err}"}
        rollout, _ = make_rollout(ctx.state, prompts, streams.subset(list(range(len(prompts)))), cfg.response_length,
                                  cfg.temperature, NativeSampler(ctx.state.components.sample))
    texts = rollout.responses
    expected = {"length_mean": float(rollout.mask.sum(1).double().mean()),
                "proxy_mean": float(rollout.proxy.double().mean()),
                "kl_mean": float((rollout.logprobs - rollout.ref_logprobs).sum(1).double().mean()),
                "eos_rate": float(rollout.has_eos.double().mean()),
                "distinct_2": distinct_n(texts, 2), "self_bleu": self_bleu(texts)}
    if ctx.world is not None:
        expected |= {"gold_mean": statistics.fmean(ctx.world.gold(prompts, texts)),
                     "grammatical_rate": ctx.world.grammatical_rate([f"{p} {r}" for p, r in zip(prompts, texts)])}
    gaps = {k: abs(float(metrics.get(k, math.nan)) - v) / max(1.0, abs(v)) for k, v in expected.items()}
    worst = max(gaps, key=lambda k: gaps[k] if not math.isnan(gaps[k]) else math.inf)
    measured = gaps[worst] if not math.isnan(gaps[worst]) else math.inf
    return within("evaluation_scores_every_prompt", "evaluation", measured, 1e-5,
                  f"largest relative gap between the evaluation's metrics on {len(prompts)} prompts and their "
                  f"rollout's ({worst}: {metrics.get(worst, metrics.get('error'))} against {expected[worst]:.6g})")


# --- the resume -----------------------------------------------------------------------------------------
def probe_resume_restores_what_was_saved(ctx: ProbeContext) -> ProbeResult:
    """A checkpoint of a small model with Adam's moments and an adaptive KL controller,
    written as the run writes it, then restored by the run's `restore` into fresh ones, as
    a restarted process builds them: the weights, the moments, the controller's
    coefficient, the next iteration and the lines of the log to keep must be those saved (a
    resume that starts Adam afresh, takes the coefficient from the config, or keeps the lines
    logged after the checkpoint differs)."""
    torch.manual_seed(derive_seed(ctx.config.seed, "checkup", "resume"))

    def fresh() -> tuple[torch.nn.Module, torch.optim.Optimizer, AdaptiveKLController]:
        model = torch.nn.Linear(4, 3)
        return model, torch.optim.AdamW(model.parameters(), lr=1e-2), AdaptiveKLController(0.2, 6.0, 256)

    model, optimizer, controller = fresh()
    for _ in range(3):
        optimizer.zero_grad()
        model(torch.randn(8, 4)).pow(2).sum().backward()
        optimizer.step()
        controller.update(12.0, 64)
    saved = ResumePoint(7, 7, 14, {"kl_mean": 1.0})
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp)
        directory = run / "checkpoints" / "ppo"
        save_checkpoint(directory, model, optimizer, controller, saved)
        for name in ("metrics/ppo.jsonl", "samples/ppo.jsonl"):  # lines logged after the checkpoint
            (run / name).parent.mkdir(parents=True, exist_ok=True)
            (run / name).write_text("".join(json.dumps({"step": s}) + "\n" for s in range(20)))
        restored, restored_optimizer, restored_controller = fresh()
        point = ctx.state.components.restore(directory, restored, restored_optimizer, restored_controller)

    def moments(opt: torch.optim.Optimizer, module: torch.nn.Module) -> list[torch.Tensor | None]:
        return [opt.state[p].get("exp_avg") for p in module.parameters()]

    gaps = {"weights": max(float((restored.state_dict()[k] - v).abs().max()) for k, v in model.state_dict().items()),
            "Adam's moments": max(float((m - saved_m).abs().max()) if m is not None else math.inf
                                  for m, saved_m in zip(moments(restored_optimizer, restored), moments(optimizer, model))),
            "KL coefficient": abs(restored_controller.value - controller.value),
            "lines kept": float(abs(point.metrics_lines - saved.metrics_lines)
                                + abs(point.samples_lines - saved.samples_lines)),
            "next iteration": float(abs(point.next_step - saved.next_step))}
    worst = max(gaps, key=gaps.get)
    return within("resume_restores_what_was_saved", "checkpointing", gaps[worst], 1e-7,
                  f"largest difference between what a checkpoint saved and what the resume restored ({worst})")


# --- the prompts each iteration draws --------------------------------------------------------------------
def _batch(ctx: ProbeContext, iteration: int) -> list[str]:
    return ctx.state.components.prompts(ctx.source, ctx.config.ppo.batch_size,
                                        derive_seed(ctx.config.ppo_seed, "ppo-prompts", str(iteration)))


def probe_prompts_change_between_iterations(ctx: ProbeContext) -> ProbeResult:
    """The prompts of PPO's first two iterations, drawn as the trainer draws them: the
    second batch is not the first again (a loader read from its start at every iteration
    trains on one batch)."""
    first, second = _batch(ctx, 0), _batch(ctx, 1)
    return within("prompts_change_between_iterations", "prompt_data", len(set(first) & set(second)) / len(set(second)),
                  0.5, "fraction of the second iteration's prompts that are the first's")


def probe_training_prompts_not_held_out(ctx: ProbeContext) -> ProbeResult:
    """The first iteration's prompts against the held-out part of the embedded world's prompt
    space: none may come from it (a held-out score on prompts trained on measures memory)."""
    if ctx.world is None:
        raise ProbeSkipped("the run's own prompt file is split when read; the world's prompt space is not in use")
    prompts = _batch(ctx, 0)
    held_out = sum(prompt_split(p) == "heldout" for p in prompts)
    return within("training_prompts_not_held_out", "prompt_data", held_out / len(prompts), 0.0,
                  "fraction of the first iteration's prompts from the held-out part of the prompt space")
