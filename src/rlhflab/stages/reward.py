"""Stage 2: a scalar reward model trained on pairwise comparisons with the
Bradley-Terry loss (Bradley & Terry 1952; Christiano et al. 2017; Ouyang et al. 2022
eq. 1). The comparisons are pairs of stage-1 samples for one prompt, labelled by the
world's simulated labeler; fresh pairs on held-out prompts measure agreement with gold.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import torch
from torch import Tensor

from rlhflab.config import PipelineConfig
from rlhflab.data.batching import decode_responses, encode_prompts, join_prompt_response
from rlhflab.models.bradley_terry import bt_loss
from rlhflab.models.lm import load_causal_lm
from rlhflab.models.reward_model import reward_model_from_lm, score_sequences
from rlhflab.models.sampling import sample_responses
from rlhflab.progress import progress_bar
from rlhflab.runs import RunDir, stage_logger
from rlhflab.seeding import derive_seed, py_rng, torch_generator
from rlhflab.stages.pretrain import decay_groups
from rlhflab.worlds.reviews import ReviewsWorld, SimulatedLabeler


@dataclass(frozen=True)
class Comparisons:
    """Pairs of responses to one prompt each; row i of `first` and `second` share a prompt."""

    first_ids: Tensor  # (N, L) [prompt | response], mixed left/right padding
    first_mask: Tensor  # (N, L) True for real tokens
    second_ids: Tensor  # (N, L)
    second_mask: Tensor  # (N, L)
    first_preferred: Tensor  # (N,) bool, the labeler's choice
    first_gold: Tensor  # (N,) gold utility of the first response
    second_gold: Tensor  # (N,)
    first_length: Tensor  # (N,) response tokens
    second_length: Tensor  # (N,)

    def __len__(self) -> int:
        return len(self.first_preferred)

    def chosen_rejected(self, index: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        pick = self.first_preferred[index, None]
        chosen = torch.where(pick, self.first_ids[index], self.second_ids[index])
        chosen_mask = torch.where(pick, self.first_mask[index], self.second_mask[index])
        rejected = torch.where(pick, self.second_ids[index], self.first_ids[index])
        rejected_mask = torch.where(pick, self.second_mask[index], self.first_mask[index])
        return chosen, chosen_mask, rejected, rejected_mask


@dataclass(frozen=True)
class RewardResult:
    train_loss: float
    train_acc: float
    val_acc: float
    gold_agreement: float
    length_corr: float
    reward_mean: float
    reward_std: float
    seconds: float


@torch.no_grad()
def sample_comparisons(
    policy, tokenizer, world: ReviewsWorld, prompts: list[str], response_length: int,
    temperature: float, labeler_seed: int, generator: torch.Generator, batch_size: int = 512,
) -> Comparisons:
    """Two stage-1 samples per prompt, labelled by the simulated labeler."""
    policy.eval()
    labeler_rng = py_rng(labeler_seed, "labeler")
    labeler = SimulatedLabeler(world.grammar, world.config)
    halves: list[list[tuple[Tensor, Tensor, list[str], Tensor]]] = [[], []]
    for start in range(0, len(prompts), batch_size):
        chunk = prompts[start : start + batch_size]
        prompt_ids, prompt_mask = encode_prompts(tokenizer, chunk)
        for half in halves:
            s = sample_responses(
                policy, prompt_ids, prompt_mask, response_length, temperature,
                tokenizer.eos_token_id, tokenizer.pad_token_id, generator,
            )
            ids, mask = join_prompt_response(prompt_ids, prompt_mask, s.response_ids, s.mask)
            half.append((ids, mask, decode_responses(tokenizer, s.response_ids, s.mask), s.mask.sum(1)))
    (a_ids, a_mask, a_text, a_len), (b_ids, b_mask, b_text, b_len) = (_stack(h) for h in halves)
    gold_a = torch.tensor(world.gold(prompts, a_text))
    gold_b = torch.tensor(world.gold(prompts, b_text))
    preferred = torch.tensor(
        [labeler.prefers_first(p, a, b, labeler_rng) for p, a, b in zip(prompts, a_text, b_text)]
    )
    return Comparisons(a_ids, a_mask, b_ids, b_mask, preferred, gold_a, gold_b, a_len, b_len)


def _stack(parts):
    width = max(p[0].shape[1] for p in parts)
    ids = torch.cat([_pad_right(p[0], width, 0) for p in parts])
    mask = torch.cat([_pad_right(p[1], width, False) for p in parts])
    texts = [t for p in parts for t in p[2]]
    lengths = torch.cat([p[3] for p in parts])
    return ids, mask, texts, lengths


def _pad_right(x: Tensor, width: int, value) -> Tensor:
    if x.shape[1] == width:
        return x
    pad = torch.full((x.shape[0], width - x.shape[1]), value, dtype=x.dtype)
    return torch.cat([x, pad], dim=1)


@torch.no_grad()
def score_all(model, ids: Tensor, mask: Tensor, batch_size: int = 512) -> Tensor:
    model.eval()
    return torch.cat([score_sequences(model, ids[i : i + batch_size], mask[i : i + batch_size])
                      for i in range(0, len(ids), batch_size)])


def pearson(x: Tensor, y: Tensor) -> float:
    x, y = x.double() - x.double().mean(), y.double() - y.double().mean()
    denominator = float(x.norm() * y.norm())
    return float((x * y).sum()) / denominator if denominator > 0 else math.nan


@torch.no_grad()
def evaluate_reward_model(model, val: Comparisons, gold: Comparisons) -> dict[str, float]:
    """Held-out label accuracy, agreement with gold on fresh pairs, and score-length correlation."""
    val_first, val_second = score_all(model, val.first_ids, val.first_mask), score_all(model, val.second_ids, val.second_mask)
    val_acc = float(((val_first > val_second) == val.first_preferred).float().mean())
    g_first, g_second = score_all(model, gold.first_ids, gold.first_mask), score_all(model, gold.second_ids, gold.second_mask)
    decided = gold.first_gold != gold.second_gold
    agree = (g_first > g_second) == (gold.first_gold > gold.second_gold)
    scores = torch.cat([g_first, g_second])
    lengths = torch.cat([gold.first_length, gold.second_length]).float()
    return {
        "rm/val_acc": val_acc,
        "rm/gold_agreement": float(agree[decided].float().mean()),
        "rm/length_corr": pearson(scores, lengths),
    }


def run_reward(config: PipelineConfig, run: RunDir, show_progress: bool = True) -> RewardResult:
    cfg = config.reward
    start = time.perf_counter()
    world = ReviewsWorld(config.world)
    tokenizer = world.tokenizer()
    policy = load_causal_lm(run.stage1_lm)
    sampling = torch_generator(config.seed, "reward", "samples")
    train_prompts = world.prompts(cfg.pairs + cfg.val_pairs, derive_seed(config.seed, "rm-prompts"))
    gold_prompts = world.prompts(cfg.gold_pairs, derive_seed(config.seed, "rm-gold-prompts"))
    labelled = sample_comparisons(
        policy, tokenizer, world, train_prompts, cfg.response_length, cfg.sample_temperature,
        derive_seed(config.seed, "rm-labels"), sampling,
    )
    gold = sample_comparisons(
        policy, tokenizer, world, gold_prompts, cfg.response_length, cfg.sample_temperature,
        derive_seed(config.seed, "rm-gold-labels"), sampling,
    )
    train = _subset(labelled, torch.arange(cfg.pairs))
    val = _subset(labelled, torch.arange(cfg.pairs, cfg.pairs + cfg.val_pairs))
    del policy

    torch.manual_seed(derive_seed(config.seed, "rm-init"))
    model = reward_model_from_lm(run.stage1_lm)
    optimizer = torch.optim.AdamW(decay_groups(model, cfg.weight_decay), lr=cfg.lr)
    steps_per_epoch = math.ceil(len(train) / cfg.batch_size)
    total = steps_per_epoch * cfg.epochs
    warmup = max(1, total // 20)
    order = torch_generator(config.seed, "reward", "order")
    logger = stage_logger(run, "reward")
    step, loss_value, acc_value, evaluation = 0, math.nan, math.nan, {}
    with progress_bar("stage 2 reward", total, show_progress) as bar:
        for epoch in range(cfg.epochs):
            permutation = torch.randperm(len(train), generator=order)
            for i in range(steps_per_epoch):
                model.train()
                lr = cfg.lr * min((step + 1) / warmup, max(0.0, (total - step) / max(1, total - warmup)))
                for group in optimizer.param_groups:
                    group["lr"] = lr
                index = permutation[i * cfg.batch_size : (i + 1) * cfg.batch_size]
                chosen, chosen_mask, rejected, rejected_mask = train.chosen_rejected(index)
                scores = score_sequences(model, torch.cat([chosen, rejected]), torch.cat([chosen_mask, rejected_mask]))
                loss, accuracy = bt_loss(scores[: len(index)], scores[len(index) :])
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
                optimizer.step()
                loss_value, acc_value = float(loss), float(accuracy)
                metrics = {"rm/train_loss": loss_value, "rm/train_acc": acc_value, "lr": lr}
                if i == steps_per_epoch - 1:
                    evaluation = evaluate_reward_model(model, val, gold)
                    metrics |= evaluation | {"epoch": epoch + 1}
                logger.log(step, metrics)
                bar.advance(info=f"loss {loss_value:.3f} acc {acc_value:.2f}")
                step += 1
    logger.close()

    # Standardise PPO rewards by the scores of the distribution the RM was trained on.
    train_scores = torch.cat([score_all(model, train.first_ids, train.first_mask),
                              score_all(model, train.second_ids, train.second_mask)])
    model.config.reward_mean = float(train_scores.mean())
    model.config.reward_std = float(train_scores.std())
    model.config.reward_min = float(train_scores.min())
    model.config.reward_max = float(train_scores.max())
    model.eval()
    model.save_pretrained(str(run.stage2_rm))
    tokenizer.save_pretrained(str(run.stage2_rm))
    return RewardResult(
        loss_value, acc_value, evaluation["rm/val_acc"], evaluation["rm/gold_agreement"],
        evaluation["rm/length_corr"], model.config.reward_mean, model.config.reward_std,
        time.perf_counter() - start,
    )


def _subset(c: Comparisons, index: Tensor) -> Comparisons:
    return Comparisons(*(getattr(c, f)[index] for f in Comparisons.__dataclass_fields__))
