"""What the benchmark scripts share: random models of a given size on the reviews world's
tokenizer, and replacing one marked section of docs/benchmarks.md."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path


def random_models(out: Path, config, seed: int = 0, activation: str | None = None) -> tuple[Path, Path, Path]:
    """A randomly initialised policy sized by `config.pretrain` and a 1-label reward model
    on its trunk, both with the world's tokenizer, and 512 world prompts as JSON.
    Random weights rarely emit EOS, so responses run to the length limit: equal work."""
    import torch  # here: benches of the doctor alone must not load it

    from rlhflab.models.lm import build_tiny_lm
    from rlhflab.models.reward_model import reward_model_from_lm
    from rlhflab.worlds.reviews import ReviewsWorld

    world = ReviewsWorld(config.world)
    tokenizer = world.tokenizer()
    lm_dir, rm_dir = out / "policy", out / "reward"
    lm = build_tiny_lm(tokenizer, config.pretrain, seed)
    if activation is not None:
        lm.config.activation_function = activation
    lm.save_pretrained(lm_dir)
    tokenizer.save_pretrained(lm_dir)
    torch.manual_seed(seed)
    reward_model_from_lm(lm_dir).save_pretrained(rm_dir)
    tokenizer.save_pretrained(rm_dir)
    prompts = out / "prompts.json"
    prompts.write_text(json.dumps(world.prompts(512, seed)))
    return lm_dir, rm_dir, prompts


def replace_section(doc: Path, start: str, end: str, section: str) -> None:
    """Put `section` (which begins with `start` and ends with `end`) in place of the text
    between those markers in `doc`, or append it when the markers are not there yet."""
    text = doc.read_text(encoding="utf-8") if doc.is_file() else "# Benchmarks\n"
    section = section.rstrip("\n")
    if start in text:
        before, rest = text.split(start, 1)
        text = before + section + rest.split(end, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    doc.write_text(text, encoding="utf-8")


def median_and_min(times: dict[str, list[float]], unit: str) -> dict[str, dict[str, float]]:
    """Per variant, the median and the min of its timed rounds, keys suffixed by `unit`."""
    return {name: {f"median_{unit}": statistics.median(t), f"min_{unit}": min(t)} for name, t in times.items()}


def sized_random_models(out: Path, layers: int, embd: int, heads: int) -> tuple[Path, Path, Path]:
    """`random_models` of the demo config with `layers` blocks of width `embd` and `heads` heads."""
    from rlhflab.config import load_config

    config = load_config("demo", overrides=[f"pretrain.n_layer={layers}", f"pretrain.n_embd={embd}",
                                            f"pretrain.n_head={heads}"])
    return random_models(out, config)


def run_cell(processes: int, lm: Path, rm: Path, prompts: Path, batch: int, iterations: int,
             overrides: tuple[str, ...]) -> dict:
    """One bench cell: bench/distributed_side.py in `processes` fresh processes (torchrun
    for more than one, 2 // processes threads each) on these models; its JSON result."""
    side = [str(Path(__file__).with_name("distributed_side.py")), "--model", str(lm), "--reward", str(rm), "--prompts",
            str(prompts), "--batch-size", str(batch), "--iterations", str(iterations),
            "--threads", str(2 // processes), *overrides]
    launcher = ([sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={processes}"]
                if processes > 1 else [sys.executable])
    done = subprocess.run([*launcher, *side], capture_output=True, text=True, check=True,
                          env=os.environ | {"OMP_NUM_THREADS": str(2 // processes)})
    return json.loads(done.stdout.strip().splitlines()[-1])


def held_mib(process: dict) -> float:
    """MiB of model state one process of `run_cell` holds: parameters, gradients, Adam's
    moments and the frozen models."""
    return sum(process[k] for k in ("params_mib", "grads_mib", "adam_mib", "frozen_mib"))


def save_results(results: dict, out: Path, doc: Path, section: tuple[str, str], text: str) -> None:
    """A bench's raw results as JSON in `out`, and its rendered `text` in `doc`'s `section`."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    replace_section(doc, *section, text)


def wilson(k: int, n: int) -> tuple[float, float]:
    """Wilson's score interval for a binomial proportion, 95% (Wilson 1927)."""
    from rlhflab.studies.pairwise import wilson_interval

    return wilson_interval(k, n)
