"""Stage 2: a scalar reward model trained on pairwise comparisons with the
Bradley-Terry loss (Bradley & Terry 1952; Christiano et al. 2017; Ouyang et al. 2022
eq. 1). The comparisons are pairs of stage-1 samples for one prompt, labelled by the
world's simulated labeler; fresh pairs on held-out prompts measure agreement with gold.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace

import torch
from torch import Tensor

from rlhflab.config import PipelineConfig
from rlhflab.data.batching import decode_responses, encode_prompts, encode_responses, join_prompt_response
from rlhflab.data.files import PreferenceRecord
from rlhflab.distributed import Cluster
from rlhflab.engines import make_engine
from rlhflab.metrics.stats import pearson
from rlhflab.models.blocks import checkpoint_blocks_if
from rlhflab.models.bradley_terry import pair_scores
from rlhflab.models.lm import load_causal_lm, load_tokenizer, save_pretrained
from rlhflab.models.lora import save_merged_classifier, with_trunk_adapters
from rlhflab.models.precision import use_bf16
from rlhflab.models.reward_model import reward_model_from_lm, score_sequences
from rlhflab.models.sampling import sample_responses, sample_share
from rlhflab.ppo.components import PPOComponents, first_for_training, gradient_step
from rlhflab.progress import progress_bar
from rlhflab.runs import RunDir, atomic_dir, stage_logger
from rlhflab.seeding import RowStreams, derive_seed, py_rng, rows_of, torch_generator
from rlhflab.sources import context_length, preference_data, reward_base_dir
from rlhflab.stages.pretrain import decay_groups
from rlhflab.worlds.reviews import ReviewsWorld, SimulatedLabeler


@dataclass(frozen=True)
class Comparisons:
    """K responses to each of N prompts, and the labeler's choice for every pair of them.

    Labelling all C(K, 2) pairs of K responses, and scoring the K responses once for
    all their pairs, follows Ouyang et al. 2022 (sec. 3.5): more comparisons per
    forward, and no pair seen in two places (less overfitting).
    """

    ids: Tensor  # (N, K, L) [prompt | response], mixed left/right padding
    mask: Tensor  # (N, K, L) True for real tokens
    gold: Tensor | None  # (N, K) gold utility of each response; None for the user's pairs
    lengths: Tensor  # (N, K) response tokens
    pairs: Tensor  # (C, 2) long: the response indices (i, j), i < j, of each pair
    first_preferred: Tensor  # (N, C) bool: the labeler preferred response pairs[c, 0]

    def __len__(self) -> int:
        return self.ids.shape[0]

    @property
    def comparisons(self) -> int:
        return self.first_preferred.numel()

    def select(self, index: Tensor) -> "Comparisons":
        gold = self.gold[index] if self.gold is not None else None
        return Comparisons(self.ids[index], self.mask[index], gold, self.lengths[index], self.pairs,
                           self.first_preferred[index])

    def trimmed(self, width: int) -> "Comparisons":
        """The first `width` positions of every row."""
        return replace(self, ids=self.ids[..., :width], mask=self.mask[..., :width])

    def to(self, device: torch.device) -> "Comparisons":
        return replace(self, ids=self.ids.to(device), mask=self.mask.to(device), lengths=self.lengths.to(device),
                       pairs=self.pairs.to(device), first_preferred=self.first_preferred.to(device),
                       gold=self.gold.to(device) if self.gold is not None else None)


class Scorer(torch.nn.Module):
    """A reward model's score (`score_sequences`) as its forward. (B, L) -> (B,)"""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        return score_sequences(self.model, input_ids, attention_mask)


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


def reward_step(score, batch: Comparisons, components: PPOComponents, optimizer: torch.optim.Optimizer,
                parameters, max_grad_norm: float, weight: float = 1.0) -> tuple[Tensor, Tensor]:
    """One Bradley-Terry step on `batch`: every response scored once (`score`, (B, L) -> (B,)),
    each comparison's chosen and rejected scores, the loss over the comparisons, and one
    optimiser step on the loss times `weight` (a process's share under torchrun). Returns
    the loss and the accuracy on the batch, before the step."""
    N, K, L = batch.ids.shape
    scores = score(batch.ids.view(N * K, L), batch.mask.view(N * K, L)).view(N, K)
    chosen, rejected = components.preference_pairs(scores, batch.pairs, batch.first_preferred)
    loss, accuracy = components.preference_loss(chosen, rejected)
    gradient_step(optimizer, parameters, loss * weight, max_grad_norm)
    return loss, accuracy


