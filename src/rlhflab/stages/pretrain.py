"""Stage 1: the policy the RL loop starts from, and the frozen reference of the KL penalty.

On the embedded world, a tiny causal LM trained from scratch on the world's corpus
(next-token cross-entropy over `<bos> review <eos>`). With the user's model and SFT
file (config `data.model`, `data.sft`), supervised fine-tuning of that model on
`<bos> prompt completion <eos>` with the loss on the completion and EOS only
(Ouyang et al. 2022 sec. 3.5; the prompt is context, not a target).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from rlhflab.config import PipelineConfig, PretrainConfig
from rlhflab.data.batching import decode_responses, encode_sft, length_grouped_batches
from rlhflab.distributed import Cluster
from rlhflab.engines import clip_grad_norm, make_engine
from rlhflab.models.blocks import checkpoint_blocks_if
from rlhflab.models.lm import build_tiny_lm, count_parameters, load_causal_lm, save_pretrained
from rlhflab.models.precision import use_bf16
from rlhflab.models.sampling import sample_responses, sample_share
from rlhflab.ppo.components import PPOComponents
from rlhflab.progress import progress_bar
from rlhflab.runs import RunDir, atomic_dir, stage_logger
from rlhflab.seeding import RowStreams, derive_seed, torch_generator
from rlhflab.sources import context_length, sft_data, stage1_tokenizer
from rlhflab.worlds.reviews import ReviewsWorld


@dataclass(frozen=True)
class PretrainResult:
    parameters: int
    train_loss: float
    val_loss: float
    grammatical_rate: float
    seconds: float


def lr_at(step: int, config: PretrainConfig) -> float:
    """Linear warm-up, then cosine decay to 10% of the peak."""
    if step < config.warmup_steps:
        return config.lr * (step + 1) / config.warmup_steps
    progress = (step - config.warmup_steps) / max(1, config.steps - config.warmup_steps)
    return config.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))


def decay_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """Weight decay on matrices only (biases, norms and embeddings are not decayed)."""
    decay, no_decay = [], []
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        embedding = "wte" in name or "wpe" in name or "embed" in name  # GPT-2 and Llama spellings
        (decay if param.ndim >= 2 and not embedding else no_decay).append(param)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


@torch.no_grad()
def grammatical_rate_of_samples(model, tokenizer, world: ReviewsWorld, n: int, max_len: int, seed: int,
                                cluster: Cluster = Cluster.single()) -> float:
    """Sample `n` reviews from `<bos>` and return the fraction of their sentences that parse
    (under several processes, each samples its share)."""
    model.eval()
    share = sample_share(sample_responses, model, tokenizer, [""] * n, max_len - 1, 1.0,
                         RowStreams(seed, ("pretrain", "grammar-samples"), list(range(n))), cluster)
    texts = decode_responses(tokenizer, share.samples.response_ids, share.samples.mask)
    return world.grammatical_rate(cluster.gather_lists(texts))


def run_pretrain(config: PipelineConfig, run: RunDir, show_progress: bool = True,
                 cluster: Cluster = Cluster.single(), components: PPOComponents = PPOComponents()) -> PretrainResult:
    """Train and save the stage-1 LM on the objective `components.lm_loss`. Under torchrun
    each process takes its share of every batch's rows through the engine of
    `distributed.strategy`; the first writes files."""
    cfg = config.pretrain
    start = time.perf_counter()
    tokenizer = stage1_tokenizer(config)
    init_dir = Path(config.data.model) if config.data.model else None
    context = context_length(init_dir, config)
    data = sft_data(config, tokenizer, context)
    world = data.world
    if world is not None and cluster.is_main:
        world.save(run.world)
        corpus_sample = [completion for _, completion in data.train[:200]]
        (run.world / "corpus_sample.txt").write_text("\n".join(corpus_sample) + "\n", encoding="utf-8")

    train_ids, train_mask, train_targets = encode_sft(tokenizer, data.train, context)
    val_ids, val_mask, val_targets = encode_sft(tokenizer, data.val, context)
    if init_dir is not None:
        model = load_causal_lm(init_dir)
    else:
        model = build_tiny_lm(tokenizer, cfg, derive_seed(config.seed, "lm-init"))
    device = cluster.device
    model.to(device)
    use_bf16(config.compute.bf16)
    checkpoint_blocks_if(config.compute.activation_checkpointing, model, device.type)
    engine = make_engine(config.distributed, cluster)
    trained = engine.trained(model)
    optimizer = torch.optim.AdamW(decay_groups(model, cfg.weight_decay), lr=cfg.lr, betas=(0.9, 0.95))
    batches = torch_generator(config.seed, "pretrain", "batches")
    logger = stage_logger(run, "pretrain", is_main=cluster.is_main)
    show_progress = show_progress and cluster.is_main
    train_loss = val_loss = grammatical = math.nan
    epoch: list[Tensor] = []  # the batches of the current pass over the corpus not yet used
    tokens_per_batch = float(train_targets[:, 1:].sum()) * cfg.batch_size / len(train_targets)
    with progress_bar("stage 1 pretrain", cfg.steps, show_progress) as bar:
        for step in range(cfg.steps):
            model.train()
            for group in optimizer.param_groups:
                group["lr"] = lr_at(step, cfg)
            if not epoch:
                epoch = length_grouped_batches(train_mask.sum(1), cfg.batch_size, batches)
            index = epoch.pop()
            width = int(train_mask[index].sum(1).max())  # the whole batch's, on every process
            index = cluster.shard(index)
            ids, mask, targets = (t[index, :width].to(device) for t in (train_ids, train_mask, train_targets))
            loss = components.lm_loss(trained, ids, mask, targets)
            # Batches of similar length hold different numbers of target tokens: weighting each batch's
            # mean by its fraction of the tokens keeps every token's weight what it is under random batches.
            tokens = targets[:, 1:].sum()
            weighted = loss * engine.loss_weight(tokens / tokens_per_batch)
            optimizer.zero_grad(set_to_none=True)
            weighted.backward()
            clip_grad_norm(model.parameters(), cfg.max_grad_norm)
            optimizer.step()
            summed = cluster.sum({"loss": loss.item() * float(tokens), "tokens": float(tokens)})
            train_loss = summed["loss"] / summed["tokens"]
            metrics = {"lm/train_loss": train_loss, "lr": lr_at(step, cfg)}
            if (step + 1) % cfg.eval_every == 0 or step == cfg.steps - 1:
                val_loss = _val_loss(trained, val_ids, val_mask, val_targets, components.lm_loss)
                metrics["lm/val_loss"] = val_loss
                if world is not None and tokenizer.bos_token_id is not None:
                    with engine.full_weights(model):
                        grammatical = grammatical_rate_of_samples(
                            model, tokenizer, world, cfg.eval_samples, min(cfg.n_positions, context),
                            derive_seed(config.seed, str(step)), cluster,
                        )
                    metrics["lm/grammatical_rate"] = grammatical
            logger.log(step, metrics)
            bar.advance(info=f"loss {train_loss:.3f}")
    logger.close()
    model.eval()
    weights = engine.full_state_dict(model)  # every process takes part in gathering them
    if cluster.is_main:
        with atomic_dir(run.stage1_lm) as out:
            save_pretrained(model, out, weights)
            tokenizer.save_pretrained(str(out))
    cluster.barrier()
    return PretrainResult(count_parameters(model), train_loss, val_loss, grammatical, time.perf_counter() - start)


def _trim(ids: Tensor, mask: Tensor, targets: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Drop padding columns that no row in the batch uses."""
    width = int(mask.sum(1).max())
    return ids[:, :width], mask[:, :width], targets[:, :width]


@torch.no_grad()
def _val_loss(model, ids: Tensor, mask: Tensor, targets: Tensor, lm_loss, batch_size: int = 256) -> float:
    model.eval()
    total, count = 0.0, 0
    for i in range(0, len(ids), batch_size):
        b_ids, b_mask, b_targets = (t.to(next(model.parameters()).device) for t in
                                    _trim(ids[i : i + batch_size], mask[i : i + batch_size], targets[i : i + batch_size]))
        n = int(b_targets[:, 1:].sum())
        total += float(lm_loss(model, b_ids, b_mask, b_targets)) * n
        count += n
    return total / count
