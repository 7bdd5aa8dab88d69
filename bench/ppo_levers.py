"""Measured levers on a demo-sized PPO iteration that are not (yet) rlhflab's defaults,
each changing the numbers a run produces (so adopting one means re-measuring the
pipeline and faults benchmarks):

- the GELU of the tiny GPT-2: `gelu_new` (GPT-2's, written out in elementwise ops, the
  default) or `gelu_pytorch_tanh` (the same tanh approximation as one fused kernel);
- Adam's implementation: the default (foreach) or `fused=True`;
- torch threads: 2 (one per core, the default) or 1.

    .venv/bin/python bench/ppo_levers.py

Each variant runs in a fresh process: 1 warm-up and 4 timed iterations at 64 rollouts,
32 tokens, 4 epochs x 4 minibatches, random weights; it prints a markdown table.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchlib import random_models

VARIANTS = [("gelu_new", False, 2), ("gelu_pytorch_tanh", False, 2), ("gelu_new", True, 2),
            ("gelu_pytorch_tanh", True, 2), ("gelu_new", False, 1)]


def one(root: Path, activation: str, fused: bool, threads: int) -> dict:
    import torch
    from transformers.utils import logging

    from rlhflab.config import load_config
    from rlhflab.ppo.components import PPOComponents
    from rlhflab.ppo.trainer import build_ppo_state, ppo_iteration
    from rlhflab.seeding import torch_generator
    from rlhflab.worlds.reviews import ReviewsWorld

    logging.set_verbosity_error()
    torch.set_num_threads(threads)
    config = load_config("demo")
    world = ReviewsWorld(config.world)
    lm, rm, _ = random_models(root, config, 0, activation)
    state = build_ppo_state(config, lm, rm, world.tokenizer(), PPOComponents())
    if fused:
        state.optimizer = torch.optim.Adam(state.policy.parameters(), lr=config.ppo.lr, eps=1e-5, fused=True)
    generator, prompts = torch_generator(0, "levers"), world.prompts(64, 0)
    seconds, train = [], []
    for _ in range(5):
        start = time.perf_counter()
        _, metrics = ppo_iteration(state, prompts, generator)
        seconds.append(time.perf_counter() - start)
        train.append(metrics["time/train_s"])
    return {"iteration": statistics.median(seconds[1:]), "train": statistics.median(train[1:])}


def main() -> None:
    if len(sys.argv) == 5:  # a worker: root activation fused threads
        print(json.dumps(one(Path(sys.argv[1]), sys.argv[2], sys.argv[3] == "1", int(sys.argv[4]))))
        return
    rows = []
    for activation, fused, threads in VARIANTS:
        with tempfile.TemporaryDirectory() as tmp:
            done = subprocess.run([sys.executable, __file__, tmp, activation, str(int(fused)), str(threads)],
                                  capture_output=True, text=True, check=True)
        rows.append((activation, fused, threads, json.loads(done.stdout.strip().splitlines()[-1])))
    base = rows[0][3]["iteration"]
    print("| GELU | fused Adam | threads | s / iteration | train s | vs default |")
    print("|---|---|---|---|---|---|")
    for activation, fused, threads, r in rows:
        print(f"| {activation} | {'yes' if fused else 'no'} | {threads} | {r['iteration']:.3f} | {r['train']:.3f} "
              f"| {r['iteration'] / base - 1:+.0%} |")


if __name__ == "__main__":
    main()
