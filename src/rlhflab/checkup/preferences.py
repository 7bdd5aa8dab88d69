"""Probes of the reward model's training step (`stages/reward.py: reward_step`), each through
the configured stage-2 component: the rows the reward model learns from are the rows stage 3
scores; each comparison's chosen score is the labelled response's (a naive loop over the
pairs as the second path); the loss is the Bradley-Terry negative log-likelihood (Bradley
and Terry 1952; Ouyang et al. 2022 eq. 1) with a tie counted as a wrong answer; and the
learning rate warms up, then falls to its end by the end of the last epoch."""

from __future__ import annotations

import math

import torch

from rlhflab.checkup.context import ProbeContext
from rlhflab.checkup.results import ProbeResult, forward_within, within
from rlhflab.models.precision import autocast


def _sigmoid(x: float) -> float:
    return 1 / (1 + math.exp(-x))


@torch.no_grad()
def probe_reward_model_learns_from_the_rows_it_scores(ctx: ProbeContext) -> ProbeResult:
    """The rollout's prompts and responses made into comparison rows (`comparison_rows`)
    and scored, against the same responses scored as stage 3 reads them (`[prompt |
    response]` through the first EOS): a reward model trained on other rows (without the
    prompt, another template) learns a reading stage 3 never asks of it."""
    rollout, reward = ctx.rollout(), ctx.state.reward
    ids, mask = ctx.state.components.comparison_rows(rollout.prompt_ids, rollout.prompt_mask, rollout.response_ids,
                                                     ctx.response_mask())
    with autocast(ids.device):
        learned = reward.raw_scores(ids, mask)
        scored = reward.raw_scores(rollout.input_ids, ctx.attention_mask())
    return forward_within("reward_model_learns_from_the_rows_it_scores", "reward_model",
                          float((learned - scored).abs().max()), ctx.dtype,
                          "largest difference between the reward model's score of a comparison row and of the same "
                          "prompt and response as stage 3 scores it")


def probe_preference_pairs_follow_the_labels(ctx: ProbeContext) -> ProbeResult:
    """Each comparison's chosen and rejected scores (`preference_pairs`) on random scores and
    labels, against a loop over the prompts and their pairs."""
    g = torch.Generator().manual_seed(0)
    N, K = 5, 4
    scores = torch.randn((N, K), generator=g, dtype=torch.float64)
    pairs = torch.tensor([(i, j) for i in range(K) for j in range(i + 1, K)])
    first = torch.rand((N, len(pairs)), generator=g) < 0.5
    chosen, rejected = ctx.state.components.preference_pairs(scores, pairs, first)
    expected = [(scores[n, i if first[n, c] else j], scores[n, j if first[n, c] else i])
                for n in range(N) for c, (i, j) in enumerate(pairs.tolist())]
    if chosen.shape != (len(expected),) or rejected.shape != (len(expected),):
        return within("preference_pairs_follow_the_labels", "reward_model", math.inf, 0.0,
                      f"chosen/rejected shapes {tuple(chosen.shape)}, {tuple(rejected.shape)}; expected "
                      f"({len(expected)},) each")
    want = torch.tensor(expected, dtype=torch.float64)
    error = float(torch.maximum((chosen - want[:, 0]).abs(), (rejected - want[:, 1]).abs()).max())
    return within("preference_pairs_follow_the_labels", "reward_model", error, 0.0,
                  f"largest difference between a comparison's chosen or rejected score and the labelled one's "
                  f"({N} prompts x {len(pairs)} pairs)")


def probe_preference_loss_is_bradley_terry(ctx: ProbeContext) -> ProbeResult:
    """The loss and accuracy (`preference_loss`) on margins 2, 0 and -2: loss and gradient
    by hand, -mean(log sigmoid(margin)) and -sigmoid(-margin) / 3 for each chosen score, and
    an accuracy of 1/3 (a tie is no preference for the chosen response)."""
    chosen = torch.tensor([2.0, 0.5, 1.0], dtype=torch.float64, requires_grad=True)
    rejected = torch.tensor([0.0, 0.5, 3.0], dtype=torch.float64)
    loss, accuracy = ctx.state.components.preference_loss(chosen, rejected)
    (grad,) = torch.autograd.grad(loss, chosen)
    loss, accuracy = loss.item(), accuracy.item()
    margins = [2.0, 0.0, -2.0]
    want_loss = -sum(math.log(_sigmoid(m)) for m in margins) / 3
    want_grad = torch.tensor([-_sigmoid(-m) / 3 for m in margins], dtype=torch.float64)
    error = max(abs(loss - want_loss), abs(accuracy - 1 / 3), float((grad - want_grad).abs().max()))
    return within("preference_loss_is_bradley_terry", "reward_model", error, 1e-9,
                  f"largest difference of the loss ({loss:.4f}, by hand {want_loss:.4f}), the accuracy "
                  f"({accuracy:.3f}, by hand 0.333 with the tie wrong) and the gradient from the hand "
                  "computation")


