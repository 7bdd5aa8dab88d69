"""The PPO stage at a realistic size on every GPU of this node: what bench/gpu_check.sh runs.

    python bench/gpu_check.py --out runs/gpu-check [--gpus N] [--iterations 6]

A Llama-style policy of about 0.5B parameters built from a config (random weights, the
reviews world's tokenizer: no download), a reward model on its trunk, and the world's
prompts. Variants, each `torchrun -m rlhflab.cli ppo`: full fine-tuning and LoRA (rank 16
on the attention and MLP projections) with `distributed.strategy=fsdp2` over every GPU;
and on one GPU, full fine-tuning sampled by rlhflab's decoder and by vLLM
(`rollout.engine=vllm`, bf16 like the trainer's forwards; skipped where vLLM is not
installed: `pip install 'rlhflab[vllm]'`). For each: seconds per iteration (after the
first), sampled tokens per second, the peak CUDA memory of any GPU (`memory/peak_gib`),
the sampler/trainer logprob gap (`mismatch/logp_abs_diff`, mean and max over iterations),
the weight push's seconds and the doctor's verdict on the run. Results go to
OUT/results.json and OUT/results.md.
Random weights rarely emit EOS, so responses run to the length limit: the work is the
most a batch can cost.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# About 0.5B parameters with the world's small vocabulary: 28 blocks of width 1280
# (20 heads of 64, 4 key/value heads), SwiGLU MLP of 3456.
LLAMA = {"hidden_size": 1280, "num_hidden_layers": 28, "num_attention_heads": 20, "num_key_value_heads": 4,
         "intermediate_size": 3456, "max_position_embeddings": 128}
FULL = ("lora.rank=0", "ppo.lr=1e-5")
# name: (processes: 0 for one per GPU, overrides)
VARIANTS = {
    "full": (0, ("distributed.strategy=fsdp2", *FULL)),
    "lora": (0, ("distributed.strategy=fsdp2", "lora.rank=16", "lora.alpha=32",
                 "lora.target_modules=q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj", "ppo.lr=1e-4")),
    "native, 1 GPU": (1, ("distributed.strategy=single", *FULL)),
    "vllm, 1 GPU": (1, ("distributed.strategy=single", "rollout.engine=vllm", *FULL)),
}


def has_vllm() -> bool:
    import importlib.util

    return importlib.util.find_spec("vllm") is not None


def build_models(out: Path) -> tuple[Path, Path]:
    """The policy and reward model directories (random weights), made once."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from rlhflab.models.reward_model import reward_model_from_lm
    from rlhflab.worlds.reviews import ReviewsWorld

    policy, reward = out / "models" / "policy", out / "models" / "reward"
    if (reward / "config.json").is_file():
        return policy, reward
    tokenizer = ReviewsWorld().tokenizer()
    config = LlamaConfig(vocab_size=len(tokenizer), bos_token_id=tokenizer.bos_token_id,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, **LLAMA)
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(policy)
    tokenizer.save_pretrained(policy)
    torch.manual_seed(1)
    reward_model_from_lm(policy).save_pretrained(reward)
    tokenizer.save_pretrained(reward)
    return policy, reward


