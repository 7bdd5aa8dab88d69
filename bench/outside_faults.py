"""The checkup and the doctor on bugs written outside the zoo, put into the default
components the way a user's own code would have them (this file; neither in the zoo nor in
the tests). Each is trained at demo size from a healthy run's stage-1 and stage-2 models,
then checked and diagnosed as the faults bench does.

Two sets: twelve mistakes of the kinds the RLHF literature reports, written after the
checkup's probes by the same hands (so not blind to them); and eleven taken from public bug
reports in other projects' PPO/GRPO code (TRL, OpenRLHF, trlX, veRL: each function's
docstring cites its issue or pull request), written down before the checkup and the doctor
were changed to find them. The zoo and the tests' broken implementations were not reused.
A later set (`--batch invariants`: ten more public reports, in the update's mechanics, the
rollout's bookkeeping, the reward model's training and the data) is scored in a section of its
own, with the commit it was scored at, before the checkup's invariants were walked. The set
`--batch pipeline` (ten more) walks the pipeline around the PPO step: stage 1's objective,
stage 2's loop and held-out split, the held-out evaluation, the resume from a checkpoint (a
run crashed after `crash_at` iterations and resumed, as a user's would be) and the prompts.
A bug in a component of stage 2 retrains the reward model too (from the base run's stage-1
model), one in stage 1 retrains both.

    python bench/outside_faults.py --base runs/faults-bench/healthy-seed0 --out runs/outside-faults \\
        [--only NAME ...] [--rescore] [--doc docs/benchmarks.md]

Reports, per bug: the policy's held-out gold gain over the stage-1 model against the
healthy run's, the probes that failed, the doctor's findings from the metrics, and the
component ranked first by the full doctor and from the metrics alone.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import statistics
import time
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from benchlib import replace_section

ROOT = Path(__file__).resolve().parents[1]
START, END = "## Bugs outside the zoo", "<!-- end outside faults -->"


# --- the bugs -----------------------------------------------------------------------------
def prompts_cut_to_two_words(source, n: int, seed: int) -> list[str]:
    """A preprocessing step that keeps the first two words of each prompt."""
    return [" ".join(p.split()[:2]) for p in source.prompts(n, seed)]


class _TopK(torch.nn.Module):
    def __init__(self, lm: torch.nn.Module, k: int) -> None:
        super().__init__()
        self.lm, self.k = lm, k

    def forward(self, **kwargs):
        out = self.lm(**kwargs)
        kth = out.logits.topk(self.k, dim=-1).values[..., -1:]
        out.logits = out.logits.masked_fill(out.logits < kth, float("-inf"))
        return out


def sample_top_k(model, prompt_ids, prompt_mask, max_new_tokens, temperature, eos_id, pad_id, generator):
    """Generation with top-k = 10 while the losses use the full distribution."""
    from rlhflab.models.sampling import sample_responses

    return sample_responses(_TopK(model, 10), prompt_ids, prompt_mask, max_new_tokens, temperature, eos_id, pad_id,
                            generator)


def score_before_eos(model, input_ids, attention_mask):
    """The reward read one token early: at the token before EOS, which the RM was not trained to read."""
    from rlhflab.models.forward import padded_forward
    from rlhflab.models.reward_model import last_real_index

    hidden = padded_forward(model.base_model, input_ids, attention_mask).last_hidden_state.float()
    last = (last_real_index(attention_mask) - 1).clamp_min(0)
    return model.score(hidden[torch.arange(hidden.shape[0], device=hidden.device), last]).squeeze(-1)


def value_loss_toward_advantages(values, old_values, returns, mask, clip_eps):
    """The value head regressed on the advantages (returns - old values) instead of the returns."""
    from rlhflab.ppo import losses

    return losses.value_loss(values, old_values, returns - old_values, mask, clip_eps)


def policy_loss_optimistic(logprobs, old_logprobs, advantages, mask, clip_eps):
    """min instead of max of the negated surrogates: the clip bounds the update from the wrong side."""
    from rlhflab.metrics.stats import masked_mean
    from rlhflab.ppo import losses

    ratio = torch.exp(torch.where(mask, logprobs - old_logprobs.detach(), 0.0))
    adv = torch.where(mask, advantages.detach(), 0.0)
    loss = masked_mean(torch.minimum(-adv * ratio, -adv * ratio.clamp(1 - clip_eps, 1 + clip_eps)), mask)
    return loss, losses.policy_loss(logprobs, old_logprobs, advantages, mask, clip_eps)[1]


def policy_loss_ratio_inverted(logprobs, old_logprobs, advantages, mask, clip_eps):
    """ratio = pi_old / pi (the log-ratio written the wrong way round)."""
    from rlhflab.ppo import losses

    return losses.policy_loss(2 * old_logprobs.detach() - logprobs, old_logprobs, advantages, mask, clip_eps)


def gae_values_one_late(rewards, values, mask, gamma, lam):
    """Values aligned one token late: V(s_t) read where V(s_{t+1}) belongs."""
    from rlhflab.ppo.advantages import gae

    shifted = torch.where(mask, torch.cat([values[:, 1:], torch.zeros_like(values[:, :1])], 1), 0.0)
    return gae(rewards, shifted, mask, gamma, lam)


def gae_lambda_squared(rewards, values, mask, gamma, lam):
    """lam applied twice in the recursion (lam^2 per token)."""
    from rlhflab.ppo.advantages import gae

    return gae(rewards, values, mask, gamma, lam * lam)


def score_on_every_token(scores, logprobs, ref_logprobs, mask, kl_coef, kl_estimator="k1"):
    """The score added to every token's reward, not only to the last one."""
    from rlhflab.ppo.advantages import shape_rewards

    rewards, kl = shape_rewards(scores, logprobs, ref_logprobs, mask, kl_coef, kl_estimator)
    return rewards + torch.where(mask, scores[:, None].to(rewards.dtype), 0.0), kl


def mask_one_late(mask):
    """The loss mask shifted one position right: the first response token out, one padding token in."""
    return torch.cat([torch.zeros_like(mask[:, :1]), mask[:, :-1]], 1) | (mask.sum(1, keepdim=True) == mask.shape[1])


def whiten_sign_flipped(x, mask, shift_mean=True):
    from rlhflab.metrics.stats import masked_whiten

    return -masked_whiten(x, mask, shift_mean)


def raw_scores_clipped(raw, mean, std, normalize):
    """Raw reward-model scores clipped to [-1, 1] instead of standardised."""
    return raw.clamp(-1.0, 1.0)


