"""Where a decoding step of the demo-sized GPT-2 at 64 rows spends its time: its matmuls
and attention as run, against the same matmuls with the caches warm and evicted.

    .venv/bin/python bench/decode_breakdown.py

A step reads every weight of the trunk and the head once, and every cached key and value
of every row: several MiB at the demo's sizes, against 1 MiB of L2 per core here. Each
of the step's matmul shapes is timed `--rounds` x 100 times on the same operands ("warm":
they stay in cache) and with a 64 MiB buffer written before each call ("evicted": weights
and inputs come from memory). Then `GPT2Decoder` runs 31 steps per round: timed plainly
for the total, and under torch.profiler for the self time of its matmuls and attention;
the rest of a step is its other operators (norms, GELU, copies, adds) and the per-call
work of every operator. Prints the working set and median microseconds (per matmul
shape) and milliseconds (per step) as JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

ROWS = 64
EVICTION_BYTES = 64 * 2**20


def step_bytes(lm, rows: int, cached: float) -> dict[str, float]:
    """MiB one fp32 step of a GPT-2 `lm` reads: every weight of its blocks, of the final
    norm and of the head (the token embedding, tied), and `cached` keys and values per
    row and layer. The embeddings' lookups read one row each and are left out."""
    trunk = lm.transformer
    weights = [p for module in (trunk.h, trunk.ln_f, lm.lm_head) for p in module.parameters()]
    cache = len(trunk.h) * 2 * rows * cached * lm.config.n_embd
    return {"weights_mib": sum(p.numel() for p in weights) * 4 / 2**20, "kv_cache_read_mib": cache * 4 / 2**20}


def time_matmul(rows: int, inner: int, outer: int, rounds: int, evict: bool) -> float:
    """Median microseconds of torch.addmm(bias, (rows, inner), (inner, outer)). (GPT-2's head
    has no bias; it is timed with one like the other layers: a 64 x 607 copy more.)"""
    x, weight, bias = torch.randn(rows, inner), torch.randn(inner, outer), torch.randn(outer)
    buffer = torch.empty(EVICTION_BYTES // 4)
    times = []
    for _ in range(rounds):
        total = 0.0
        for _ in range(100):
            if evict:
                buffer.fill_(1.0)
            start = time.perf_counter()
            torch.addmm(bias, x, weight)
            total += time.perf_counter() - start
        times.append(total / 100 * 1e6)
    return statistics.median(times)


def step_as_run(lm, tokenizer, prompts: list[str], steps: int, rounds: int) -> dict[str, float]:
    """Median milliseconds per step of `GPT2Decoder` at 64 rows, in total (timed plainly)
    and in its matmuls and attention (torch.profiler's self CPU time of those operators)."""
    from torch.profiler import ProfilerActivity, profile

    from rlhflab.data.batching import encode_prompts
    from rlhflab.models.decoding import GPT2Decoder

    ids, mask = encode_prompts(tokenizer, prompts)
    groups = {"matmuls": ("aten::addmm", "aten::addmm_", "aten::mm"),
              "attention": ("aten::_scaled_dot_product_flash_attention_for_cpu",)}

    def decode(decoder: GPT2Decoder) -> None:
        for _ in range(steps):
            decoder.step(ids[:, -1])

    totals, parts = [], {name: [] for name in groups}
    with torch.inference_mode():
        for _ in range(rounds):
            decoder = GPT2Decoder(lm, ROWS, ids.shape[1] + steps + 1)
            decoder.prefill(ids, mask)
            start = time.perf_counter()
            decode(decoder)
            totals.append((time.perf_counter() - start) / steps * 1e3)
            decoder = GPT2Decoder(lm, ROWS, ids.shape[1] + steps + 1)
            decoder.prefill(ids, mask)
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                decode(decoder)
            self_us = {e.key: e.self_cpu_time_total for e in prof.key_averages()}
            for name, ops in groups.items():
                parts[name].append(sum(self_us.get(op, 0.0) for op in ops) / steps / 1e3)
    return {"total": statistics.median(totals), **{name: statistics.median(v) for name, v in parts.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    from rlhflab.config import load_config
    from rlhflab.data.batching import encode_prompts
    from rlhflab.models.lm import build_tiny_lm
    from rlhflab.worlds.reviews import ReviewsWorld

    config = load_config("demo")
    model, world = config.pretrain, ReviewsWorld(config.world)
    tokenizer = world.tokenizer()
    lm = build_tiny_lm(tokenizer, model, 0).eval()
    prompts = world.prompts(ROWS, 0)
    E, vocab = model.n_embd, lm.config.vocab_size
    prompt = encode_prompts(tokenizer, prompts)[0].shape[1]
    response = config.ppo.response_length
    shapes = {"qkv": (E, 3 * E), "attention_out": (E, E), "mlp_in": (E, 4 * E), "mlp_out": (4 * E, E),
              "head": (E, vocab)}
    per_step = {name: model.n_layer for name in shapes} | {"head": 1}  # calls per step
    # Keys and values cached per row, on average over the response's steps.
    result = {"rows": ROWS, "mean_cached_positions": prompt + response / 2,
              **step_bytes(lm, ROWS, prompt + response / 2)}
    for state in ("warm", "evicted"):
        us = {name: time_matmul(ROWS, *shape, args.rounds, state == "evicted") for name, shape in shapes.items()}
        result[f"matmul_us_{state}"] = us
        result[f"matmuls_per_step_ms_{state}"] = sum(us[name] * n for name, n in per_step.items()) / 1e3
    result["decoder_step_ms_as_run"] = step_as_run(lm, tokenizer, prompts, response - 1, args.rounds)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
