"""What vLLM does on this machine, as a sampler would need it: a tiny GPT-2 built from a
config (no download) saved as a model directory, sampled by vLLM's in-process engine with
each token's logprob, those logprobs against the same model's training forward (the
sampler/trainer gap rlhflab logs as `mismatch/logp_abs_diff`), and the weights replaced in
place (`collective_rpc("reload_weights")`) changing what is sampled.

    .venv-vllm/bin/python bench/vllm_check.py      # `make vllm` runs it after installing

Prints one JSON line; exits 1 if vLLM cannot sample, return logprobs, or reload weights.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

import torch


def tiny_gpt2(directory: Path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    words = ["<pad>", "<bos>", "<eos>"] + [f"w{i}" for i in range(61)]
    tokenizer = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<pad>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, pad_token="<pad>", bos_token="<bos>",
                                   eos_token="<eos>")
    torch.manual_seed(0)
    # head size 64: vLLM's CPU attention kernels refuse 16 ("Unsupported CPU attention configuration")
    config = GPT2Config(vocab_size=len(words), n_positions=64, n_embd=128, n_layer=2, n_head=2,
                        bos_token_id=1, eos_token_id=2, pad_token_id=0)
    GPT2LMHeadModel(config).save_pretrained(directory)
    fast.save_pretrained(directory)


def main() -> int:
    # The engine in this process, so that new weights are handed over as tensors, not pickled.
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    from transformers import GPT2LMHeadModel
    from vllm import LLM, SamplingParams

    with tempfile.TemporaryDirectory() as tmp:
        model_dir = Path(tmp) / "tiny"
        tiny_gpt2(model_dir)
        start = time.perf_counter()
        llm = LLM(str(model_dir), dtype="float32", enforce_eager=True, gpu_memory_utilization=0.5,
                  max_model_len=64, seed=0)
        started = time.perf_counter() - start
        params = SamplingParams(temperature=1.0, max_tokens=12, logprobs=0, seed=0)
        prompts = [{"prompt_token_ids": [1, 3 + i % 20]} for i in range(32)]
        start = time.perf_counter()
        outputs = llm.generate(prompts, params, use_tqdm=False)
        sampled_s = time.perf_counter() - start
        hf = GPT2LMHeadModel.from_pretrained(model_dir).eval()
        gaps = []
        for prompt, out in zip(prompts, outputs):
            completion = out.outputs[0]
            ids = prompt["prompt_token_ids"] + list(completion.token_ids)
            with torch.no_grad():
                logits = hf(torch.tensor([ids])).logits[0, len(prompt["prompt_token_ids"]) - 1 : -1]
            trainer = torch.log_softmax(logits.float(), -1).gather(1, torch.tensor(completion.token_ids)[:, None])[:, 0]
            engine = torch.tensor([lp[t].logprob for lp, t in zip(completion.logprobs, completion.token_ids)])
            gaps.append(float((trainer - engine).abs().mean()))
        first = [list(o.outputs[0].token_ids) for o in outputs]
        # New weights in place: every parameter moved, then the same draw again.
        state = {k: v + 0.5 * torch.randn_like(v) for k, v in hf.state_dict().items() if v.is_floating_point()}
        llm.collective_rpc("reload_weights", kwargs={"weights_iterator": list(state.items())})
        second = [list(o.outputs[0].token_ids) for o in llm.generate(prompts, params, use_tqdm=False)]
    changed = sum(a != b for a, b in zip(first, second))
    result = {"engine_start_s": round(started, 1), "sample_s_32x12": round(sampled_s, 3),
              "logp_abs_diff_mean": sum(gaps) / len(gaps), "logp_abs_diff_max": max(gaps),
              "samples_changed_by_reload": f"{changed}/{len(first)}"}
    print(json.dumps(result))
    return 0 if changed and max(gaps) < 0.05 else 1


if __name__ == "__main__":
    sys.exit(main())
