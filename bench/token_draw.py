"""One token draw for 64 rows: rlhflab's two-level exponential race (`draw_tokens`)
against `torch.multinomial`, at the demo's vocabulary and at GPT-2's.

    .venv/bin/python bench/token_draw.py

`--rounds` interleaved rounds of 50 draws each; prints the median and min of
microseconds per draw as JSON.
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from benchlib import median_and_min


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    from rlhflab.models.sampling import draw_tokens

    generator = torch.Generator().manual_seed(0)
    draws = {"two_level_race": lambda p: draw_tokens(p, generator),
             "torch_multinomial": lambda p: torch.multinomial(p, 1, generator=generator)}
    result = {}
    for vocab in (607, 50257):
        probs = torch.softmax(torch.randn(64, vocab, generator=torch.Generator().manual_seed(1)), -1)
        times: dict[str, list[float]] = {name: [] for name in draws}
        for _ in range(args.rounds):
            for name, draw in draws.items():
                draw(probs)
                start = time.perf_counter()
                for _ in range(50):
                    draw(probs)
                times[name].append((time.perf_counter() - start) / 50 * 1e6)
        result[f"vocab_{vocab}"] = median_and_min(times, "us")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
