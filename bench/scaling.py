"""How a PPO iteration's cost grows with model size and batch size, and where its time goes.

    .venv/bin/python bench/scaling.py            # writes the `scaling` section of docs/benchmarks.md

For 3 GPT-2 sizes (about 0.2M, 1M and 4M parameters, the world's tokenizer, random
weights, so responses run to the 32-token limit: equal work) and 3 rollout batch sizes,
each in a fresh process (bench/rlhflab_side.py, peak RSS per process): seconds per PPO
iteration (4 epochs x 4 minibatches), microseconds per response token, and nanoseconds
per parameter-token. Then a torch.profiler summary of one demo-sized iteration.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

from benchlib import random_models, replace_section

ROOT = Path(__file__).resolve().parents[1]
SECTION = ("<!-- scaling:start -->", "<!-- scaling:end -->")
SIZES = {"0.2M": (3, 64, 4), "1M": (4, 128, 4), "4M": (6, 224, 4)}  # n_layer, n_embd, n_head
BATCHES = (16, 64, 256)


def make_models(out: Path, n_layer: int, n_embd: int, n_head: int) -> tuple[Path, Path, Path]:
    from rlhflab.config import load_config

    return random_models(out, load_config("demo", overrides=[f"pretrain.n_layer={n_layer}",
                                                             f"pretrain.n_embd={n_embd}", f"pretrain.n_head={n_head}"]))


def measure(lm: Path, rm: Path, prompts: Path, batch: int, iterations: int = 2) -> dict:
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "rlhflab_side.py"), "--model", str(lm), "--reward",
                           str(rm), "--prompts", str(prompts), "--iterations", str(iterations), "--batch-size",
                           str(batch)], capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def profile_demo(lm: Path, rm: Path, prompts: Path) -> str:
    """torch.profiler's table of one demo-sized iteration, grouped by phase and by operator."""
    from torch.profiler import ProfilerActivity, profile

    from rlhflab.config import load_config
    from rlhflab.models.lm import load_tokenizer
    from rlhflab.ppo.components import PPOComponents
    from rlhflab.ppo.state import build_ppo_state
    from rlhflab.ppo.trainer import ppo_iteration

    config = load_config("demo")
    state = build_ppo_state(config, lm, rm, load_tokenizer(lm), PPOComponents())
    batch = json.loads(prompts.read_text())[:64]
    for _ in range(2):
        ppo_iteration(state, batch, 0, _)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        _, metrics = ppo_iteration(state, batch, 0, 2)
    phases = {k.removeprefix("time/").removesuffix("_s"): v for k, v in metrics.items() if k.startswith("time/")}
    table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12, max_name_column_width=50)
    return json.dumps(phases), table


def main() -> None:
    rows = []
    with tempfile.TemporaryDirectory(prefix="scaling-") as tmp:
        for name, (n_layer, n_embd, n_head) in SIZES.items():
            lm, rm, prompts = make_models(Path(tmp) / name, n_layer, n_embd, n_head)
            for batch in BATCHES:
                r = measure(lm, rm, prompts, batch)
                tokens = r["generated_tokens_per_s_of_iteration"] * r["seconds_per_iteration"]
                rows.append((name, r["parameters"], batch, r["seconds_per_iteration"], r["peak_rss_mib"],
                             1e6 * r["seconds_per_iteration"] / tokens,
                             1e9 * r["seconds_per_iteration"] / tokens / r["parameters"],
                             r["train_fraction_of_matmul_peak"]))
                print(rows[-1], flush=True)
            if name == "1M":
                phases, table = profile_demo(lm, rm, prompts)
    lines = [
        SECTION[0],
        "## Scaling and profile (issue: performance)",
        "",
        "Command: `python bench/scaling.py` (2-core CPU). Random GPT-2 weights, 32-token responses, 4 epochs x 4 "
        "minibatches; each cell a fresh process, the mean of 2 iterations after a warm-up.",
        "",
        "| model | parameters | rollouts | s / iteration | peak RSS MiB | us / response token | ns / (parameter x token) "
        "| training / matmul peak |",
        "|---|---|---|---|---|---|---|---|",
        *[f"| {n} | {p:,} | {b} | {s:.2f} | {m:.0f} | {us:.0f} | {ns:.2f} | {f:.0%} |"
          for n, p, b, s, m, us, ns, f in rows],
        "",
        f"One demo-sized iteration (1M parameters, 64 rollouts), seconds per phase: `{phases}`; the operators that "
        "take the time (torch.profiler, self CPU time):",
        "",
        "```",
        table.rstrip(),
        "```",
        SECTION[1],
    ]
    doc = ROOT / "docs" / "benchmarks.md"
    replace_section(doc, *SECTION, "\n".join(lines))
    print(f"wrote {doc}")


if __name__ == "__main__":
    main()