def run_variant(name: str, out: Path, policy: Path, reward: Path, gpus: int, iterations: int, batch: int) -> dict:
    run = out / name.replace(", ", "-").replace(" ", "-")
    processes, overrides = VARIANTS[name]
    if "rollout.engine=vllm" in overrides and not has_vllm():
        return {"variant": name, "error": "skipped: vLLM is not installed (pip install 'rlhflab[vllm]')"}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={processes or gpus}",
               "-m", "rlhflab.cli", "ppo", "--out", str(run), "--policy", str(policy), "--reward-model", str(reward),
               "--quiet", f"ppo.iterations={iterations}", f"ppo.batch_size={batch}",
               "ppo.minibatches=4", "ppo.eval_prompts=64", "ppo.checkpoint_every=0", *overrides]
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    wall = time.perf_counter() - start
    log = run.with_suffix(".log")
    log.write_text(done.stdout + done.stderr, encoding="utf-8")
    if done.returncode != 0:
        return {"variant": name, "error": f"exit {done.returncode}; see {log}", "wall_s": wall}
    records = [json.loads(line) for line in (run / "metrics" / "ppo.jsonl").read_text().splitlines()]
    timed = records[1:] or records
    seconds = [sum(r.get(k, 0.0) for k in ("time/rollout_s", "time/score_s", "time/advantages_s", "time/train_s",
                                           "time/sync_s")) for r in timed]
    doctor = subprocess.run([sys.executable, "-m", "rlhflab.cli", "doctor", str(run), "--json"], capture_output=True,
                            text=True)
    diagnosis = json.loads(doctor.stdout) if doctor.stdout.strip().startswith("{") else {}
    return {
        "variant": name, "gpus": processes or gpus, "iterations": len(records), "wall_s": wall,
        "seconds_per_iteration": sum(seconds) / len(seconds),
        "sampled_tokens_per_s": sum(r["tokens/generated"] for r in timed) / sum(r["time/rollout_s"] for r in timed),
        "tokens_per_s": sum(r["tokens/generated"] for r in timed) / sum(seconds),
        "peak_gib_per_gpu": max(r.get("memory/peak_gib", float("nan")) for r in records),
        "logp_gap_mean": sum(r["mismatch/logp_abs_diff"] for r in records) / len(records),
        "logp_gap_max": max(r["mismatch/logp_abs_diff"] for r in records),
        "push_s": sum(r.get("time/sync_s", 0.0) for r in timed) / len(timed),
        "doctor_verdict": diagnosis.get("verdict", f"doctor exit {doctor.returncode}"),
        "findings": [f["rule"] for f in diagnosis.get("findings", [])],
    }


def markdown(results: list[dict], parameters: int, gpu: str) -> str:
    lines = [f"GPU check: {len(results)} variants, {parameters / 1e9:.2f}B-parameter Llama-style policy, {gpu}", "",
             "| variant | GPUs | s / iteration | sampled tokens / s | tokens / s | peak GiB per GPU "
             "| logprob gap mean / max | push s | doctor |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in results:
        if "error" in r:
            lines.append(f"| {r['variant']} | | | | | | | | {r['error']} |")
            continue
        lines.append(f"| {r['variant']} | {r['gpus']} | {r['seconds_per_iteration']:.2f} | "
                     f"{r['sampled_tokens_per_s']:.0f} | {r['tokens_per_s']:.0f} | {r['peak_gib_per_gpu']:.2f} | "
                     f"{r['logp_gap_mean']:.2g} / {r['logp_gap_max']:.2g} | {r['push_s']:.3f} | "
                     f"{r['doctor_verdict']} {', '.join(r['findings'])} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "gpu-check")
    parser.add_argument("--gpus", type=int, default=0, help="processes, one per GPU (default: every visible GPU)")
    parser.add_argument("--iterations", type=int, default=6)
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args()
    import torch

    if not torch.cuda.is_available():
        sys.exit("gpu_check: no CUDA GPU visible to torch (a CPU build, or no device); nothing was run")
    gpus = args.gpus or torch.cuda.device_count()
    args.out.mkdir(parents=True, exist_ok=True)
    policy, reward = build_models(args.out)
    from rlhflab.models.lm import count_parameters, load_causal_lm

    parameters = count_parameters(load_causal_lm(policy))
    results = [run_variant(name, args.out, policy, reward, gpus, args.iterations, args.batch_size) for name in VARIANTS]
    gpu = f"{gpus} x {torch.cuda.get_device_name(0)}"
    summary = {"parameters": parameters, "gpu": gpu, "torch": torch.__version__, "results": results,
               "environment": {k: os.environ[k] for k in ("CUDA_VISIBLE_DEVICES",) if k in os.environ}}
    (args.out / "results.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    (args.out / "results.md").write_text(markdown(results, parameters, gpu), encoding="utf-8")
    print(markdown(results, parameters, gpu))
    if any("error" in r and not r["error"].startswith("skipped") for r in results):
        sys.exit(1)


if __name__ == "__main__":
    main()