# --- bugs from public reports in other projects ---------------------------------------------
class TokenMeanKLController:
    """An adaptive controller told the KL per token of the padded response grid, not per
    sequence: the batch's KL summed over tokens and divided by B x T (the response width)."""

    def __init__(self, config) -> None:
        from rlhflab.ppo.kl import AdaptiveKLController

        self.inner = AdaptiveKLController(config.kl_coef, config.kl_target, config.kl_horizon)
        self.tokens = config.response_length

    @property
    def value(self) -> float:
        return self.inner.value

    def update(self, current_kl: float, n_steps: int) -> None:
        self.inner.update(current_kl / self.tokens, n_steps)

    def state_dict(self) -> dict:
        return self.inner.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.inner.load_state_dict(state)


def controller_fed_token_mean_kl(config):
    """trlX PR #441, "fix(ppo_trainer): compute mean KL sequence-wise"
    (https://github.com/CarperAI/trlx/pull/441): `mean_kl` was the mean over the padded
    (B, T) grid, the per-sequence KL / T, and fed the adaptive controller, whose target is
    per sequence; it keeps lowering beta while the KL overshoots."""
    return TokenMeanKLController(config)


def controller_always_adaptive(config):
    """TRL issue #18, "adap_kl_ctrl boolean is not used" (https://github.com/huggingface/trl/
    issues/18; fixed by PR #29): the trainer always built an adaptive controller with
    target 6 and horizon 10000, so a fixed beta asked for drifted."""
    from rlhflab.ppo.kl import AdaptiveKLController

    return AdaptiveKLController(config.kl_coef, config.kl_target if config.kl_target is not None else 6.0, 10000)


def controller_fed_approx_kl(metrics):
    """trlX PR #361, "[fix] Update `AdaptiveKLController` with correct KL"
    (https://github.com/CarperAI/trlx/pull/361): the controller was updated with the
    policy-vs-old approx-KL of the PPO step (~1e-2), not the KL to the reference, so it
    never saw the KL pass its target."""
    return metrics["policy/approxkl"]


def reference_sharing_embeddings(stage1_dir, policy_lm):
    """trlX issue #517, "Sanity check: SFT Model should be frozen (PPO)", fixed by PR #543,
    "Freeze "output" embedding when using tied embeddings." (https://github.com/CarperAI/
    trlx/issues/517): the reference's input and tied output embeddings were the policy's and
    kept training, so the reference partly followed the policy."""
    from rlhflab.models.lm import load_causal_lm

    reference = load_causal_lm(stage1_dir).eval().requires_grad_(False)
    reference.transformer.wte = policy_lm.transformer.wte
    reference.lm_head.weight = policy_lm.transformer.wte.weight
    return reference


def logits_without_position_ids(model, input_ids, attention_mask, prompt_len, temperature, output_hidden_states=False):
    """trlX PR #509, "Fix PPO log_ratio bug" (https://github.com/CarperAI/trlx/pull/509), and
    OpenRLHF issue #217, "`position_ids` related PPO bug" (https://github.com/OpenRLHF/
    OpenRLHF/issues/217): the training forward got the attention mask but no position ids,
    so a left-padded row's positions counted its padding while the sampler's did not."""
    from rlhflab.models.precision import autocast

    with autocast(input_ids.device):
        out = model(input_ids=input_ids, attention_mask=attention_mask.long(), use_cache=False,
                    output_hidden_states=output_hidden_states)
    logits = out.logits[:, prompt_len - 1 : -1].float() / temperature
    return logits, out.hidden_states[-1][:, prompt_len - 1 : -1].float() if output_hidden_states else None


def logits_without_temperature(model, input_ids, attention_mask, prompt_len, temperature, output_hidden_states=False):
    """TRL PR #3029, "Fix temperature inconsistency in GRPO trainer" (https://github.com/
    huggingface/trl/pull/3029; the same in OpenRLHF PR #857 and veRL PR #3133): the sampler
    drew at the configured temperature, the policy, old and reference logprobs were taken at
    temperature 1 (trained here at ppo.temperature = 0.7)."""
    from rlhflab.models.forward import response_logits

    return response_logits(model, input_ids, attention_mask, prompt_len, 1.0, output_hidden_states)


def score_after_eos(scores, logprobs, ref_logprobs, mask, kl_coef, kl_estimator="k1"):
    """TRL issue #3750, "Two potential issues in PPOTrainer: reward added to PAD token instead
    of EOS, and missing_eos_penalty may not apply" (https://github.com/huggingface/trl/issues/
    3750; also #1893): the score went to the position after the last real token, the first
    padding, where one exists."""
    from rlhflab.ppo.advantages import _last_token_index, shape_rewards

    rewards, kl = shape_rewards(scores, logprobs, ref_logprobs, mask, kl_coef, kl_estimator)
    last = _last_token_index(mask)
    after = torch.where(last + 1 < mask.shape[1], last + 1, last)
    score = scores.to(rewards.dtype)[:, None]
    return rewards.scatter_add(1, last[:, None], -score).scatter_add(1, after[:, None], score), kl


def gae_values_masked_by_other_rows(rewards, values, mask, gamma, lam):
    """veRL PR #1440, "[BUG] fix value mask bug in dp_critic" (https://github.com/
    volcengine/verl/pull/1440): with rows regrouped by length, the critic's values were
    multiplied by another row's mask before the order was restored."""
    from rlhflab.ppo.advantages import gae

    return gae(rewards, values * mask[mask.sum(1).argsort()], mask, gamma, lam)


def sample_forcing_eos(model, prompt_ids, prompt_mask, max_new_tokens, temperature, eos_id, pad_id, generator):
    """OpenRLHF issue #238, "Forced EOS token in vllm generation?" (https://github.com/
    OpenRLHF/OpenRLHF/issues/238): a response cut at the length limit had its last token
    overwritten with EOS, a token the policy never sampled, and counted as ended."""
    from rlhflab.models.sampling import Samples, sample_responses

    s = sample_responses(model, prompt_ids, prompt_mask, max_new_tokens, temperature, eos_id, pad_id, generator)
    ids = s.response_ids.clone()
    ids[~s.has_eos, -1] = eos_id
    return Samples(ids, s.mask, s.logprobs, torch.ones_like(s.has_eos))


def standardise_with_default_stats(raw, mean, std, normalize):
    """OpenRLHF issue #693, on reward normalisation (https://github.com/OpenRLHF/OpenRLHF/
    issues/693): with normalisation on, the reward model's stored mean and std were absent
    and defaulted to 0 and 1, so the scores went through unstandardised, silently."""
    return raw