def probe_reward_lr_falls_to_its_end(ctx: ProbeContext) -> ProbeResult:
    """The reward model's learning rate (`reward_lr`) over the configured stage 2: its peak
    is the configured rate, reached within the first tenth of the steps, and one step past
    the last it has fallen to at most 1% of the peak (a schedule sized for more steps than
    run, e.g. the epochs counted twice, ends high)."""
    from rlhflab.stages.reward import prompts_for  # the stage's own step count

    cfg = ctx.config.reward
    steps_per_epoch = math.ceil(prompts_for(cfg.pairs, cfg.responses_per_prompt) / cfg.batch_size)
    total = steps_per_epoch * cfg.epochs
    rates = [ctx.state.components.reward_lr(cfg.lr, step, steps_per_epoch, cfg.epochs) for step in range(total + 1)]
    peak = max(rates[:-1])
    late_peak = rates.index(peak) > max(1, total // 10)
    error = max(abs(peak - cfg.lr) / cfg.lr, rates[-1] / peak - 0.01, 1.0 if late_peak else 0.0)
    return within("reward_lr_falls_to_its_end", "reward_model", max(error, 0.0), 1e-9,
                  f"the rate's peak {peak:g} (configured {cfg.lr:g}) at step {rates.index(peak)} of {total}, and "
                  f"{rates[-1] / peak:.1%} of it one step past the last (at most 1%)")


def probe_reward_step_trains_on_every_labelled_pair(ctx: ProbeContext) -> ProbeResult:
    """One real `reward_step` (stage 2's training step, with the configured pairs and loss) on
    a small batch of comparisons with left padding of varied width, the score a known
    function of each row (a weight times its real tokens' sum): its loss must be the
    Bradley-Terry loss of the labelled pairs of those scores (a loop as the second path),
    and its step (plain SGD at rate 1, no clipping) must move the weight by that loss's
    gradient: a score tensor read in the wrong order, a pair left out or a step on another
    loss shows."""
    from rlhflab.stages.reward import Comparisons, reward_step

    g = torch.Generator().manual_seed(0)
    N, K, L = 3, 4, 6
    ids = torch.randint(1, 50, (N, K, L), generator=g)
    mask = torch.ones((N, K, L), dtype=torch.bool)
    pad = torch.randint(0, 3, (N, K), generator=g)
    mask &= torch.arange(L)[None, None, :] >= pad[..., None]
    pairs = torch.tensor([(i, j) for i in range(K) for j in range(i + 1, K)])
    first = torch.rand((N, len(pairs)), generator=g) < 0.5
    features = (ids * mask).sum(2).double() / 100  # (N, K)
    weight = torch.nn.Parameter(torch.tensor(0.3, dtype=torch.float64))

    def score(rows: torch.Tensor, row_mask: torch.Tensor) -> torch.Tensor:
        return weight * (rows * row_mask).sum(1).double() / 100

    start = weight.item()
    loss, _ = reward_step(score, Comparisons(ids, mask, None, mask.sum(2), pairs, first), ctx.state.components,
                          torch.optim.SGD([weight], lr=1.0), [weight], max_grad_norm=1e12)
    loss = loss.item()
    margins = [(features[n, i] - features[n, j]) * (1 if first[n, c] else -1)
               for n in range(N) for c, (i, j) in enumerate(pairs.tolist())]
    want_loss = -sum(math.log(_sigmoid(start * float(m))) for m in margins) / len(margins)
    want_grad = -sum(float(m) * _sigmoid(-start * float(m)) for m in margins) / len(margins)
    error = max(abs(loss - want_loss), abs((start - weight.item()) - want_grad))
    return within("reward_step_trains_on_every_labelled_pair", "reward_model", error, 1e-9,
                  f"largest difference of one reward_step's loss ({loss:.6f}, by a loop over the {len(margins)} "
                  f"labelled pairs {want_loss:.6f}) and of its move of the weight from the loop's")