@torch.no_grad()
def sample_comparisons(
    policy, tokenizer, world: ReviewsWorld, prompts: list[str], responses_per_prompt: int,
    response_length: int, temperature: float, labeler_seed: int, streams: RowStreams | torch.Generator,
    batch_size: int = 1024, cluster: Cluster = Cluster.single(), join=join_prompt_response,
) -> Comparisons:
    """K stage-1 samples per prompt (row r of the repeated prompts drawing from stream r);
    the simulated labeler labels every pair. Under several processes each samples its
    share of every chunk, and every process gets all the comparisons. `join` makes a row
    of a prompt and a response, as the reward model reads it."""
    policy.eval()
    K = responses_per_prompt
    labeler_rng = py_rng(labeler_seed, "labeler")
    repeated = [p for p in prompts for _ in range(K)]  # prompt i at rows i*K .. i*K+K-1
    rows, texts, lengths = [], [], []
    for start in range(0, len(repeated), batch_size):
        chunk = repeated[start : start + batch_size]
        share = sample_share(sample_responses, policy, tokenizer, chunk, response_length, temperature,
                             rows_of(streams, list(range(start, start + len(chunk)))), cluster)
        # Comparisons are kept on the CPU; training moves each batch to the model's device.
        response_ids = cluster.gather_rows(share.samples.response_ids, len(chunk)).cpu()
        response_mask = cluster.gather_rows(share.samples.mask, len(chunk)).cpu()
        prompt_ids, prompt_mask = encode_prompts(tokenizer, chunk)
        rows.append(join(prompt_ids, prompt_mask, response_ids, response_mask))
        texts += decode_responses(tokenizer, response_ids, response_mask)
        lengths.append(response_mask.sum(1))
    width = max(ids.shape[1] for ids, _ in rows)
    ids = torch.cat([_pad_right(i, width, tokenizer.pad_token_id) for i, _ in rows])
    mask = torch.cat([_pad_right(m, width, False) for _, m in rows])
    utilities = world.gold(repeated, texts)
    gold = torch.tensor(utilities)
    pairs = torch.tensor([(i, j) for i in range(K) for j in range(i + 1, K)], dtype=torch.long)
    # From the utilities computed once per response: prefers_first would compute each again in each of its K - 1 pairs.
    labeler = SimulatedLabeler(world.grammar, world.config)
    preferred = torch.tensor([
        [labeler.prefers_higher(utilities[n * K + i], utilities[n * K + j], labeler_rng) for i, j in pairs.tolist()]
        for n in range(len(prompts))
    ], dtype=torch.bool)
    N = len(prompts)
    return Comparisons(ids.view(N, K, -1), mask.view(N, K, -1), gold.view(N, K),
                       torch.cat(lengths).view(N, K), pairs, preferred)


def _pad_right(x: Tensor, width: int, value) -> Tensor:
    if x.shape[1] == width:
        return x
    pad = torch.full((x.shape[0], width - x.shape[1]), value, dtype=x.dtype)
    return torch.cat([x, pad], dim=1)


@torch.no_grad()
def score_all(model, ids: Tensor, mask: Tensor, score_fn=score_sequences, batch_size: int = 512,
              cluster: Cluster = Cluster.single()) -> Tensor:
    """Scores of every row, in batches on the model's device, returned on the CPU. (N,)
    Under several processes each scores its share of every batch (one forward per batch
    on every process, as FSDP2's collectives need) and every process gets all scores."""
    model.eval()
    device = next(model.parameters()).device
    scores = []
    for start in range(0, len(ids), batch_size):
        batch = torch.arange(start, min(start + batch_size, len(ids)))
        rows = cluster.shard(batch)
        local = score_fn(model, ids[rows].to(device), mask[rows].to(device))
        scores.append(cluster.gather_rows(local, len(batch)).cpu())
    return torch.cat(scores)


def group_scores(model, c: Comparisons, score_fn=score_sequences, cluster: Cluster = Cluster.single()) -> Tensor:
    """Scores of every response. (N, K)"""
    N, K, L = c.ids.shape
    return score_all(model, c.ids.view(N * K, L), c.mask.view(N * K, L), score_fn, cluster=cluster).view(N, K)