def minibatches_each_repeated(batch, minibatches, epochs, generator):
    """trlX PR #522, "Fix ordering of ppo epoch iteration" (https://github.com/CarperAI/
    trlx/pull/522): the loop ran every epoch on one minibatch before the next (B1 B1 B1 B2 B2
    B2 ...), one permutation for all epochs."""
    size = batch // minibatches
    order = torch.randperm(batch, generator=generator)
    return [order[start : start + size] for start in range(0, batch, size) for _ in range(epochs)]


def logits_without_attention_mask(model, input_ids, attention_mask, prompt_len, temperature,
                                  output_hidden_states=False):
    """TRL PR #2708, "Fix Attention Masking in GRPO" (https://github.com/huggingface/trl/pull/2708):
    the policy's and the reference's logprobs were taken with no attention mask (nor positions)
    on left-padded prompts, so a response attended to its row's padding and its logprobs
    depended on how much padding the row had; the sampler masked it."""
    from rlhflab.models.precision import autocast

    with autocast(input_ids.device):
        out = model(input_ids=input_ids, use_cache=False, output_hidden_states=output_hidden_states)
    logits = out.logits[:, prompt_len - 1 : -1].float() / temperature
    return logits, out.hidden_states[-1][:, prompt_len - 1 : -1].float() if output_hidden_states else None


def logits_with_response_positions_left_padded(model, input_ids, attention_mask, prompt_len, temperature,
                                               output_hidden_states=False):
    """veRL PR #4243, "[sglang, rollout] fix: use right padding for response_position_ids"
    (https://github.com/verl-project/verl/pull/4243, issue #4159): the responses were right-padded
    but their position ids left-padded, so in a batch of mixed lengths a shorter response's
    tokens were read at positions shifted by its padding (here: each response token's position
    moved on by its row's response padding, clamped to the model's last position)."""
    from rlhflab.models.forward import position_ids_from_mask
    from rlhflab.models.precision import autocast

    positions = position_ids_from_mask(attention_mask)
    positions[:, prompt_len:] += (~attention_mask[:, prompt_len:].bool()).sum(1, keepdim=True)
    limit = getattr(model.config, "n_positions", None) or model.config.max_position_embeddings
    with autocast(input_ids.device):
        out = model(input_ids=input_ids, attention_mask=attention_mask.long(), position_ids=positions.clamp_max(limit - 1),
                    use_cache=False, output_hidden_states=output_hidden_states)
    logits = out.logits[:, prompt_len - 1 : -1].float() / temperature
    return logits, out.hidden_states[-1][:, prompt_len - 1 : -1].float() if output_hidden_states else None


def policy_loss_over_the_grid(logprobs, old_logprobs, advantages, mask, clip_eps):
    """TRL PR #6024, "fix(grpo): correct DAPO/CISPO/VESPO loss normalization ..."
    (https://github.com/huggingface/trl/pull/6024), and veRL PR #5877 (the legacy FSDP actor's
    token-mean normalised per micro-batch, https://github.com/verl-project/verl/pull/5877): a
    token-sum loss divided by the wrong count. Here the sum over real tokens is divided by the
    padded grid's size, B x T, not by the real tokens: every step shrinks by the share of
    real tokens, more so as responses shorten."""
    from rlhflab.ppo import losses

    loss, stats = losses.policy_loss(logprobs, old_logprobs, advantages, mask, clip_eps)
    return loss * mask.sum() / mask.numel(), stats


def prompts_with_bos_text(source, n: int, seed: int) -> list[str]:
    """veRL PR #3682, "[data] fix: Remove duplicated bos tokens in `RLHFDataset`"
    (https://github.com/verl-project/verl/pull/3682; NeMo-RL issue #855 the same): the prompt
    text already held the BOS token (the chat template wrote it) and the tokenizer added its
    own, so every prompt began with two."""
    bos = source.tokenizer().bos_token
    return [bos + p for p in source.prompts(n, seed)]


def gradient_step_never_zeroed(optimizer, parameters, loss, max_grad_norm):
    """TRL issue #583, "Bug in gradient accumulation in PPO trainer" (https://github.com/
    huggingface/trl/issues/583; fixed by PR #546, "refactor grad accum"): `zero_grad()` was
    called only on the steps where accelerate's wrapped optimizer ignores it, so the gradients
    were never cleared: each step's gradient piled onto every earlier one, across minibatches,
    epochs and iterations (clipped and stepped as the sum)."""
    from rlhflab.engines import clip_grad_norm

    loss.backward()
    grad_norm = clip_grad_norm(parameters, max_grad_norm)
    if torch.isfinite(grad_norm):
        optimizer.step()
    return grad_norm


INVALID_LOGPROB = 1.0  # TRL's value for a padded position's logprob


def entropy_with_padding_sentinel(logits, mask):
    """TRL PR #6121, "Fix negative entropy in PPO logging" (https://github.com/huggingface/trl/
    pull/6121, issue #2022): padded positions held the sentinel logprob 1.0 and the logged
    entropy took -logprob over every position, so each padding position added -1 and short
    responses logged a low, even negative, entropy (here: the per-token mean over the padded
    grid, padding counted as -1)."""
    from rlhflab.ppo.losses import entropy_from_logits

    return torch.where(mask, entropy_from_logits(logits), -INVALID_LOGPROB).mean()


def policy_loss_masked_by_product(logprobs, old_logprobs, advantages, mask, clip_eps):
    """OpenRLHF PR #1240, "fix: ignore masked invalid values in policy loss reductions"
    (https://github.com/OpenRLHF/OpenRLHF/pull/1240): the ratio and the per-token loss were
    formed at every position and the mask applied by multiplying, so a NaN or Inf in a masked
    slot (padding, a filtered token) became NaN x 0 = NaN and poisoned the loss and its
    gradient; harmless while every masked slot holds a finite number."""
    from rlhflab.ppo import losses

    ratio = torch.exp(logprobs - old_logprobs.detach())
    surrogate = torch.maximum(-advantages.detach() * ratio,
                              -advantages.detach() * ratio.clamp(1 - clip_eps, 1 + clip_eps))
    return (surrogate * mask).sum() / mask.sum(), losses.policy_loss(logprobs, old_logprobs, advantages, mask,
                                                                     clip_eps)[1]


