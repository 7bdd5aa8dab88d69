"""The TRL side of the PPO benchmark: TRL's own PPO trainer for a few iterations on CPU, timed.

TRL 1.12.0, `trl.experimental.ppo.PPOTrainer` (the last release that ships it), on the
transformers/accelerate that rlhflab uses; install with bench/trl-requirements.txt into
`.venv-trl` (torch==2.13.0 first). Run there:

    .venv-trl/bin/python bench/trl_side.py --model RUN/stage1_lm --reward RUN/stage2_rm \
        --iterations 2 [--prompts prompts.json]

It prints one JSON object. Without --prompts the prompts are the reviews world's
(`ReviewsWorld(WorldConfig()).prompts(256, seed)`), which needs rlhflab importable in this
venv (`.venv-trl/bin/pip install --no-deps -e . vaderSentiment`); --prompts takes a JSON
list of strings.

Models: policy and reference are the causal LM loaded twice; the reward model and the
value model are the 1-label sequence classifier loaded twice (the value model starts as
a copy of the reward model, as TRL's examples do). fp32, CPU, no eval, no checkpoints, no
reporting, torch's default thread count.

One iteration = one rollout of `batch_size` prompts, then `ppo_epochs` epochs of
`minibatches` minibatches, one optimizer step per minibatch. In TRL's terms:
per_device_train_batch_size=batch_size, gradient_accumulation_steps=1,
num_mini_batches=minibatches (so the minibatch is one micro-batch and every minibatch
steps the optimizer; gradient_accumulation_steps>1 would make the optimizer step only
every that many minibatches), num_ppo_epochs=ppo_epochs,
local_rollout_forward_batch_size=batch_size (one generate call for the whole rollout),
total_episodes=iterations*batch_size (TRL runs ceil(total_episodes/batch_size) updates).

Settings chosen to match rlhflab's PPO defaults (src/rlhflab/config.py), where TRL has
them: lr 3e-4 constant, kl_coef 0.2 (k1), temperature 1.0, stop at EOS,
missing_eos_penalty 1.0, cliprange 0.2, cliprange_value 0.2, vf_coef 0.1, gamma 1,
lam 0.95, no reward whitening. TRL has no gradient-norm clip in this loop and does not
standardise reward-model scores. bf16 and gradient_checkpointing, which TRL's base config
turns on by default, are off. Prompts are tokenized as `<bos> prompt` and left-padded,
as rlhflab encodes them.

Timing: a callback takes the clock at `on_train_begin` and at every `on_step_end` (TRL
calls it once per PPO update, after logging), so `iteration_seconds` excludes model
loading and trainer construction; the first iteration includes warm-up. Generation is
timed by wrapping TRL's module-level `batch_generation`. Run it on otherwise idle cores:
on this 2-core machine, with a test suite running beside it, an iteration took 33 s
instead of 0.6 s (torch's two threads wait on each other); `load_average_1m_at_start`
is in the output to spot that.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import shutil
import sys
import tempfile
import time

import torch
import trl
from datasets import Dataset
from transformers import (
    AutoModelForCausalLM,
    AutoModelForSequenceClassification,
    AutoTokenizer,
    TrainerCallback,
    set_seed,
)
from trl.experimental.ppo import PPOConfig, PPOTrainer
from trl.experimental.ppo import ppo_trainer as trl_ppo


class _Clock(TrainerCallback):
    """Wall-clock time of each PPO update, and the metrics TRL logs for it."""

    def __init__(self) -> None:
        self.marks: list[float] = []
        self.logs: list[dict] = []

    def on_train_begin(self, args, state, control, **kwargs):
        self.marks = [time.perf_counter()]

    def on_step_end(self, args, state, control, **kwargs):
        self.marks.append(time.perf_counter())

    def on_log(self, args, state, control, logs=None, **kwargs):
        self.logs.append(dict(logs or {}))


class _TimedGeneration:
    """Wraps TRL's `batch_generation` to count its seconds and the tokens it samples."""

    def __init__(self, inner, eos_id: int) -> None:
        self.inner, self.eos_id = inner, eos_id
        self.seconds, self.sampled, self.real = 0.0, 0, 0

    def __call__(self, model, queries, *args, **kwargs):
        start = time.perf_counter()
        query_responses, logits = self.inner(model, queries, *args, **kwargs)
        self.seconds += time.perf_counter() - start
        responses = query_responses[:, queries.shape[1]:]  # (B, T): every position generate() sampled
        self.sampled += responses.numel()
        # Tokens up to and including the first EOS: the response the trainer keeps.
        self.real += int(torch.clamp(trl_ppo.first_true_indices(responses == self.eos_id) + 1,
                                     max=responses.shape[1]).sum())
        return query_responses, logits


