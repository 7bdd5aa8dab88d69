"""Log fixtures written by TRL's real trainers on tiny models of the reviews world: what
`rlhflab doctor` must read from a TRL user (tests/test_trainer_logs.py).

    python bench/trl_fixtures.py grpo rloo        # the current TRL (pip install trl==1.16.0)
    .venv-trl/bin/python bench/trl_fixtures.py ppo  # TRL 1.12 (make bench-trl creates .venv-trl)

For each trainer, into tests/fixtures/logs/trl_<trainer>/: `trainer_state.json` (its
`log_history`), the TensorBoard events transformers' callback writes (`tensorboard/`), and
`console.txt`, the terminal as a user would capture it (progress bars and the printed
metrics dicts). 12 optimizer steps, one log row each, on a 1-layer GPT-2 with the world's
tokenizer (random weights: the format, not the learning, is the point) and, for GRPO and
RLOO, two reward functions (the world's gold utility and a length bonus) so that
`rewards/<function>/mean` appears; beta = 0.04 so that `kl` is logged. CPU, fp32, a
minute or so each.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "logs"
STEPS = 12


def tiny_models(out: Path) -> tuple[Path, list[str], object]:
    """A 1-layer GPT-2 on the world's tokenizer, saved; 96 world prompts; the world."""
    from rlhflab.config import PretrainConfig
    from rlhflab.models.lm import build_tiny_lm
    from rlhflab.worlds.reviews import ReviewsWorld, WorldConfig

    world = ReviewsWorld(WorldConfig())
    tokenizer = world.tokenizer()
    model = build_tiny_lm(tokenizer, PretrainConfig(n_layer=1, n_embd=32, n_head=2), seed=0)
    model.save_pretrained(out / "policy")
    tokenizer.save_pretrained(out / "policy")
    return out / "policy", world.prompts(96, 0), world


def reward_functions(world) -> list:
    def gold(prompts, completions, **kwargs):
        return [float(u) for u in world.gold(list(prompts), list(completions))]

    def length_bonus(prompts, completions, **kwargs):
        return [min(len(c.split()), 10) / 10 for c in completions]

    return [gold, length_bonus]


def run_group_trainer(kind: str, model_dir: Path, prompts: list[str], world, out: Path) -> None:
    import trl
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer

    config_class, trainer_class = {"grpo": (trl.GRPOConfig, trl.GRPOTrainer),
                                   "rloo": (trl.RLOOConfig, trl.RLOOTrainer)}[kind]
    tokenizer = AutoTokenizer.from_pretrained(model_dir, padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    config = config_class(
        output_dir=str(out), use_cpu=True, bf16=False, gradient_checkpointing=False, seed=0,
        max_steps=STEPS, logging_steps=1, save_strategy="no", report_to=["tensorboard"],
        per_device_train_batch_size=8, num_generations=4, max_completion_length=16, learning_rate=1e-4,
        beta=0.04, temperature=1.0,
    )
    trainer = trainer_class(model=model, reward_funcs=reward_functions(world), args=config,
                            train_dataset=Dataset.from_dict({"prompt": prompts}), processing_class=tokenizer)
    trainer.train()
    trainer.state.save_to_json(str(out / "trainer_state.json"))


def run_ppo(model_dir: Path, prompts: list[str], out: Path) -> None:
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer
    from trl.experimental.ppo import PPOConfig, PPOTrainer

    tokenizer = AutoTokenizer.from_pretrained(model_dir, padding_side="left")
    torch.manual_seed(0)
    reward = AutoModelForSequenceClassification.from_pretrained(model_dir, num_labels=1)
    value = AutoModelForSequenceClassification.from_pretrained(model_dir, num_labels=1)
    bos = [tokenizer.bos_token_id]
    dataset = Dataset.from_dict({"input_ids": [bos + tokenizer.encode(p, add_special_tokens=False) for p in prompts]})
    config = PPOConfig(
        output_dir=str(out), use_cpu=True, bf16=False, gradient_checkpointing=False, seed=0, report_to=["tensorboard"],
        save_strategy="no", logging_steps=1, num_sample_generations=0, per_device_train_batch_size=8,
        num_mini_batches=2, num_ppo_epochs=2, total_episodes=STEPS * 8, response_length=16, stop_token="eos",
        missing_eos_penalty=1.0, learning_rate=1e-4, kl_coef=0.05,
    )
    trainer = PPOTrainer(args=config, processing_class=tokenizer, model=AutoModelForCausalLM.from_pretrained(model_dir),
                         ref_model=AutoModelForCausalLM.from_pretrained(model_dir), reward_model=reward,
                         value_model=value, train_dataset=dataset)
    trainer.train()
    trainer.state.save_to_json(str(out / "trainer_state.json"))


def write_fixture(kind: str) -> Path:
    import transformers

    target = FIXTURES / f"trl_{kind}"
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        model_dir, prompts, world = tiny_models(work)
        out = work / "out"
        console = work / "console.txt"
        with console.open("w", encoding="utf-8") as capture, contextlib.redirect_stdout(capture), \
                contextlib.redirect_stderr(capture):
            if kind == "ppo":
                run_ppo(model_dir, prompts, out)
            else:
                run_group_trainer(kind, model_dir, prompts, world, out)
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)
        shutil.copy(out / "trainer_state.json", target / "trainer_state.json")
        shutil.copy(console, target / "console.txt")
        events = sorted(out.rglob("events.out.tfevents.*"))
        (target / "tensorboard").mkdir()
        for event in events:
            shutil.copy(event, target / "tensorboard" / event.name)
    import trl

    (target / "SOURCE.md").write_text(
        f"Written by `bench/trl_fixtures.py {kind}` with trl {trl.__version__}, transformers "
        f"{transformers.__version__}: {STEPS} optimizer steps on a tiny random GPT-2 with the reviews world's "
        "tokenizer (CPU, fp32).\n", encoding="utf-8")
    return target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trainers", nargs="+", choices=("grpo", "rloo", "ppo"))
    args = parser.parse_args()
    for kind in args.trainers:
        target = write_fixture(kind)
        rows = json.loads((target / "trainer_state.json").read_text())["log_history"]
        print(f"{target}: {len(rows)} log rows; keys: {sorted({k for r in rows for k in r})}", file=sys.stderr)


if __name__ == "__main__":
    main()