def preference_accuracy_counting_ties(chosen, rejected):
    """TRL PR #1012, "Add warning for ties in reward accuracy" (https://github.com/huggingface/
    trl/pull/1012): the reward model's accuracy was `argmax([r_chosen, r_rejected]) == 0`, and
    argmax of a tie is 0, so a tie (identical responses included) counted as right."""
    from rlhflab.models.bradley_terry import bt_loss

    loss, _ = bt_loss(chosen, rejected)
    return loss, (chosen.detach() >= rejected.detach()).to(chosen.dtype).mean()


def comparison_rows_without_prompt(prompt_ids, prompt_mask, response_ids, response_mask):
    """OpenRLHF PR #363, "fix reward dataset when apply_chat_template" (https://github.com/
    OpenRLHF/OpenRLHF/pull/363): with the chat template on, the prompt was set to "" and only
    the chosen and rejected turns were templated, so the reward model was trained (and
    evaluated) without ever reading the prompt, and scored prompt and response in PPO (here:
    the prompt's text masked out of every comparison row; its first token, BOS, kept)."""
    first = prompt_mask & (prompt_mask.long().cumsum(1) == 1)
    return torch.cat([prompt_ids, response_ids], 1), torch.cat([first, response_mask], 1)


def reward_lr_sized_for_epochs_squared(base_lr, step, steps_per_epoch, epochs):
    """OpenRLHF issue #359, "Possible minor bug" (https://github.com/OpenRLHF/OpenRLHF/issues/
    359; fixed in commit bae8e5c0): `num_update_steps_per_epoch` already held the epochs and
    was multiplied by them again, so the reward model's schedule was sized for E^2 epochs:
    a warm-up E times too long and a learning rate that never decays to its end."""
    from rlhflab.models.optim import warmup_linear_decay

    return warmup_linear_decay(base_lr, step, steps_per_epoch * epochs, epochs)


# --- the set `pipeline`: the pipeline around the PPO step (public reports) ----------------------
def lm_loss_without_eos(model, ids, mask, loss_mask):
    """TRL issue #1623, "Learning to generate EOS tokens" (https://github.com/huggingface/trl/
    issues/1623; again in PR #3091): with the pad token set to the EOS token, the collator
    masked every padding position out of the labels, the real EOS with them, so the SFT model
    never learnt to end a response (here: stage 1's targets without the EOS token)."""
    from rlhflab.models.lm_loss import lm_loss

    config = getattr(model, "config", None) or model.module.config
    return lm_loss(model, ids, mask, loss_mask & (ids != config.eos_token_id))


def lm_loss_mean_of_sequence_means(model, ids, mask, loss_mask):
    """torchtune PR #1875, "Normalize CE loss by total number of (non-padding) tokens"
    (https://github.com/meta-pytorch/torchtune/pull/1875; the gradient-accumulation loss bug
    of October 2024, also allenai/open-instruct PR #1137): each part's loss was the mean over
    its own tokens and the parts were averaged, so a token of a short example weighed more
    than one of a long example (here: stage 1's loss the mean over sequences of each
    sequence's token mean)."""
    import torch.nn.functional as F

    from rlhflab.models.precision import autocast

    with autocast(ids.device):
        logits = model(input_ids=ids, attention_mask=mask.long(), use_cache=False).logits
    targets = loss_mask[:, 1:]
    per_token = F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), ids[:, 1:].flatten(), reduction="none")
    per_token = per_token.view(targets.shape) * targets
    return (per_token.sum(1) / targets.sum(1).clamp_min(1)).mean()


def reward_batches_in_one_order(lengths, batch_size, generator, pool=50):
    """lucidrains/DALLE-pytorch PR #230, "use data_sampler.set_epoch to avoid having the same
    order in each epoch" (https://github.com/lucidrains/DALLE-pytorch/pull/230; SimCLR PR #26
    the same): the sampler's shuffle was seeded once and never told the epoch, so every epoch
    visited the reward model's training pairs in the same order."""
    from rlhflab.data.batching import length_grouped_batches

    return length_grouped_batches(lengths, batch_size, torch.Generator().manual_seed(0), pool)


def validation_pairs_from_training(n_train, n_val):
    """OpenRLHF issue #1089, "Is there any data leakage when the eval_dataset parameter is not
    specified in train_rm.py?" (https://github.com/OpenRLHF/OpenRLHF/issues/1089): without an
    eval set the reward model was evaluated on the first 1% of its own training data, so its
    held-out accuracy was its training accuracy."""
    return torch.arange(n_train), torch.arange(n_val)


def evaluation_dropping_the_last_batch(state, world, prompts, response_length, temperature, streams):
    """NVIDIA-NeMo/RL PR #1029, "feat: support drop_last=False during validation"
    (https://github.com/NVIDIA-NeMo/RL/pull/1029): the validation loader dropped its last
    incomplete batch, so the held-out metrics left out the prompts past the last full batch
    (here: batches of 96, so 64 of 256 held-out prompts unseen)."""
    from rlhflab.ppo.evaluation import evaluate_policy

    kept = len(prompts) // 96 * 96
    return evaluate_policy(state, world, prompts[:kept], response_length, temperature, streams)


def restore_without_kl_controller(directory, model, optimizer, controller):
    """ray-project/ray issue #22444, "[Bug] PPO cur_kl_coeff is not restored"
    (https://github.com/ray-project/ray/issues/22444): on restoring a checkpoint the adaptive
    KL coefficient came from the config, not from the checkpoint."""
    from rlhflab.checkpoint import load_checkpoint

    as_configured = controller.state_dict()
    point = load_checkpoint(directory, model, optimizer, controller)
    controller.load_state_dict(as_configured)
    return point


def restore_without_optimizer(directory, model, optimizer, controller):
    """NVIDIA-NeMo/RL PR #3171, "fix(ppo): restore optimizer state on checkpoint resume"
    (https://github.com/NVIDIA-NeMo/RL/pull/3171): PPO restored the weights but not the
    optimiser, silently starting fresh Adam moments on every resume."""
    from rlhflab.checkpoint import load_checkpoint

    fresh = optimizer.state_dict()
    point = load_checkpoint(directory, model, optimizer, controller)
    optimizer.load_state_dict(fresh)
    return point


