"""Each performance lever of rlhflab's PPO iteration, measured by turning it off alone:

- the sampler's GPT-2 decoder (`rlhflab.models.decoding.GPT2Decoder`) against the
  model's own HF forward and cache (`HFCacheDecoder`);
- the sampler's two-level exponential-race draw (`rlhflab.models.sampling.draw_tokens`)
  against `torch.multinomial`;
- fused Adam against the per-parameter loop;
- the tiny GPT-2's fused GELU (`gelu_pytorch_tanh`) against GPT-2's `gelu_new`;
- torch threads: 2 (one per core, the default) against 1.

    .venv/bin/python bench/ppo_levers.py     # writes the `levers` table of docs/benchmarks.md

Each variant runs in a fresh process, the variants in turn (each round starting at a
different one), `--repeats` rounds: 1 warm-up and 4 timed iterations (median) at 64
rollouts, 32 tokens, 4 epochs x 4 minibatches, random demo-sized weights. Reported: the
median over rounds, and the min-max.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchlib import random_models, replace_section

ROOT = Path(__file__).resolve().parents[1]
SECTION = ("<!-- levers-table:start -->", "<!-- levers-table:end -->")
# name -> (GPT-2 decoder, two-level draw, fused Adam, GELU, threads)
VARIANTS = {
    "all levers (the defaults)": (True, True, True, "gelu_pytorch_tanh", 2),
    "HF forward in the sampler": (False, True, True, "gelu_pytorch_tanh", 2),
    "torch.multinomial draw": (True, False, True, "gelu_pytorch_tanh", 2),
    "per-parameter Adam loop": (True, True, False, "gelu_pytorch_tanh", 2),
    "GPT-2's gelu_new": (True, True, True, "gelu_new", 2),
    "1 thread": (True, True, True, "gelu_pytorch_tanh", 1),
}


def one(root: Path, name: str) -> dict:
    import torch
    from transformers.utils import logging

    import rlhflab.models.sampling as sampling
    from rlhflab.config import load_config
    from rlhflab.models.decoding import HFCacheDecoder
    from rlhflab.ppo.components import PPOComponents
    from rlhflab.ppo.state import build_ppo_state
    from rlhflab.ppo.trainer import ppo_iteration
    from rlhflab.worlds.reviews import ReviewsWorld

    fast_decoder, two_level_draw, fused, activation, threads = VARIANTS[name]
    logging.set_verbosity_error()
    torch.set_num_threads(threads)
    if not fast_decoder:
        sampling.decoder_for = lambda model, batch, max_len: HFCacheDecoder(model)
    if not two_level_draw:
        sampling.draw_tokens = sampling.exponential_race  # one race over the whole vocabulary
    config = load_config("demo")
    world = ReviewsWorld(config.world)
    lm, rm, _ = random_models(root, config, 0, activation)
    state = build_ppo_state(config, lm, rm, world.tokenizer(), PPOComponents())
    if not fused:
        state.optimizer = torch.optim.Adam(state.policy.parameters(), lr=config.ppo.lr, eps=1e-5, fused=False)
    assert isinstance(state.optimizer, torch.optim.Adam) and bool(state.optimizer.defaults["fused"]) == fused
    prompts = world.prompts(64, 0)
    seconds, rollout, train = [], [], []
    for step in range(5):
        start = time.perf_counter()
        _, metrics = ppo_iteration(state, prompts, 0, step)
        seconds.append(time.perf_counter() - start)
        rollout.append(metrics["time/rollout_s"])
        train.append(metrics["time/train_s"])
    return {"iteration": statistics.median(seconds[1:]), "rollout": statistics.median(rollout[1:]),
            "train": statistics.median(train[1:])}


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} ({min(values):.3f}-{max(values):.3f})"


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[2] in VARIANTS:  # a worker: root variant
        print(json.dumps(one(Path(sys.argv[1]), sys.argv[2])))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--doc", type=Path, default=ROOT / "docs" / "benchmarks.md")
    args = parser.parse_args()
    results: dict[str, list[dict]] = {name: [] for name in VARIANTS}
    names = list(VARIANTS)
    for round_index in range(args.repeats):
        # Each round starts at a different variant, so no variant always runs first.
        shift = round_index * len(names) // args.repeats
        for name in names[shift:] + names[:shift]:
            with tempfile.TemporaryDirectory() as tmp:
                done = subprocess.run([sys.executable, __file__, tmp, name], capture_output=True, text=True,
                                      check=True)
            results[name].append(json.loads(done.stdout.strip().splitlines()[-1]))
    base = statistics.median(r["iteration"] for r in results["all levers (the defaults)"])
    lines = [SECTION[0], f"Command: `python bench/ppo_levers.py --repeats {args.repeats}`; median (min-max) over "
             f"{args.repeats} rounds, each variant a fresh process, each round starting at a different variant.", "",
             "| variant | s / iteration | rollout s | train s | iteration vs the defaults |", "|---|---|---|---|---|"]
    for name, rows in results.items():
        median = statistics.median(r["iteration"] for r in rows)
        lines.append(f"| {name} | {spread([r['iteration'] for r in rows])} | {spread([r['rollout'] for r in rows])} "
                     f"| {spread([r['train'] for r in rows])} | {median / base - 1:+.0%} |")
    lines.append(SECTION[1])
    replace_section(args.doc, *SECTION, "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