@torch.no_grad()
def evaluate_reward_model(model, val: Comparisons, gold: Comparisons | None,
                          score_fn=score_sequences, cluster: Cluster = Cluster.single()) -> dict[str, float]:
    """Held-out label accuracy, agreement with gold on fresh pairs (when a gold exists), and
    score-length correlation (on the gold pairs, else on the held-out pairs)."""
    val_scores = group_scores(model, val, score_fn, cluster)
    chosen, rejected = pair_scores(val_scores, val.pairs, val.first_preferred)
    metrics = {"rm/val_acc": float((chosen > rejected).float().mean())}
    if gold is None or gold.gold is None:
        return metrics | {"rm/length_corr": pearson(val_scores.flatten(), val.lengths.flatten().float())}
    scores = group_scores(model, gold, score_fn, cluster)
    first, second = scores[:, gold.pairs[:, 0]], scores[:, gold.pairs[:, 1]]
    g_first, g_second = gold.gold[:, gold.pairs[:, 0]], gold.gold[:, gold.pairs[:, 1]]
    decided = g_first != g_second
    agree = (first > second) == (g_first > g_second)
    return metrics | {
        "rm/gold_agreement": float(agree[decided].float().mean()),
        "rm/length_corr": pearson(scores.flatten(), gold.lengths.flatten().float()),
    }


def comparisons_from_pairs(tokenizer, records: list[PreferenceRecord], join=join_prompt_response) -> Comparisons:
    """The user's (prompt, chosen, rejected) pairs as K = 2 comparisons, chosen first."""
    prompts = [r.prompt for r in records for _ in range(2)]
    responses = [text for r in records for text in (r.chosen, r.rejected)]
    prompt_ids, prompt_mask = encode_prompts(tokenizer, prompts)
    response_ids, response_mask = encode_responses(tokenizer, responses)
    ids, mask = join(prompt_ids, prompt_mask, response_ids, response_mask)
    N = len(records)
    return Comparisons(ids.view(N, 2, -1), mask.view(N, 2, -1), None, response_mask.sum(1).view(N, 2),
                       torch.tensor([[0, 1]]), torch.ones((N, 1), dtype=torch.bool))


def prompts_for(comparisons: int, responses_per_prompt: int) -> int:
    """Prompts needed for at least `comparisons` labelled pairs."""
    per_prompt = responses_per_prompt * (responses_per_prompt - 1) // 2
    return math.ceil(comparisons / per_prompt)


def world_comparisons(config: PipelineConfig, run: RunDir, tokenizer, device: torch.device,
                      cluster: Cluster = Cluster.single(), join=join_prompt_response, split=first_for_training,
                      ) -> tuple[Comparisons, Comparisons, Comparisons]:
    """(train, held-out, gold) comparisons of stage-1 samples labelled by the world's labeler,
    the first two as `split` divides them."""
    cfg = config.reward
    K = cfg.responses_per_prompt
    world = ReviewsWorld(config.world)
    policy = load_causal_lm(run.stage1_lm).to(device)
    n_train, n_val = prompts_for(cfg.pairs, K), prompts_for(cfg.val_pairs, K)
    prompts = world.prompts(n_train + n_val, derive_seed(config.seed, "rm-prompts"))
    labelled = sample_comparisons(
        policy, tokenizer, world, prompts, K, cfg.response_length, cfg.sample_temperature,
        derive_seed(config.seed, "rm-labels"),
        RowStreams(config.seed, ("reward", "samples"), list(range(len(prompts) * K))), cluster=cluster, join=join,
    )
    gold_prompts = world.prompts(prompts_for(cfg.gold_pairs, K), derive_seed(config.seed, "rm-gold-prompts"),
                                 split="heldout")
    gold = sample_comparisons(
        policy, tokenizer, world, gold_prompts, K, cfg.response_length, cfg.sample_temperature,
        derive_seed(config.seed, "rm-gold-labels"),
        RowStreams(config.seed, ("reward", "gold-samples"), list(range(len(gold_prompts) * K))), cluster=cluster,
        join=join,
    )
    train_rows, val_rows = split(n_train, n_val)
    return labelled.select(train_rows), labelled.select(val_rows), gold