def restore_keeping_lines_after_checkpoint(directory, model, optimizer, controller):
    """huggingface/trl PR #3185, "Fix logging when resuming from checkpoint GRPO"
    (https://github.com/huggingface/trl/pull/3185): a run resumed from a checkpoint logged
    again the steps the first run had logged after that checkpoint, and the two curves
    overlapped (here: the lines after the checkpoint kept, the steps logged twice)."""
    from dataclasses import replace

    from rlhflab.checkpoint import count_lines, load_checkpoint

    point = load_checkpoint(directory, model, optimizer, controller)
    run = Path(directory).parent.parent
    return replace(point, metrics_lines=count_lines(run / "metrics" / "ppo.jsonl"),
                   samples_lines=count_lines(run / "samples" / "ppo.jsonl"))


def prompts_one_batch_forever(world, n, seed):
    """hpcaitech/ColossalAI issue #3746, "[BUG]: code in ppo.py always read same datas from
    prompt_dataloader" (https://github.com/hpcaitech/ColossalAI/issues/3746): every episode
    took `next(iter(prompt_dataloader))`, the same first batch, so PPO trained on one batch
    of prompts."""
    return world.prompts(n, 0)


def prompts_from_the_held_out_part(world, n, seed):
    """OpenRLHF PR #594, "Ensure train datasets do not contain eval datasets"
    (https://github.com/OpenRLHF/OpenRLHF/pull/594): the training prompts could hold the
    evaluation's, so the held-out score measured prompts the policy was trained on (here:
    the training prompts drawn from the held-out part of the prompt space)."""
    return world.prompts(n, seed, split="heldout")


@dataclass(frozen=True)
class Bug:
    component: str  # the doctor's component it belongs to
    what: str
    code: dict
    config: tuple[str, ...] = ()  # dotted overrides the bug needs to show (a target for a controller bug)
    public: bool = False  # taken from a public bug report in another project
    batch: str = ""  # a later set, scored and kept in a section of its own ("" : the first two sets)
    crash_at: int = 0  # PPO crashes once this many iterations are logged, then resumes from its checkpoint

    def components(self):
        from rlhflab.ppo.components import PPOComponents

        return replace(PPOComponents(), **self.code)

    @property
    def first_stage(self) -> str:
        """The earliest stage that runs one of its components (a stage-2 bug retrains the RM)."""
        from rlhflab.pipeline import STAGE_NAMES
        from rlhflab.ppo.components import COMPONENT_STAGES

        return min((COMPONENT_STAGES[field] for field in self.code), key=STAGE_NAMES.index, default="ppo")

    def config_on(self, base: Path, *overrides: str):
        """The base run's config with the overrides the bug needs, then `overrides`."""
        from rlhflab.config import apply_overrides, config_from_run, parse_override

        return apply_overrides(config_from_run(base), dict(parse_override(o) for o in (*self.config, *overrides)), "bug")


