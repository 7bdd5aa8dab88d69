"""The rlhflab side of the PPO benchmark: rlhflab's PPO iteration on the same models,
prompts and sizes as bench/trl_side.py, timed; plus the machine's fp32 matmul rate and
plain `model.generate` on the same model, measured in the same process.

    .venv/bin/python bench/rlhflab_side.py --model DIR --reward DIR --prompts prompts.json --iterations 3

It prints one JSON object. One iteration = one rollout of `batch_size` prompts, then
`ppo_epochs` epochs of `minibatches` minibatches (rlhflab's `ppo_iteration`, exactly as
the trainer runs it, with the demo preset's PPO settings). The first iteration is a
warm-up and is reported but not in the mean.

FLOPs are model FLOPs (Kaplan et al. 2020): 2 x parameters x tokens for a forward, 6 x
parameters x tokens for a forward and backward; tokens are the real (unpadded) tokens of
`[prompt | response]` rows, parameters those of the policy (the shared-trunk value head
adds 129).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import time

import torch


def matmul_gflops(size: int = 2048, repeats: int = 10) -> float:
    """The machine's fp32 matmul rate: the best of `repeats` (size x size) @ (size x size)."""
    a, b = torch.randn(size, size), torch.randn(size, size)
    torch.mm(a, b)  # warm-up
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - start)
    return 2 * size**3 / best / 1e9


@torch.no_grad()
def generate_rates(lm, tokenizer, prompts: list[str], response_length: int, repeats: int = 3) -> dict:
    """Tokens/s of rlhflab's sampler and of `model.generate` (default settings, sampling
    on, same length limit), on the same batch; the best of `repeats` each."""
    from rlhflab.data.batching import encode_prompts
    from rlhflab.models.sampling import sample_responses
    from rlhflab.seeding import torch_generator

    ids, mask = encode_prompts(tokenizer, prompts)
    ours, theirs = float("inf"), float("inf")
    ours_tokens = theirs_tokens = 0
    for _ in range(repeats):
        start = time.perf_counter()
        s = sample_responses(lm, ids, mask, response_length, 1.0, tokenizer.eos_token_id, tokenizer.pad_token_id,
                             torch_generator(0, "bench"))
        ours = min(ours, time.perf_counter() - start)
        ours_tokens = int(s.mask.sum())
        start = time.perf_counter()
        out = lm.generate(input_ids=ids, attention_mask=mask.long(), max_new_tokens=response_length, do_sample=True,
                          pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
        theirs = min(theirs, time.perf_counter() - start)
        new = out[:, ids.shape[1]:]
        ended = (new == tokenizer.eos_token_id).int().cumsum(1)
        theirs_tokens = int(((ended == 0) | ((ended == 1) & (new == tokenizer.eos_token_id))).sum())
    return {"rlhflab_sampler_tokens_per_s": ours_tokens / ours, "generate_tokens_per_s": theirs_tokens / theirs,
            "rlhflab_sampler_tokens": ours_tokens, "generate_tokens": theirs_tokens}


def run_rlhflab_ppo(model_dir: str, reward_dir: str, prompts: list[str], batch_size: int = 64,
                    response_length: int = 32, ppo_epochs: int = 4, minibatches: int = 4,
                    iterations: int = 3, seed: int = 0, threads: int | None = None) -> dict:
    from rlhflab.config import load_config
    from rlhflab.models.lm import count_parameters, load_tokenizer
    from rlhflab.ppo.components import PPOComponents
    from rlhflab.ppo.state import build_ppo_state
    from rlhflab.ppo.trainer import ppo_iteration

    if threads:
        torch.set_num_threads(threads)
    config = load_config("demo", overrides=[f"seed={seed}", f"ppo.batch_size={batch_size}",
                                            f"ppo.response_length={response_length}", f"ppo.epochs={ppo_epochs}",
                                            f"ppo.minibatches={minibatches}"])
    tokenizer = load_tokenizer(model_dir)
    state = build_ppo_state(config, model_dir, reward_dir, tokenizer, PPOComponents())
    params = count_parameters(state.policy.lm)
    load_at_start = os.getloadavg()[0]
    seconds, rollout_s, score_s, train_s, generated, train_flops = [], [], [], [], [], []
    for step in range(iterations + 1):
        batch = [prompts[(step * batch_size + i) % len(prompts)] for i in range(batch_size)]
        start = time.perf_counter()
        rollout, metrics = ppo_iteration(state, batch, seed, step)
        seconds.append(time.perf_counter() - start)
        rollout_s.append(metrics["time/rollout_s"])
        score_s.append(metrics["time/score_s"])
        train_s.append(metrics["time/train_s"])
        generated.append(metrics["tokens/generated"])
        tokens = int(rollout.attention_mask.sum())
        train_flops.append(6 * params * tokens * ppo_epochs)
    timed = slice(1, None)  # the first iteration warms up allocators and caches
    mean = lambda xs: sum(xs[timed]) / len(xs[timed])  # noqa: E731
    peak = matmul_gflops()
    train_rate = sum(train_flops[timed]) / sum(train_s[timed]) / 1e9
    return {
        "torch_threads": torch.get_num_threads(),
        "load_average_1m_at_start": load_at_start,
        "parameters": params,
        "iterations": iterations,
        "seconds_per_iteration": mean(seconds),
        "iteration_seconds": seconds,
        "rollout_seconds": mean(rollout_s),
        "score_seconds": mean(score_s),
        "train_seconds": mean(train_s),
        "generated_tokens_per_s": sum(generated[timed]) / sum(rollout_s[timed]),
        "generated_tokens_per_s_of_iteration": sum(generated[timed]) / sum(seconds[timed]),
        "train_gflops_per_s": train_rate,
        "matmul_gflops_per_s": peak,
        "train_fraction_of_matmul_peak": train_rate / peak,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        **generate_rates(state.policy.lm, tokenizer, prompts[:batch_size], response_length),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--reward", required=True)
    parser.add_argument("--prompts", required=True, help="JSON list of prompt strings")
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--response-length", type=int, default=32)
    parser.add_argument("--ppo-epochs", type=int, default=4)
    parser.add_argument("--minibatches", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int)
    a = parser.parse_args()
    with open(a.prompts) as f:
        prompts = json.load(f)
    from transformers.utils import logging

    logging.set_verbosity_error()
    logging.disable_progress_bar()
    result = run_rlhflab_ppo(a.model, a.reward, prompts, a.batch_size, a.response_length, a.ppo_epochs,
                             a.minibatches, a.iterations, a.seed, a.threads)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
