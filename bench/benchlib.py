"""What the benchmark scripts share: random models of a given size on the reviews world's
tokenizer, and replacing one marked section of docs/benchmarks.md."""

from __future__ import annotations

import json
import statistics
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
