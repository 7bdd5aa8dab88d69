"""Full fine-tuning against LoRA: memory per process and time per PPO iteration.

    .venv/bin/python bench/lora_bench.py     # writes the `lora` section of docs/benchmarks.md

The 59.5M-parameter GPT-2 of bench/distributed_bench.py (12 layers x 640, random weights
from a config, the world's tokenizer, 32-token responses, batch 16, the demo's 2 epochs x
4 minibatches), each cell fresh processes of bench/distributed_side.py: one process (2
threads), and two under ddp and fsdp2 (1 thread each). LoRA: rank 16, alpha 32, on every
attention and MLP projection (c_attn, c_proj, c_fc); the reference is the policy with its
adapters off, so it holds no weights of its own.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from benchlib import held_mib, run_cell, save_results, sized_random_models

ROOT = Path(__file__).resolve().parents[1]
SECTION = ("<!-- lora:start -->", "<!-- lora:end -->")
SIZE = (12, 640, 10)
BATCH, ITERATIONS = 16, 2
LORA = ("lora.rank=16", "lora.alpha=32", "lora.target_modules=c_attn,c_proj,c_fc")
CELLS = {  # name: (processes, overrides)
    "full, single": (1, ()),
    "LoRA, single": (1, LORA),
    "full, ddp": (2, ("distributed.strategy=ddp",)),
    "LoRA, ddp": (2, ("distributed.strategy=ddp", *LORA)),
    "LoRA, fsdp2": (2, ("distributed.strategy=fsdp2", *LORA)),
}


def table(results: dict[str, dict]) -> str:
    lines = [SECTION[0], "## Full fine-tuning and LoRA: memory and time per PPO iteration", "",
             "Command: `python bench/lora_bench.py` (2-core CPU). " + __doc__.split("\n\n")[2].replace("\n", " "), "",
             "| cell | processes | s / iteration | policy params MiB | trainable MiB | grads MiB | Adam MiB | frozen MiB "
             "| peak RSS MiB |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, r in results.items():
        p = r["processes"][0]
        rss = " / ".join(f"{q['peak_rss_mib']:.0f}" for q in r["processes"])
        lines.append(f"| {name} | {r['world']} | {r['seconds_per_iteration']:.2f} | {p['params_mib']:.1f} | "
                     f"{p['trainable_mib']:.1f} | {p['grads_mib']:.1f} | {p['adam_mib']:.1f} | {p['frozen_mib']:.1f} "
                     f"| {rss} |")
    full, lora = results["full, single"]["processes"][0], results["LoRA, single"]["processes"][0]
    held = held_mib
    lines += ["", f"One process holds {held(full):.0f} MiB of model state fully fine-tuned and {held(lora):.0f} MiB "
              f"under LoRA ({held(lora) / held(full):.2f}x): no reference copy, and gradients and Adam moments for "
              "the adapters and value head only. Peak RSS columns list every process.", SECTION[1]]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--doc", type=Path, default=ROOT / "docs" / "benchmarks.md")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "lora.json")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        lm, rm, prompts = sized_random_models(Path(tmp), *SIZE)
        results = {}
        for name, (processes, overrides) in CELLS.items():
            results[name] = run_cell(processes, lm, rm, prompts, BATCH, ITERATIONS, overrides)
            print(name, json.dumps(results[name]), flush=True)
    save_results(results, args.out, args.doc, SECTION, table(results))


if __name__ == "__main__":
    main()
