"""A labelled calibration set for the doctor's rules: the reviews world trained by TRL's
GRPOTrainer and RLOOTrainer (the current TRL) and PPOTrainer (TRL 1.12, in .venv-trl),
healthy and pathological, with the world's gold logged beside the proxy. Each run is
labelled from its gold curve and its held-out samples, never from the doctor.

    python bench/calibration.py --base RUN --out runs/calibration [--steps 200] [--only NAME ...]
    .venv-trl/bin/python bench/calibration.py --base RUN --out runs/calibration --only ppo-healthy-s0 ...
    python bench/calibration.py --out runs/calibration --relabel

RUN is an rlhflab run with `stage1_lm` and `stage2_rm` (e.g. `rlhflab pipeline --preset
demo --out RUN`): its stage-1 model is the policy GRPO starts from and the reference, its
reward model the proxy reward. Every `--eval-every` steps a callback puts the policy in
eval mode (generation in train mode under gradient checkpointing samples differently),
samples 64 held-out prompts, and adds to the trainer's log row: `gold` (the world's gold
utility), `eval_distinct_2`, `eval_length`, `eval_truncated`. The doctor reads a run as a
user would: `rlhflab doctor OUT/NAME/trainer_state.json --map gold=reward/gold_mean`.

Writes OUT/NAME/{trainer_state.json, label.json} and OUT/labels.json, and the training
samples: GRPO's own `completions/completions_*.parquet` (`log_completions=True`), RLOO's
`rlhflab/samples.jsonl` (`DoctorCallback(samples_of=trainer)`); TRL 1.12's PPOTrainer keeps
none the callback can read. `--relabel` labels
the stored runs again (label_run on their stored gold and trainer log) without training.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EVAL_PROMPTS = 256  # gold's standard error over them: about 0.03


@dataclass(frozen=True)
class Variant:
    """One calibration run: the trainer, its settings, and the reward it optimises."""

    trainer: str  # grpo, rloo or ppo (TRL 1.12's, in .venv-trl)
    seed: int = 0
    beta: float = 0.04
    learning_rate: float = 1e-4
    max_completion_length: int = 32
    temperature: float = 1.0
    reward: str = "rm"  # rm, rm+length (length rewarded), rm+repetition (repeated words rewarded)
    expect: str = "healthy"  # what the variant is meant to provoke; the label comes from gold, not from this
    settings: dict = field(default_factory=dict)


VARIANTS = {
    "grpo-healthy-s0": Variant("grpo", seed=0),
    "grpo-healthy-s1": Variant("grpo", seed=1),
    "grpo-healthy-s2": Variant("grpo", seed=2),
    "rloo-healthy-s0": Variant("rloo", seed=0, beta=0.05),
    "rloo-healthy-s1": Variant("rloo", seed=1, beta=0.05),
    "grpo-beta0-lr3x": Variant("grpo", beta=0.0, learning_rate=3e-4, expect="reward_hacking"),
    "grpo-lr30x": Variant("grpo", learning_rate=3e-3, expect="exploding_kl"),
    "rloo-lr30x": Variant("rloo", beta=0.05, learning_rate=3e-3, expect="exploding_kl"),
    "grpo-length-reward": Variant("grpo", reward="rm+length", expect="reward_hacking"),
    "grpo-repetition-reward": Variant("grpo", reward="rm+repetition", expect="reward_hacking"),
    "grpo-cold-sampling": Variant("grpo", temperature=0.3, beta=0.0, learning_rate=3e-4, expect="mode_collapse"),
    "grpo-truncated": Variant("grpo", max_completion_length=6, expect="truncation"),
    # TRL 1.12's PPOTrainer (.venv-trl): beta is PPOConfig.kl_coef, learning rates as rlhflab's PPO.
    "ppo-healthy-s0": Variant("ppo", seed=0, beta=0.05, learning_rate=1e-4),
    "ppo-healthy-s1": Variant("ppo", seed=1, beta=0.05, learning_rate=1e-4),
    "ppo-kl0-lr3x": Variant("ppo", beta=0.0, learning_rate=3e-4, expect="reward_hacking"),
    "ppo-lr30x": Variant("ppo", beta=0.05, learning_rate=3e-3, expect="exploding_kl"),
}


def reward_functions(variant: Variant) -> list:
    """The proxy a variant optimises: the reward model, plus an exploitable bonus."""

    def length_bonus(prompts, completions, **kwargs):
        return [0.1 * len(c.split()) for c in completions]

    def repetition_bonus(prompts, completions, **kwargs):
        return [0.3 * (len(c.split()) - len(set(c.split()))) for c in completions]

    extra = {"rm": [], "rm+length": [length_bonus], "rm+repetition": [repetition_bonus]}[variant.reward]
    return extra


def make_gold_callback(world, tokenizer, max_new_tokens: int, every: int, seed: int):
    import torch
    from transformers import TrainerCallback

    from rlhflab.metrics.diversity import distinct_n

    prompts = world.prompts(EVAL_PROMPTS, seed, split="heldout")

    class GoldCallback(TrainerCallback):
        """Samples held-out prompts in eval mode every `every` steps and adds the world's
        gold (and the samples' diversity, length, truncation) to that step's log row."""

        def __init__(self) -> None:
            self.pending: dict | None = None
            self.history: list[dict] = []
            self.policy = None  # set by trainers that pass no model to callbacks

        def measure(self, model, step: int) -> dict:
            was_training = model.training
            model.eval()
            encoded = tokenizer([tokenizer.bos_token + p for p in prompts], return_tensors="pt", padding=True,
                                add_special_tokens=False)
            with torch.no_grad():
                out = model.generate(**encoded, do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
                                     max_new_tokens=max_new_tokens, pad_token_id=tokenizer.pad_token_id,
                                     eos_token_id=tokenizer.eos_token_id)
            model.train(was_training)
            new = out[:, encoded["input_ids"].shape[1]:]
            ended = (new == tokenizer.eos_token_id).any(dim=1)
            texts = tokenizer.batch_decode(new, skip_special_tokens=True)
            gold = world.gold(prompts, texts)
            row = {"step": step, "gold": statistics.fmean(gold), "eval_distinct_2": distinct_n(texts, 2),
                   "eval_length": statistics.fmean(len(t.split()) for t in texts),
                   "eval_truncated": 1.0 - float(ended.float().mean())}
            self.history.append(row)
            return row

        def on_train_begin(self, args, state, control, model=None, **kwargs):
            self.measure(self.policy or model, 0)

        def on_step_end(self, args, state, control, model=None, **kwargs):
            if state.global_step % every == 0:
                self.pending = self.measure(self.policy or model, state.global_step)
                self.on_log(args, state, control)  # trainers that log before this call (TRL's PPO)

        def on_log(self, args, state, control, logs=None, **kwargs):
            if self.pending is not None and state.log_history and state.log_history[-1].get("step") == \
                    self.pending["step"]:
                state.log_history[-1].update({k: v for k, v in self.pending.items() if k != "step"})
                self.pending = None

    return GoldCallback()


# What every calibration run shares, in TRL's own config fields (a flag each for
# bench/trl_world.py): CPU, float32, every step logged, nothing saved or reported.
SHARED_SETTINGS = {"use_cpu": True, "bf16": False, "gradient_checkpointing": False, "report_to": [],
                   "save_strategy": "no", "logging_steps": 1, "disable_tqdm": True, "per_device_train_batch_size": 32}


def config_settings(variant: Variant, steps: int) -> dict:
    """The variant's TRL config fields, output_dir aside. TRL 1.12's PPOTrainer does one update
    per step (a rollout of 32 prompts, 2 epochs of 2 minibatches)."""
    if variant.trainer == "ppo":
        own = {"num_sample_generations": 0, "num_mini_batches": 2, "num_ppo_epochs": 2, "total_episodes": steps * 32,
               "response_length": variant.max_completion_length, "stop_token": "eos", "missing_eos_penalty": 1.0,
               "kl_coef": variant.beta}
    else:
        # GRPO writes its completions itself (completions/*.parquet, with log_completions; printing
        # none of them draws nothing from `random`); RLOO keeps them in memory, so the doctor's
        # callback writes them (rlhflab/samples.jsonl).
        own = {"max_steps": steps, "num_generations": 4, "max_completion_length": variant.max_completion_length,
               "beta": variant.beta}
        if variant.trainer == "grpo":
            own |= {"log_completions": True, "num_completions_to_print": 0}
    return {**SHARED_SETTINGS, "seed": variant.seed, "learning_rate": variant.learning_rate,
            "temperature": variant.temperature, **own, **variant.settings}


def config_class(trainer: str):
    """The TRL config class of a calibration trainer (PPO: TRL 1.12's, in .venv-trl)."""
    if trainer == "ppo":
        from trl.experimental.ppo import PPOConfig

        return PPOConfig
    import trl

    return {"grpo": trl.GRPOConfig, "rloo": trl.RLOOConfig}[trainer]


def completion_length(trainer: str, config) -> int:
    return config.response_length if trainer == "ppo" else config.max_completion_length


def train_ppo(config, base: Path, callback, tokenizer, prompts: list[str]):
    """TRL 1.12's PPOTrainer; the value model starts as a copy of the reward model, as TRL's
    examples do."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification
    from trl.experimental.ppo import PPOTrainer

    dataset = Dataset.from_dict({"input_ids": [[tokenizer.bos_token_id] + tokenizer.encode(p, add_special_tokens=False)
                                               for p in prompts]})
    trainer = PPOTrainer(
        args=config, processing_class=tokenizer, model=AutoModelForCausalLM.from_pretrained(base / "stage1_lm"),
        ref_model=AutoModelForCausalLM.from_pretrained(base / "stage1_lm"),
        reward_model=AutoModelForSequenceClassification.from_pretrained(base / "stage2_rm", num_labels=1),
        value_model=AutoModelForSequenceClassification.from_pretrained(base / "stage2_rm", num_labels=1),
        train_dataset=dataset, callbacks=[callback])
    return trainer


def build_trainer(variant: Variant, base: Path, run_dir: Path, steps: int, callback):
    """The variant's trainer (TRL's GRPO/RLOO, or TRL 1.12's PPO in .venv-trl) from `base`'s
    stage-1 model and reward model, on the world's training prompts, with `callback`."""
    config = config_class(variant.trainer)(output_dir=str(run_dir), **config_settings(variant, steps))
    return trainer_from_config(variant.trainer, config, base, callback, reward_functions(variant))


def trainer_from_config(trainer_name: str, config, base: Path, callback, bonuses: list = ()):
    """A TRL trainer of the world from its config: `base`'s stage-1 model is the policy and
    the reference, its reward model the proxy (plus `bonuses`, reward functions GRPO/RLOO add)."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer

    from rlhflab.worlds.reviews import ReviewsWorld, WorldConfig

    tokenizer = AutoTokenizer.from_pretrained(base / "stage1_lm", padding_side="left")
    prompts = ReviewsWorld(WorldConfig()).prompts(4096, config.seed)
    if trainer_name == "ppo":
        trainer = train_ppo(config, base, callback, tokenizer, prompts)
        callback.policy = trainer.model.policy  # PPOTrainer passes no model to its callbacks
        return trainer
    import trl

    trainer_class = {"grpo": trl.GRPOTrainer, "rloo": trl.RLOOTrainer}[trainer_name]
    policy = AutoModelForCausalLM.from_pretrained(base / "stage1_lm")
    reward_model = AutoModelForSequenceClassification.from_pretrained(base / "stage2_rm", num_labels=1)
    trainer = trainer_class(
        model=policy, reward_funcs=[reward_model, *bonuses], args=config,
        train_dataset=Dataset.from_dict({"prompt": [tokenizer.bos_token + p for p in prompts]}),
        processing_class=tokenizer, reward_processing_classes=[tokenizer] + [None] * len(bonuses),
        callbacks=[callback])
    if trainer_name == "rloo":
        from rlhflab.integrations import DoctorCallback

        trainer.add_callback(DoctorCallback(every=10**9, samples_of=trainer))
    return trainer


def run_variant(name: str, variant: Variant, base: Path, out: Path, steps: int, every: int) -> dict:
    from transformers import AutoTokenizer

    from rlhflab.worlds.reviews import ReviewsWorld, WorldConfig

    tokenizer = AutoTokenizer.from_pretrained(base / "stage1_lm", padding_side="left")
    callback = make_gold_callback(ReviewsWorld(WorldConfig()), tokenizer, variant.max_completion_length, every,
                                  variant.seed)
    trainer = build_trainer(variant, base, out / name, steps, callback)
    return train_and_label(name, variant.expect, trainer, callback, out / name)


def train_and_label(name: str, expect: str, trainer, callback, run_dir: Path) -> dict:
    """Trains, then writes the trainer's log (trainer_state.json) and the run's label with its
    held-out history (label.json) into `run_dir`."""
    start = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - start
    trainer.state.save_to_json(str(run_dir / "trainer_state.json"))
    label = label_run(callback.history, proxy_series(trainer.state.log_history))
    (run_dir / "label.json").write_text(json.dumps({"variant": name, "expect": expect, **label,
                                                     "seconds": seconds, "gold": callback.history}, indent=1))
    return label


def proxy_series(log_history: list[dict]) -> list[tuple[int, float]]:
    """The reward a TRL trainer optimised, step by step: GRPO's and RLOO's `reward` (the sum
    of its reward functions, bonuses included), TRL 1.12 PPO's `objective/scores`."""
    for key in ("reward", "objective/scores"):
        series = [(row["step"], row[key]) for row in log_history if key in row]
        if series:
            return series
    raise ValueError("the trainer's log has no reward column (reward, objective/scores)")


def label_run(history: list[dict], proxy: list[tuple[int, float]]) -> dict:
    """The truth of a run from its held-out samples, never from the doctor. Gold is averaged
    over 3 consecutive evaluations (each of 256 prompts) before it is compared, and the proxy
    (the trained reward, `proxy`: (step, value) pairs) over the steps those evaluations cover:
    - reward_hacking: gold ends at least 0.15 (gold units) below its best while the proxy ends
      at or above where it stood at gold's best (the proxy climbs while quality falls);
    - policy_degraded: gold ends 0.15 below its best and the proxy fell with it (the updates
      make the policy worse at both, which no reward over-optimises);
    - mode_collapse: distinct-2 of the samples ends under half its start;
    - truncation: most samples (over 90%) cut at the length limit at the end;
    - healthy: gold ends within 0.15 of its best, at or above its start, none of the above;
    - no_learning: gold ends within 0.05 of its start and none of the above (neither healthy nor sick)."""
    steps = [h["step"] for h in history]
    raw = [h["gold"] for h in history]
    gold = [statistics.fmean(raw[max(0, i - 2):i + 1]) for i in range(len(raw))]  # 3 evaluations, trailing
    covered = [[value for step, value in proxy if (steps[max(0, i - 3)] if i else -1) < step <= steps[i]]
               for i in range(len(steps))]
    covered[0] = covered[0] or next((values for values in covered if values), [])  # gold at step 0: no update yet
    reward = [statistics.fmean(values) if values else None for values in covered]
    start, best, end = raw[0], max(gold), gold[-1]
    at_best = gold.index(best)
    distinct = [h["eval_distinct_2"] for h in history]
    families = []
    if best - end >= 0.15:
        proxy_kept = reward[-1] is not None and reward[at_best] is not None and reward[-1] >= reward[at_best]
        families.append("reward_hacking" if proxy_kept else "policy_degraded")
    if distinct[-1] < 0.5 * distinct[0]:
        families.append("mode_collapse")
    if history[-1]["eval_truncated"] > 0.9:
        families.append("truncation")
    if families:
        label = "pathological"
    elif end >= start and best - end < 0.15:
        label = "healthy"
    else:
        label = "no_learning"
    return {"label": label, "families": families, "gold_start": start, "gold_best": best, "gold_end": end,
            "proxy_at_gold_best": reward[at_best], "proxy_end": reward[-1],
            "distinct_2_start": distinct[0], "distinct_2_end": distinct[-1]}


def relabel(out: Path) -> dict:
    """Every run under `out` labelled again from what it stored (its held-out history in
    label.json, the trainer's log in trainer_state.json), without training it again."""
    labels = {}
    for label_path in sorted(out.glob("*/label.json")):
        stored = json.loads(label_path.read_text())
        log_history = json.loads((label_path.parent / "trainer_state.json").read_text())["log_history"]
        label = label_run(stored["gold"], proxy_series(log_history))
        stored.update(label)
        label_path.write_text(json.dumps(stored, indent=1))
        labels[label_path.parent.name] = {"expect": stored["expect"], **label}
    return labels


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", type=Path, help="an rlhflab run with stage1_lm and stage2_rm (to train)")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "calibration")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--eval-every", type=int, default=5)
    parser.add_argument("--only", nargs="*", default=None, choices=sorted(VARIANTS))
    parser.add_argument("--relabel", action="store_true", help="label OUT's runs again from what they stored")
    args = parser.parse_args()
    labels_path = args.out / "labels.json"
    if args.relabel:
        labels = relabel(args.out)
        labels_path.write_text(json.dumps(labels, indent=1))
        for name, label in labels.items():
            print(name, json.dumps(label))
        return
    if args.base is None:
        parser.error("--base RUN is needed to train (or --relabel to label stored runs again)")
    from transformers.utils import logging

    logging.set_verbosity_error()
    labels = json.loads(labels_path.read_text()) if labels_path.is_file() else {}
    for name in args.only or VARIANTS:
        label = run_variant(name, VARIANTS[name], args.base, args.out, args.steps, args.eval_every)
        labels[name] = {"expect": VARIANTS[name].expect, **label}
        print(name, json.dumps(labels[name]), flush=True)
        args.out.mkdir(parents=True, exist_ok=True)
        labels_path.write_text(json.dumps(labels, indent=1))


if __name__ == "__main__":
    main()
