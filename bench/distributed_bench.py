"""Memory per process and time per PPO iteration under each strategy, at world size 1 and 2.

    .venv/bin/python bench/distributed_bench.py     # writes the `distributed` section of docs/benchmarks.md

Two sizes of random GPT-2 built from a config (bench/benchlib.py: the world's tokenizer,
responses run to the 32-token limit, so equal work): the demo's (3 layers x 128) and one
of at least 50M parameters (12 layers x 640). Each cell is fresh processes running
bench/distributed_side.py: one process (single, 2 threads) or `torchrun
--nproc_per_node=2` (ddp, fsdp2, fsdp2 with the frozen models sharded; 1 thread each), the
demo's PPO settings (2 epochs x 4 minibatches) at the batch given, the mean of the
iterations after a warm-up. On this 2-core CPU two processes share the two cores that one
process uses alone, so the times say what the engines cost, not what a second GPU gains.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from benchlib import held_mib, run_cell, save_results, sized_random_models

ROOT = Path(__file__).resolve().parents[1]
SECTION = ("<!-- distributed:start -->", "<!-- distributed:end -->")
SIZES = {"demo (3 x 128)": (3, 128, 4, 64, 3), "12 x 640": (12, 640, 10, 16, 2)}  # layers, embd, heads, batch, iters
CELLS = {  # name: (processes, overrides)
    "single": (1, ()),
    "ddp": (2, ("distributed.strategy=ddp",)),
    "fsdp2": (2, ("distributed.strategy=fsdp2",)),
    "fsdp2, frozen sharded": (2, ("distributed.strategy=fsdp2", "distributed.shard_frozen=true")),
}


def table(results: dict[str, dict[str, dict]]) -> str:
    lines = [SECTION[0], "## Strategies: memory per process and time per PPO iteration", "",
             "Command: `python bench/distributed_bench.py` (2-core CPU; gloo). Random GPT-2 built from a config, "
             "32-token responses, 2 epochs x 4 minibatches; one process with 2 threads, or two processes with 1 "
             "thread each sharing the same 2 cores. Held: what each process keeps of the policy's parameters, "
             "gradients and Adam moments (its shards under FSDP2), and of the frozen reference and reward model. "
             "Peak RSS: the process's resident memory at its highest (torch and Python included), after building "
             "the PPO state and at the end of the run.", "",
             "| model | strategy | processes | s / iteration | params MiB | grads MiB | Adam MiB | frozen MiB "
             "| peak RSS after setup MiB | peak RSS MiB |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for size, cells in results.items():
        for name, r in cells.items():
            p = r["processes"][0]
            others = r["processes"][1:]
            rss = " / ".join(f"{q['peak_rss_mib']:.0f}" for q in r["processes"])
            setup = " / ".join(f"{q['peak_rss_after_setup_mib']:.0f}" for q in r["processes"])
            assert all(abs(q["params_mib"] - p["params_mib"]) < 1 for q in others)  # shares are even
            lines.append(f"| {size}, {r['parameters'] / 1e6:.1f}M, batch {r['batch_size']} | {name} | {r['world']} "
                         f"| {r['seconds_per_iteration']:.2f} | {p['params_mib']:.1f} | {p['grads_mib']:.1f} "
                         f"| {p['adam_mib']:.1f} | {p['frozen_mib']:.1f} | {setup} | {rss} |")
    big = results[list(results)[-1]]
    held = {name: held_mib(r["processes"][0]) for name, r in big.items()}
    seconds = {name: r["seconds_per_iteration"] for name, r in big.items()}
    lines += ["", "Peak RSS columns list every process (first / second).", "",
              f"At {list(results)[-1]}: what a process holds of the models falls from {held['ddp']:.0f} MiB under ddp "
              f"to {held['fsdp2']:.0f} MiB under fsdp2 and {held['fsdp2, frozen sharded']:.0f} MiB with the frozen "
              "models sharded too; the peak RSS does not fall with it on a CPU. FSDP2 allocates a block's full "
              "parameters at every forward and backward (and the whole policy for a rollout) and frees them "
              "after; glibc's allocator keeps freed memory mapped, so the resident high-water mark carries those "
              "buffers, and loading a model whole before sharding it raises the setup peak of the frozen-sharded "
              "cell. On a GPU the caching allocator's `torch.cuda.max_memory_allocated` is the measure. "
              "Time: two processes of one thread each share the cores one process of two "
              f"threads uses, and gloo moves every gradient (ddp: {seconds['ddp'] / seconds['single']:.2f}x the "
              f"single process's time) or every block's parameters and gradients (fsdp2: "
              f"{seconds['fsdp2'] / seconds['single']:.2f}x) through memory on the same cores: these are the "
              "engines' costs, not a speed-up a second device would give.", SECTION[1]]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--doc", type=Path, default=ROOT / "docs" / "benchmarks.md")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "distributed.json")
    args = parser.parse_args()
    results: dict[str, dict[str, dict]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for size, (layers, embd, heads, batch, iterations) in SIZES.items():
            lm, rm, prompts = sized_random_models(Path(tmp) / str(layers), layers, embd, heads)
            results[size] = {}
            for name, (processes, overrides) in CELLS.items():
                results[size][name] = run_cell(processes, lm, rm, prompts, batch, iterations, overrides)
                print(size, name, json.dumps(results[size][name]), flush=True)
    save_results(results, args.out, args.doc, SECTION, table(results))


if __name__ == "__main__":
    main()
