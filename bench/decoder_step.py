"""One decoding step of the demo-sized GPT-2: rlhflab's `GPT2Decoder` against the model's
own HF forward and cache (`HFCacheDecoder`), same weights and prompts.

    .venv/bin/python bench/decoder_step.py

For each batch size, `--rounds` interleaved rounds of prefill + 31 steps per decoder; it
prints the median and min of milliseconds per step as JSON.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch

from benchlib import median_and_min, random_models


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8)
    args = parser.parse_args()
    from transformers.utils import logging

    from rlhflab.config import load_config
    from rlhflab.data.batching import encode_prompts
    from rlhflab.models.decoding import GPT2Decoder, HFCacheDecoder
    from rlhflab.models.lm import load_causal_lm, load_tokenizer

    logging.set_verbosity_error()
    with tempfile.TemporaryDirectory() as tmp:
        lm_dir, _, prompts_file = random_models(Path(tmp), load_config("demo"))
        lm, tokenizer = load_causal_lm(lm_dir).eval(), load_tokenizer(lm_dir)
        prompts = json.loads(prompts_file.read_text())
    makers = {"hf_forward": lambda b, n: HFCacheDecoder(lm), "gpt2_decoder": lambda b, n: GPT2Decoder(lm, b, n)}
    result = {}
    for batch in (1, 64):
        ids, mask = encode_prompts(tokenizer, prompts[:batch])
        times: dict[str, list[float]] = {name: [] for name in makers}
        with torch.inference_mode():
            for _ in range(args.rounds):
                for name, make in makers.items():
                    decoder = make(batch, ids.shape[1] + 32)
                    decoder.prefill(ids, mask)
                    start = time.perf_counter()
                    for _ in range(31):
                        decoder.step(ids[:, -1])
                    times[name].append((time.perf_counter() - start) / 31 * 1e3)
        result[f"batch_{batch}"] = median_and_min(times, "ms")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
