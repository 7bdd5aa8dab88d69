#!/usr/bin/env bash
# PPO at a realistic size on every GPU of this node (bench/gpu_check.py): a ~0.5B
# Llama-style policy built from a config (no download), full fine-tuning and LoRA, FSDP2
# over all GPUs, and on one GPU rlhflab's sampler against vLLM's (rollout.engine=vllm);
# time per iteration, tokens per second, peak memory per GPU, the sampler/trainer
# logprob gap and the doctor's verdict go to OUT/results.json and OUT/results.md.
#
#   bash bench/gpu_check.sh [OUT]        # default OUT: runs/gpu-check
#
# Needs the repository's .venv with a CUDA build of torch (make install on a GPU machine),
# and vLLM in it for the vLLM variant (pip install '.[vllm]'; skipped without it).
# Without a CUDA GPU it refuses, runs nothing and exits 3.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PY:-.venv/bin/python}"
OUT="${1:-runs/gpu-check}"
if [ ! -x "$PY" ]; then
    echo "gpu_check: $PY not found: run 'make install' first" >&2
    exit 2
fi
GPUS="$("$PY" -c 'import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)')"
if [ "$GPUS" = "0" ]; then
    echo "gpu_check: no CUDA GPU visible to torch (torch $("$PY" -c 'import torch; print(torch.__version__)')); nothing was run" >&2
    exit 3
fi
echo "gpu_check: $GPUS GPU(s); results in $OUT"
"$PY" bench/gpu_check.py --out "$OUT" --gpus "$GPUS"
