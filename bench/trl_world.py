"""One TRL run of the reviews world, launched as a TRL user launches one: the trainer's own
config flags, parsed by TRL's HfArgumentParser, so an ablation plan written for TRL
(`rlhflab doctor LOG --plan --command ...`) runs here unchanged.

    python bench/trl_world.py grpo --base RUN --output_dir OUT [--steps 60] [GRPOConfig flags ...]
    .venv-trl/bin/python bench/trl_world.py ppo --base RUN --output_dir OUT [--steps 60] [PPOConfig flags ...]

The flags start from bench/calibration.py's healthy run of that trainer (its models, prompts,
batch and lengths); any GRPOConfig or PPOConfig flag given replaces its value, and a flag the
config lacks is an error, as in TRL's own scripts. Writes OUT/trainer_state.json (the gold,
held-out diversity and length in its rows, as the calibration runs have them) and OUT/label.json.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

from calibration import (
    VARIANTS,
    completion_length,
    config_class,
    config_settings,
    make_gold_callback,
    train_and_label,
    trainer_from_config,
)

HEALTHY = {"grpo": "grpo-healthy-s0", "ppo": "ppo-healthy-s0"}


def as_flags(settings: dict) -> list[str]:
    """Config fields as TRL command-line flags (`report_to=[]` is `--report_to none`)."""
    flags = []
    for key, value in settings.items():
        if isinstance(value, list):
            flags += [f"--{key}", *(map(str, value) if value else ["none"])]
        else:
            flags += [f"--{key}", str(value)]
    return flags


def parse_config(trainer: str, steps: int, flags: list[str]):
    """The trainer's config: the healthy calibration run's settings, then `flags` over them
    (argparse keeps a flag's last value)."""
    from transformers import HfArgumentParser

    defaults = as_flags(config_settings(VARIANTS[HEALTHY[trainer]], steps))
    (config,) = HfArgumentParser(config_class(trainer)).parse_args_into_dataclasses(args=defaults + flags)
    return config


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trainer", choices=sorted(HEALTHY))
    parser.add_argument("--base", type=Path, required=True, help="an rlhflab run with stage1_lm and stage2_rm")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--eval-every", type=int, default=5)
    args, flags = parser.parse_known_args(argv)
    config = parse_config(args.trainer, args.steps, flags)
    from transformers import AutoTokenizer
    from transformers.utils import logging

    from rlhflab.worlds.reviews import ReviewsWorld, WorldConfig

    logging.set_verbosity_error()
    run_dir = Path(config.output_dir)
    if run_dir.exists():  # as TRL's PPO script does: a run starts from nothing
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True)
    tokenizer = AutoTokenizer.from_pretrained(args.base / "stage1_lm", padding_side="left")
    callback = make_gold_callback(ReviewsWorld(WorldConfig()), tokenizer, completion_length(args.trainer, config),
                                  args.eval_every, config.seed)
    trainer = trainer_from_config(args.trainer, config, args.base, callback)
    label = train_and_label(run_dir.name, "", trainer, callback, run_dir)
    print(json.dumps({"output_dir": str(run_dir), **label}), flush=True)


if __name__ == "__main__":
    sys.exit(main())