def run_trl_ppo(model_dir: str, reward_dir: str, prompts: list[str], batch_size: int = 64,
                response_length: int = 32, ppo_epochs: int = 4, minibatches: int = 4,
                iterations: int = 2, seed: int = 0, threads: int | None = None) -> dict:
    """Train TRL's PPOTrainer for `iterations` rollout-then-update iterations; return timings."""
    if threads:
        torch.set_num_threads(threads)
    set_seed(seed)
    tokenizer = AutoTokenizer.from_pretrained(model_dir, padding_side="left")
    policy = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    ref_policy = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    reward_model = AutoModelForSequenceClassification.from_pretrained(reward_dir, num_labels=1, dtype=torch.float32)
    value_model = AutoModelForSequenceClassification.from_pretrained(reward_dir, num_labels=1, dtype=torch.float32)
    bos = [] if tokenizer.bos_token_id is None else [tokenizer.bos_token_id]
    dataset = Dataset.from_dict(
        {"input_ids": [bos + tokenizer.encode(p, add_special_tokens=False) for p in prompts]})

    out_dir = tempfile.mkdtemp(prefix="trl-ppo-bench-")  # TRL creates output_dir; nothing is saved there
    config = PPOConfig(
        output_dir=out_dir, use_cpu=True, bf16=False, fp16=False, gradient_checkpointing=False,
        report_to="none", save_strategy="no", eval_strategy="no", logging_steps=1, disable_tqdm=True,
        num_sample_generations=0, seed=seed,
        per_device_train_batch_size=batch_size, gradient_accumulation_steps=1,
        num_mini_batches=minibatches, num_ppo_epochs=ppo_epochs,
        local_rollout_forward_batch_size=batch_size, total_episodes=iterations * batch_size,
        response_length=response_length, stop_token="eos", missing_eos_penalty=1.0,
        learning_rate=3e-4, lr_scheduler_type="constant", kl_coef=0.2, kl_estimator="k1",
        temperature=1.0, cliprange=0.2, cliprange_value=0.2, vf_coef=0.1, gamma=1.0, lam=0.95,
        whiten_rewards=False,
    )
    clock = _Clock()
    trainer = PPOTrainer(args=config, processing_class=tokenizer, model=policy, ref_model=ref_policy,
                         reward_model=reward_model, value_model=value_model, train_dataset=dataset,
                         callbacks=[clock])

    generation = _TimedGeneration(trl_ppo.batch_generation, tokenizer.eos_token_id)
    trl_ppo.batch_generation = generation  # train() looks the function up in its module
    load_at_start = os.getloadavg()[0]
    try:
        start = time.perf_counter()
        trainer.train()
        train_seconds = time.perf_counter() - start
    finally:
        trl_ppo.batch_generation = generation.inner
        shutil.rmtree(out_dir, ignore_errors=True)

    per_iteration = [b - a for a, b in zip(clock.marks, clock.marks[1:])]
    total = sum(per_iteration)
    return {
        "trl_version": trl.__version__,
        "torch_threads": torch.get_num_threads(),
        "load_average_1m_at_start": load_at_start,  # other processes on the cores skew the timing badly
        "iterations": len(per_iteration),
        "batch_size": batch_size,
        "response_length": response_length,
        "ppo_epochs": ppo_epochs,
        "minibatches": minibatches,
        "seconds_per_iteration": total / len(per_iteration),
        "iteration_seconds": per_iteration,
        "train_seconds": train_seconds,
        "generation_seconds": generation.seconds,
        "generated_tokens": generation.real,
        "sampled_positions": generation.sampled,
        "generated_tokens_per_s": generation.real / generation.seconds,
        "generated_tokens_per_s_of_iteration": generation.real / total,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "last_log": clock.logs[-1] if clock.logs else {},
    }


def _default_prompts(n: int, seed: int) -> list[str]:
    from rlhflab.worlds.reviews import ReviewsWorld, WorldConfig

    return ReviewsWorld(WorldConfig()).prompts(n, seed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="HF causal-LM directory (policy and reference)")
    parser.add_argument("--reward", required=True, help="HF 1-label sequence-classifier directory")
    parser.add_argument("--prompts", help="JSON list of prompt strings (default: 256 reviews-world prompts)")
    parser.add_argument("--iterations", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--response-length", type=int, default=32)
    parser.add_argument("--ppo-epochs", type=int, default=4)
    parser.add_argument("--minibatches", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, help="torch intra-op threads (default: torch's, one per core)")
    a = parser.parse_args()
    if a.prompts:
        with open(a.prompts) as f:
            prompts = json.load(f)
    else:
        prompts = _default_prompts(256, a.seed)
    with contextlib.redirect_stdout(sys.stderr):  # TRL prints progress; stdout is the JSON only
        result = run_trl_ppo(a.model, a.reward, prompts, batch_size=a.batch_size,
                             response_length=a.response_length, ppo_epochs=a.ppo_epochs,
                             minibatches=a.minibatches, iterations=a.iterations, seed=a.seed, threads=a.threads)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