BUGS = {
    "prompts_cut_to_two_words": Bug("prompt_data", "prompts cut to their first two words",
                                    {"prompts": prompts_cut_to_two_words}),
    "sample_top_k": Bug("logprob_bookkeeping", "generation with top-k 10, losses on the full distribution",
                        {"sample": sample_top_k}),
    "score_before_eos": Bug("reward_model", "the reward read at the token before EOS", {"score": score_before_eos}),
    "value_toward_advantages": Bug("advantages_values", "the value head regressed on advantages, not returns",
                                   {"value_loss": value_loss_toward_advantages}),
    "clip_optimistic": Bug("advantages_values", "min instead of max in the clipped objective",
                           {"policy_loss": policy_loss_optimistic}),
    "ratio_inverted": Bug("advantages_values", "ratio pi_old / pi", {"policy_loss": policy_loss_ratio_inverted}),
    "gae_values_one_late": Bug("advantages_values", "values aligned one token late in GAE",
                               {"gae": gae_values_one_late}),
    "gae_lambda_squared": Bug("advantages_values", "lam applied twice in GAE", {"gae": gae_lambda_squared}),
    "score_on_every_token": Bug("advantages_values", "the score added to every token's reward",
                                {"shape_rewards": score_on_every_token}),
    "mask_one_late": Bug("advantages_values", "the loss mask shifted one token right",
                         {"response_mask": mask_one_late}),
    "whiten_sign_flipped": Bug("advantages_values", "advantages whitened with their sign flipped",
                               {"whiten": whiten_sign_flipped}),
    "scores_clipped_not_standardised": Bug("reward_scaling", "raw scores clipped to [-1, 1], not standardised",
                                           {"reward_transform": raw_scores_clipped}),
    # from public bug reports (each function's docstring cites its source)
    "controller_fed_token_mean_kl": Bug("kl_control", "the adaptive controller told the KL per padded token",
                                        {"make_kl_controller": controller_fed_token_mean_kl}, ("ppo.kl_target=6",),
                                        public=True),
    "controller_always_adaptive": Bug("kl_control", "a fixed beta asked for, an adaptive one (target 6) built",
                                      {"make_kl_controller": controller_always_adaptive}, public=True),
    "controller_fed_approx_kl": Bug("kl_control", "the adaptive controller told the step's approx-KL",
                                    {"kl_signal": controller_fed_approx_kl}, ("ppo.kl_target=6",), public=True),
    "reference_shares_embeddings": Bug("kl_control", "the reference's tied embeddings are the policy's",
                                       {"make_reference": reference_sharing_embeddings}, public=True),
    "logits_without_position_ids": Bug("logprob_bookkeeping", "the training forward without position ids",
                                       {"response_logits": logits_without_position_ids}, public=True),
    "logits_without_temperature": Bug("logprob_bookkeeping", "sampling at 0.7, logprobs at temperature 1",
                                      {"response_logits": logits_without_temperature}, ("ppo.temperature=0.7",),
                                      public=True),
    "score_after_eos": Bug("advantages_values", "the score placed on the first padding after the response",
                           {"shape_rewards": score_after_eos}, public=True),
    "values_masked_by_other_rows": Bug("advantages_values", "values masked with another row's mask",
                                       {"gae": gae_values_masked_by_other_rows}, public=True),
    "sample_forcing_eos": Bug("sampling", "cut responses given an EOS they never sampled",
                              {"sample": sample_forcing_eos}, public=True),
    "reward_stats_defaulted": Bug("reward_scaling", "standardisation with mean 0 and std 1",
                                  {"reward_transform": standardise_with_default_stats}, public=True),
    "minibatches_each_repeated": Bug("ppo_hyperparameters", "every epoch on one minibatch before the next",
                                     {"minibatch_schedule": minibatches_each_repeated}, public=True),
    # a third set from public bug reports, scored before the checkup's invariants were walked
    "logits_without_attention_mask": Bug("logprob_bookkeeping", "the training forward with no attention mask",
                                         {"response_logits": logits_without_attention_mask}, public=True,
                                         batch="invariants"),
    "response_positions_left_padded": Bug("logprob_bookkeeping", "response positions shifted by the row's padding",
                                          {"response_logits": logits_with_response_positions_left_padded},
                                          public=True, batch="invariants"),
    "policy_loss_over_the_grid": Bug("ppo_hyperparameters", "the policy loss's token sum over the padded grid's size",
                                     {"policy_loss": policy_loss_over_the_grid}, public=True, batch="invariants"),
    "prompts_with_bos_text": Bug("prompt_data", "every prompt begun with two BOS tokens",
                                 {"prompts": prompts_with_bos_text}, public=True, batch="invariants"),
    "gradients_never_zeroed": Bug("ppo_hyperparameters", "the update's gradients never zeroed between steps",
                                  {"gradient_step": gradient_step_never_zeroed}, public=True, batch="invariants"),
    "entropy_with_padding_sentinel": Bug("advantages_values", "entropy averaged over padding counted as -1",
                                         {"entropy": entropy_with_padding_sentinel}, public=True,
                                         batch="invariants"),
    "policy_loss_masked_by_product": Bug("advantages_values", "the policy loss masked by multiplying, not selecting",
                                         {"policy_loss": policy_loss_masked_by_product}, public=True,
                                         batch="invariants"),
    "rm_accuracy_counts_ties": Bug("reward_model", "the reward model's accuracy counts a tie as right",
                                   {"preference_loss": preference_accuracy_counting_ties}, public=True,
                                   batch="invariants"),
    "rm_trained_without_prompt": Bug("reward_model", "the reward model trained on responses without their prompt",
                                     {"comparison_rows": comparison_rows_without_prompt}, public=True,
                                     batch="invariants"),
    "rm_lr_schedule_epochs_squared": Bug("reward_model", "the reward model's schedule sized for E^2 epochs",
                                         {"reward_lr": reward_lr_sized_for_epochs_squared}, public=True,
                                         batch="invariants"),
    "sft_eos_not_a_target": Bug("stage1", "stage 1 never trained on the EOS token",
                                {"lm_loss": lm_loss_without_eos}, public=True, batch="pipeline"),
    "sft_loss_mean_of_sequence_means": Bug("stage1", "stage 1's loss a mean of per-sequence means",
                                           {"lm_loss": lm_loss_mean_of_sequence_means}, public=True,
                                           batch="pipeline"),
    "rm_pairs_in_one_order": Bug("reward_model", "the reward model's pairs in the same order every epoch",
                                 {"reward_batches": reward_batches_in_one_order}, public=True, batch="pipeline"),
    "rm_validated_on_training_pairs": Bug("reward_model", "the reward model held out on its own training pairs",
                                          {"comparison_split": validation_pairs_from_training}, public=True,
                                          batch="pipeline"),
    "eval_drops_last_batch": Bug("evaluation", "the held-out evaluation's last partial batch dropped",
                                 {"evaluate": evaluation_dropping_the_last_batch}, public=True, batch="pipeline"),
    "resume_resets_kl_coef": Bug("checkpointing", "a resume takes the KL coefficient from the config",
                                 {"restore": restore_without_kl_controller}, ("ppo.kl_target=2",), public=True,
                                 batch="pipeline", crash_at=50),
    "resume_fresh_optimizer": Bug("checkpointing", "a resume starts Adam afresh",
                                  {"restore": restore_without_optimizer}, public=True, batch="pipeline",
                                  crash_at=50),
    "resume_logs_steps_twice": Bug("checkpointing", "a resume logs again the steps after its checkpoint",
                                   {"restore": restore_keeping_lines_after_checkpoint}, public=True,
                                   batch="pipeline", crash_at=50),
    "prompts_one_batch": Bug("prompt_data", "every iteration the same batch of prompts",
                             {"prompts": prompts_one_batch_forever}, public=True, batch="pipeline"),
    "prompts_from_held_out": Bug("prompt_data", "training prompts drawn from the held-out part",
                                 {"prompts": prompts_from_the_held_out_part}, public=True, batch="pipeline"),
}


def gold_gain(run: Path) -> float:
    evaluation = json.loads((run / "metrics" / "eval.json").read_text())
    return evaluation["policy"]["gold_mean"] - evaluation["stage1"]["gold_mean"]


def first_component(diagnosis) -> str:
    return diagnosis.findings[0].causes[0].component if diagnosis.findings and diagnosis.findings[0].causes else "-"


def rank_of(diagnosis, component: str) -> int | None:
    """The component's place (1 = first) among the causes of the diagnosis's first finding;
    None without a finding or when that finding does not name it."""
    if not diagnosis.findings:
        return None
    ranked = [c.component for c in diagnosis.findings[0].causes]
    return ranked.index(component) + 1 if component in ranked else None


def _trained_seconds(out: Path, rows: Path | None, name: str) -> float:
    """The training time of a rescored bug: from its first row, or from the labelled rows it
    was trained under."""
    first = out / f"{name}.json"
    return json.loads((first if first.is_file() else (rows or out) / f"{name}.json").read_text())["seconds"]


def run_bug(name: str, base: Path, out: Path, rescore: bool = False, rows: Path | None = None,
            seeds: list[int] | None = None) -> dict:
    """Train (unless `rescore`), check and diagnose the bug `name` on seed 0; its row goes to
    ROWS/NAME.json (ROWS: OUT by default). With `seeds`, also which logged numbers it moves
    beyond the healthy seed spread (its PPO stage rerun at each further seed)."""
    from rlhflab.checkup import run_checkup
    from rlhflab.doctor.diagnose import CHECKUP_RULE, diagnose, read_and_diagnose
    from rlhflab.doctor.settings import RunSettings
    from rlhflab.faults_bench import failed_probes
    from rlhflab.runs import RunDir

    bug = BUGS[name]
    config = bug.config_on(base)
    run = RunDir(out / name)
    start = time.perf_counter()
    if not rescore:
        train(bug, config, RunDir(base), run, bug.first_stage)
    probes = run_checkup(config, run, bug.components()).results
    table, diagnosis = read_and_diagnose(run.root)
    metrics_only = read_and_diagnose(run.root)[0]
    metrics_only.settings = RunSettings()
    log_only = diagnose(metrics_only)
    metrics_view = diagnose(table)  # the log with its config, no checkup: the doctor before the checkup
    row = {"bug": name, "component": bug.component, "what": bug.what, "public": bug.public,
           "gold_gain": gold_gain(run.root), "healthy_gain": gold_gain(healthy_run(bug, base, out, None)),
           "failed_probes": failed_probes(probes),
           "metric_findings": [f.rule for f in diagnosis.findings if f.rule != CHECKUP_RULE],
           "first": first_component(diagnosis), "log_only_first": first_component(log_only),
           "rank": rank_of(diagnosis, bug.component), "rank_before_checkup": rank_of(metrics_view, bug.component),
           "seconds": _trained_seconds(out, rows, name) if rescore else time.perf_counter() - start}
    if seeds:
        row |= {"seeds": seeds, "moved": moved_metrics(name, base, out, seeds)}
    rows = rows or out
    rows.mkdir(parents=True, exist_ok=True)
    (rows / f"{name}.json").write_text(json.dumps(row, indent=1))
    print(json.dumps(row), flush=True)
    return row


