"""One cell of bench/distributed_bench.py: PPO iterations under one strategy, in the
processes torchrun started (or one process), on random models from bench/benchlib.py.

    torchrun --nproc_per_node=2 bench/distributed_side.py --model DIR --reward DIR --prompts prompts.json \
        --batch-size 16 --iterations 2 distributed.strategy=fsdp2

The first process prints one JSON object: seconds per iteration (the mean after one
warm-up), and for every process its peak resident memory (ru_maxrss) after building the
PPO state and at the end, and the bytes of trained state it holds: its parameters,
gradients and Adam moments (under FSDP2 its shards only; under LoRA the trainable ones are
the adapters and the value head), plus the frozen reference and reward model's parameters
it holds (under LoRA the reference has none of its own).
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from pathlib import Path

import torch


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def local_bytes(tensors) -> int:
    """Bytes this process holds of `tensors` (a DTensor's local shard only)."""
    total = 0
    for t in tensors:
        local = t.to_local() if hasattr(t, "to_local") else t
        total += local.numel() * local.element_size()
    return total


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--reward", required=True)
    parser.add_argument("--prompts", required=True)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--iterations", type=int, default=2)
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()

    from rlhflab.config import load_config, with_strategy
    from rlhflab.distributed import Cluster
    from rlhflab.models.lm import count_parameters, load_tokenizer
    from rlhflab.ppo.components import PPOComponents
    from rlhflab.ppo.state import build_ppo_state
    from rlhflab.ppo.trainer import ppo_iteration

    if args.threads:
        torch.set_num_threads(args.threads)
    cluster = Cluster.from_environment()
    config = with_strategy(load_config("demo", overrides=[f"ppo.batch_size={args.batch_size}", *args.overrides]),
                           cluster.world_size)
    prompts = json.loads(Path(args.prompts).read_text())[: args.batch_size]
    state = build_ppo_state(config, args.model, args.reward, load_tokenizer(args.model), PPOComponents(),
                            cluster.device, cluster)
    parameters = count_parameters(state.policy.lm)
    after_setup = peak_rss_mib()
    seconds, tokens = [], []
    for step in range(args.iterations + 1):
        cluster.barrier()
        start = time.perf_counter()
        _, metrics = ppo_iteration(state, prompts, config.seed, step)
        seconds.append(time.perf_counter() - start)
        tokens.append(metrics["tokens/generated"])
    trained = list(state.policy.parameters())
    held = {
        "params_mib": local_bytes(trained) / 2**20,
        "trainable_mib": local_bytes(p for p in trained if p.requires_grad) / 2**20,
        "grads_mib": local_bytes(p.grad for p in trained if p.grad is not None) / 2**20,
        "adam_mib": local_bytes(v for slots in state.optimizer.state.values() for v in slots.values()
                                if torch.is_tensor(v) and v.dim() > 0) / 2**20,
        "frozen_mib": local_bytes(list(state.reference.parameters()) + list(state.reward.model.parameters())) / 2**20,
        "peak_rss_after_setup_mib": after_setup,
        "peak_rss_mib": peak_rss_mib(),
    }
    per_process = cluster.gather_lists([held])
    if cluster.is_main:
        timed = seconds[1:]
        print(json.dumps({
            "strategy": config.distributed.strategy, "world": cluster.world_size, "parameters": parameters,
            "shard_frozen": config.distributed.shard_frozen, "batch_size": args.batch_size,
            "seconds_per_iteration": sum(timed) / len(timed), "warmup_s": seconds[0],
            "tokens_generated": sum(tokens[1:]) / len(timed), "threads": torch.get_num_threads(),
            "processes": per_process,
        }))
    cluster.barrier()


if __name__ == "__main__":
    main()