def run_reward(config: PipelineConfig, run: RunDir, show_progress: bool = True,
               cluster: Cluster = Cluster.single(), components: PPOComponents = PPOComponents()) -> RewardResult:
    """Train and save the reward model, whose score is read at the last real token: on the
    user's preference file (`data.preferences`), else on labelled stage-1 samples, with the
    pairs, loss and optimiser step of `components`. Under
    torchrun each process takes its share of every batch's prompts (distributed.py) and
    only the first writes files."""
    cfg = config.reward
    start = time.perf_counter()
    use_bf16(config.compute.bf16)
    base = reward_base_dir(config, run)
    tokenizer = load_tokenizer(base)
    if config.data.preferences:
        train_pairs, val_pairs = preference_data(config, tokenizer, context_length(base, config))
        train, val = (comparisons_from_pairs(tokenizer, pairs, components.comparison_rows)
                      for pairs in (train_pairs, val_pairs))
        gold = None
    else:
        train, val, gold = world_comparisons(config, run, tokenizer, cluster.device, cluster,
                                             components.comparison_rows, components.comparison_split)

    torch.manual_seed(derive_seed(config.seed, "rm-init"))
    model = reward_model_from_lm(base).to(cluster.device)
    adapted = bool(config.lora.rank and config.lora.reward_model)
    if adapted:
        model = with_trunk_adapters(model, config.lora)
    checkpoint_blocks_if(config.compute.activation_checkpointing, model, cluster.device.type)
    engine = make_engine(config.distributed, cluster)
    # Through one module's forward, where DDP and FSDP2 hook their communication (the score
    # is read from the trunk and the head, not the model's own forward).
    scorer = Scorer(model)
    trained = engine.trained(scorer)
    optimizer = torch.optim.AdamW(decay_groups(scorer, cfg.weight_decay), lr=cfg.lr)
    score = lambda _, ids, mask: trained(ids, mask)  # noqa: E731
    steps_per_epoch = math.ceil(len(train) / cfg.batch_size)
    # A prompt's K responses go through the model together, as wide as the longest of them.
    group_lengths = train.mask.sum(2).max(1).values
    total = steps_per_epoch * cfg.epochs
    order = torch_generator(config.seed, "reward", "order")
    logger = stage_logger(run, "reward", is_main=cluster.is_main)
    show_progress = show_progress and cluster.is_main
    step, loss_value, acc_value, evaluation = 0, math.nan, math.nan, {}
    with progress_bar("stage 2 reward", total, show_progress) as bar:
        for epoch in range(cfg.epochs):
            batches = components.reward_batches(group_lengths, cfg.batch_size, order)
            for i, rows in enumerate(batches):
                model.train()
                lr = components.reward_lr(cfg.lr, step, steps_per_epoch, cfg.epochs)
                for group in optimizer.param_groups:
                    group["lr"] = lr
                batch = train.select(cluster.shard(rows))
                # A prompt's K responses go through the model as wide as the batch's longest row
                # (of every process's share, so that the processes' forwards have one shape).
                width = int(train.mask[rows].any(1).any(0).nonzero().max()) + 1
                # Every prompt has the same pairs, so a process's fraction of the pairs is its fraction
                # of the rows.
                share = len(batch) / len(rows)
                loss, accuracy = reward_step(trained, batch.trimmed(width).to(cluster.device), components, optimizer,
                                             scorer.parameters(), cfg.max_grad_norm, engine.loss_weight(share))
                summed = cluster.sum({"loss": loss.item() * share, "acc": accuracy.item() * share})
                loss_value, acc_value = summed["loss"], summed["acc"]
                metrics = {"rm/train_loss": loss_value, "rm/train_acc": acc_value, "lr": lr}
                if i == len(batches) - 1:
                    evaluation = evaluate_reward_model(scorer, val, gold, score, cluster)
                    metrics |= evaluation | {"epoch": epoch + 1}
                logger.log(step, metrics)
                bar.advance(info=f"loss {loss_value:.3f} acc {acc_value:.2f}")
                step += 1
    logger.close()

    # Standardise PPO rewards by the scores of the distribution the RM was trained on.
    train_scores = group_scores(scorer, train, score, cluster).flatten()
    model.config.reward_mean = float(train_scores.mean())
    model.config.reward_std = float(train_scores.std())
    model.config.reward_min = float(train_scores.min())
    model.config.reward_max = float(train_scores.max())
    scorer.eval()
    weights = engine.full_state_dict(scorer)  # every process takes part in gathering them
    if cluster.is_main:
        with atomic_dir(run.stage2_rm) as out:
            state = {k.removeprefix("model."): v for k, v in weights.items()}
            if adapted:  # merged into plain weights: stage 3 and any tool load an ordinary classifier
                save_merged_classifier(model, base, config.lora, state, out)
            else:
                save_pretrained(model, out, state)
            tokenizer.save_pretrained(str(out))
    cluster.barrier()  # the other processes read stage2_rm next
    return RewardResult(
        loss_value, acc_value, evaluation["rm/val_acc"], evaluation.get("rm/gold_agreement", math.nan),
        evaluation["rm/length_corr"], model.config.reward_mean, model.config.reward_std,
        time.perf_counter() - start,
    )