def rerun_at_seed(name: str | None, base: Path, out: Path, seed: int) -> Path:
    """The PPO stage again at `ppo.seed = seed`: of the bug `name` (with its stage-2 model,
    from its first run, when the bug is in stage 2) or, with no name, of the healthy base.
    Kept and reused once it finished."""
    from rlhflab.runs import RunDir

    run = out / (f"{name}-seed{seed}" if name else f"healthy-seed{seed}")
    if (run / "metrics" / "eval.json").is_file():
        return run
    bug = BUGS[name] if name else Bug("", "", {})
    source = out / name if bug.first_stage != "ppo" else base
    train(bug, bug.config_on(base, f"ppo.seed={seed}"), RunDir(source), RunDir(run), "ppo")
    return run


class Crash(Exception):
    """The process dies mid-run (a preempted node, an out-of-memory kill)."""


@dataclass
class CrashAt:
    """A stop rule that crashes the run once `rows` iterations are logged: whatever was
    logged after the last checkpoint is there, the checkpoint is behind it."""

    rows: int

    def __call__(self, diagnosis):
        if diagnosis.steps >= self.rows:
            raise Crash(f"crashed after {diagnosis.steps} iterations")


def train(bug: "Bug", config, source, run, first_stage: str) -> None:
    """The stages from `first_stage` with the bug's components; a bug with `crash_at` crashes
    there and resumes from its checkpoint, as a user's rerun after a crash does."""
    from rlhflab.verify import rerun

    if not bug.crash_at:
        rerun(config, source, run, first_stage, bug.components(), show_progress=False)
        return
    with contextlib.suppress(Crash):
        rerun(config, source, run, first_stage, bug.components(), show_progress=False, stop_when=CrashAt(bug.crash_at))
    rerun(config, source, run, "ppo", bug.components(), show_progress=False, resume=True)


def healthy_run(bug: "Bug", base: Path, out: Path, seed: int | None) -> Path:
    """The healthy run a bug is measured against: the base run (at its own seed, `None`) or
    its PPO stage at `seed`, under the settings the bug needs (`bug.config`) but with every
    default component."""
    from rlhflab.runs import RunDir

    if not bug.config:
        return base if seed is None else rerun_at_seed(None, base, out, seed)
    settings = "-".join(o.replace("=", "_") for o in bug.config)
    run = out / f"healthy-{settings}-seed{'base' if seed is None else seed}"
    if not (run / "metrics" / "eval.json").is_file():
        overrides = (*bug.config, *(() if seed is None else (f"ppo.seed={seed}",)))
        train(Bug("", "", {}), Bug("", "", {}).config_on(base, *overrides), RunDir(base), RunDir(run), "ppo")
    return run


def last_quarter_means(run: Path) -> dict[str, float]:
    """Every number a run logs (stage 3's metrics, stage 2's `rm/*` and the rest of stage 2's
    as `stage2 NAME`; no timings): the mean of its last quarter of steps."""
    series: dict[str, list[float]] = {}
    for stage in ("ppo", "reward"):
        for line in (run / "metrics" / f"{stage}.jsonl").read_text().splitlines():
            for key, value in json.loads(line).items():
                if key == "step" or key.startswith("time/") or not isinstance(value, (int, float)):
                    continue
                if math.isfinite(value):
                    name = key if stage == "ppo" or key.startswith("rm/") else f"stage2 {key}"
                    series.setdefault(name, []).append(float(value))
    return {name: statistics.fmean(values[-max(1, len(values) // 4):]) for name, values in series.items()}


def moved_metrics(name: str, base: Path, out: Path, seeds: list[int]) -> list[str]:
    """The logged numbers whose last-quarter mean, averaged over the bug's runs at `seeds`,
    lies outside the range of the healthy runs' at the same seeds (their seed spread)."""
    bug = BUGS[name]
    healthy = [last_quarter_means(healthy_run(bug, base, out, None if i == 0 else seed))
               for i, seed in enumerate(seeds)]
    buggy = [last_quarter_means(out / name if i == 0 else rerun_at_seed(name, base, out, seed))
             for i, seed in enumerate(seeds)]
    moved = []
    for metric in sorted(set.intersection(*(set(m) for m in healthy + buggy))):
        low, high = min(h[metric] for h in healthy), max(h[metric] for h in healthy)
        mean = statistics.fmean(b[metric] for b in buggy)
        slack = 1e-9 * (1 + abs(mean))  # the same number computed twice
        if mean < low - slack or mean > high + slack:
            moved.append(metric)
    return moved


HARMFUL = 0.15  # gold gain lost against the healthy run's: the bugs a user must not miss


def _summary(rows: list[dict]) -> list[str]:
    harmful = [r for r in rows if r["healthy_gain"] - r["gold_gain"] >= HARMFUL]

    def noticed(r: dict) -> bool:
        return bool(r["failed_probes"] or r["metric_findings"])

    def worse(r: dict) -> bool:
        before, after = r.get("rank_before_checkup"), r.get("rank")
        return before is not None and (after is None or after > before)

    right = sum(r["first"] == r["component"] for r in rows)
    moving = [r for r in rows if r.get("moved") or r["failed_probes"]]
    target = [
        f"- moves a logged number beyond the healthy seed spread (seeds {', '.join(map(str, rows[0]['seeds']))}) or "
        f"fails a probe: {len(moving)}; noticed {sum(noticed(r) for r in moving)} "
        f"({', '.join(r['bug'] for r in moving if not noticed(r)) or 'none'} not)"] if rows and "seeds" in rows[0] else []
    return target + [
        f"- caught by a failed probe: {sum(bool(r['failed_probes']) for r in rows)} of {len(rows)}; noticed at all (a "
        f"probe or a finding on the metrics): {sum(noticed(r) for r in rows)} of {len(rows)}; right component first: "
        f"{right} of {len(rows)}",
        f"- harmful (cost at least {HARMFUL} of the gold gain): {len(harmful)}; noticed "
        f"{sum(noticed(r) for r in harmful)} ({', '.join(r['bug'] for r in harmful if not noticed(r)) or 'none'} not); "
        f"right component first {sum(r['first'] == r['component'] for r in harmful)}",
        f"- ranked worse after the checkup than from the log and its config alone: "
        f"{', '.join(r['bug'] for r in rows if worse(r)) or 'none'}",
    ]


def _moved(r: dict) -> str:
    moved = r["moved"]
    return (", ".join(f"`{m}`" for m in moved[:3]) + (f" and {len(moved) - 3} more" if len(moved) > 3 else "")
            if moved else "none")


def _table(rows: list[dict]) -> list[str]:
    seeds = bool(rows) and "moved" in rows[0]
    lines = ["| bug | component | gold gain | failed probes | findings on the metrics | first (full doctor) "
             "| rank before / after the checkup | first (metrics alone) |" + (" logged numbers moved |" if seeds else ""),
             "|---|---|---|---|---|---|---|---|" + ("---|" if seeds else "")]
    for r in rows:
        ranks = f"{r.get('rank_before_checkup') or '-'} / {r.get('rank') or '-'}"
        lines.append(f"| `{r['bug']}`: {r['what']} | {r['component']} | {r['gold_gain']:+.3f} | "
                     f"{', '.join(r['failed_probes']) or 'none'} | {', '.join(r['metric_findings']) or 'none'} | "
                     f"{r['first']}{' (right)' if r['first'] == r['component'] else ''} | {ranks} | "
                     f"{r['log_only_first']} |" + (f" {_moved(r)} |" if seeds else ""))
    return lines


def markers(batch: str) -> tuple[str, str]:
    return (START, END) if not batch else (f"<!-- outside faults {batch}:start -->", f"<!-- outside faults {batch}:end -->")


def render_batch(out: Path, batch: str, commit: str, base: Path, label: str = "", seeds: list[int] = (),
                 rescored: bool = False) -> str:
    """A later set's section: its bugs' rows (OUT/LABEL/ when rescored under a label), scored
    by the code at `commit`."""
    start, end = markers(f"{batch} {label}".strip())
    folder = out / label if label else out
    rows = [json.loads((folder / f"{name}.json").read_text()) for name, bug in BUGS.items()
            if bug.batch == batch and (folder / f"{name}.json").is_file()]
    title = (f"the set `{batch}`" if batch else "the first two sets") + f" ({len(rows)})" + (
        f" rescored (`{label}`)" if label else "")
    extra = ((f" --batch {batch}" if batch else "") + (" --rescore" if rescored else "")
             + (f" --as {label}" if label else "") + (f" --seeds {' '.join(map(str, seeds))}" if seeds else ""))
    lines = [start, f"### Bugs outside the zoo: {title}, scored at commit {commit}", "",
             f"Command: `python bench/outside_faults.py --base {base} --out runs/outside-faults{extra} "
             "--doc docs/benchmarks.md` (2-core CPU, demo preset, seed 0), as the section above; the doctor and the "
             "checkup as they were at that commit."
             + (" A logged number moves when its last-quarter mean, averaged over the bug's runs at the seeds "
                "(`ppo.seed`; the reward model's seed kept), lies outside the range of the healthy runs' at the same "
                "seeds." if seeds else ""), "", *_summary(rows), "", *_table(rows)]
    return "\n".join(lines + [end]) + "\n"


def render(out: Path) -> str:
    rows = [json.loads((out / f"{name}.json").read_text()) for name, bug in BUGS.items()
            if not bug.batch and (out / f"{name}.json").is_file()]
    healthy = rows[0]["healthy_gain"] if rows else float("nan")
    public = [r for r in rows if r.get("public")]
    own = [r for r in rows if not r.get("public")]
    lines = [START, "",
             "Command: `python bench/outside_faults.py --base runs/faults-bench/healthy-seed0 --out "
             "runs/outside-faults --doc docs/benchmarks.md` (2-core CPU, demo preset, seed 0; `--rescore` checks and "
             "diagnoses the trained runs again after a change to the checkup or the doctor). Bugs written outside the "
             "zoo and the tests (bench/outside_faults.py), each in one default component; gold gain is the policy's "
             f"held-out gold over the stage-1 model's (healthy: {healthy:+.3f}). The rank is the right component's "
             "place among the causes of the first finding, from the log and its config alone (before) and with the "
             "checkup (after); `-` is no finding, or one that does not name it.", ""]
    if public:
        lines += [f"### From public bug reports ({len(public)})", "", *_summary(public), "", *_table(public), ""]
    if own:
        lines += [f"### Written here ({len(own)})", "", *_summary(own), "", *_table(own), ""]
    return "\n".join(lines + [END])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", type=Path, default=ROOT / "runs" / "faults-bench" / "healthy-seed0")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "outside-faults")
    parser.add_argument("--only", nargs="*", default=None, choices=sorted(BUGS))
    parser.add_argument("--doc", type=Path, default=None)
    parser.add_argument("--render-only", action="store_true", help="only write the table of OUT's results")
    parser.add_argument("--rescore", action="store_true", help="check and diagnose OUT's trained runs again")
    parser.add_argument("--batch", default="", help="a later set of bugs only (their own section of the doc)")
    parser.add_argument("--as", dest="label", default="",
                        help="keep the rows in OUT/LABEL and the section apart from the first scoring")
    parser.add_argument("--seeds", type=int, nargs="*", default=[],
                        help="also rerun PPO at these seeds (the first: the runs' own) and say which logged numbers "
                             "each bug moves beyond the healthy seed spread")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rows = args.out / args.label if args.label else args.out
    if not args.render_only:
        for name in args.only or [n for n, bug in BUGS.items() if bug.batch == args.batch]:
            run_bug(name, args.base, args.out, args.rescore, rows, args.seeds)
    if args.doc is not None and (args.batch or args.label):
        import subprocess

        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                text=True).stdout.strip()
        replace_section(args.doc, *markers(f"{args.batch} {args.label}".strip()),
                        render_batch(args.out, args.batch, commit, args.base, args.label, args.seeds, args.rescore))
    elif args.doc is not None:
        replace_section(args.doc, START, END, render(args.out))


if __name__ == "__main__":
    main()
