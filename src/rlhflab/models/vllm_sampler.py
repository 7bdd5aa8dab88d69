"""vLLM as the rollout sampler (`rollout.engine = "vllm"`): an engine started once per run
(per process under torchrun) from the policy's HF directory, in this process, so that
new weights are handed over as tensors (`reload_weights`), not pickled to a worker.

It samples what the native sampler samples: pure temperature sampling (no top-k, top-p or
min-p, no penalties), up to EOS or the length limit, one stream per row (the row's seed
comes from its own random stream, so a row's response does not depend on its batch). The
logprobs it returns are those it sampled from: after temperature (`processed_logprobs`;
vLLM's default, `raw_logprobs`, is before it, and would differ from the trainer's at any
temperature but 1).
"""

from __future__ import annotations

import atexit
import os
from pathlib import Path

import torch
from torch import Tensor

from rlhflab.config import RolloutConfig
from rlhflab.errors import MissingExtra
from rlhflab.models.precision import forward_dtype
from rlhflab.models.sampling import Samples
from rlhflab.seeding import RowStreams, uniforms

INSTALL_HINT = ("rollout.engine = 'vllm' needs vLLM in the environment that runs stage 3: `make vllm` builds "
                ".venv-vllm with vLLM's CPU build beside rlhflab; on a GPU, `pip install 'rlhflab[vllm]'` "
                "(docs/implementation_details.md, \"Rollouts on an inference engine\")")


def import_vllm():
    """vLLM's `LLM` and `SamplingParams`, its engine kept in this process; a MissingExtra naming
    what to install when it is missing."""
    # Before vLLM is imported: its engine then runs in this process, not in a worker.
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    try:
        from vllm import LLM, SamplingParams
    except ImportError as err:
        raise MissingExtra(f"{INSTALL_HINT} ({err})") from None
    return LLM, SamplingParams


def row_seeds(generator: torch.Generator | RowStreams, rows: int) -> list[int]:
    """One seed per row, each from the row's own stream (`RowStreams`) or all from one generator."""
    return [int(u * 2**31) for u in uniforms((rows, 1), generator)[:, 0].tolist()]


def engine_dtype(setting: str, device: torch.device) -> str:
    """The dtype vLLM computes in: the trainer's forward dtype for "auto" (vLLM's own auto
    would run a float32 checkpoint in float16 or bfloat16: a mismatch by choice)."""
    if setting != "auto":
        return setting
    return str(forward_dtype(device)).removeprefix("torch.")


def executor_of_this_process() -> dict:
    """Under torchrun, vLLM's "external_launcher" executor: every process holds an engine of
    its own (tensor parallel 1) on its own device, and vLLM joins the process group torchrun
    made instead of starting one (as TRL's colocated vLLM does); one process needs none."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        return {"distributed_executor_backend": "external_launcher"}
    return {}


CPU_KV_CACHE_GIB = 1.0  # rollout.vllm_kv_cache_gib's default on the CPU


def kv_cache_bytes(config: RolloutConfig, device: torch.device) -> int | None:
    """The KV cache vLLM gets: `vllm_kv_cache_gib`, else on the CPU CPU_KV_CACHE_GIB, else
    (None) what `vllm_gpu_memory_utilization` leaves of the GPU."""
    gib = config.vllm_kv_cache_gib if config.vllm_kv_cache_gib is not None else (
        CPU_KV_CACHE_GIB if device.type == "cpu" else None)
    return None if gib is None else int(gib * 2**30)


class VLLMSampler:
    """A vLLM engine holding a copy of the policy's weights, pushed after every update."""

    is_trainer = False  # a copy of the weights, in the engine's own kernels

    def __init__(self, policy_dir: Path, config: RolloutConfig, seed: int, device: torch.device) -> None:
        LLM, self._params = import_vllm()
        executor = executor_of_this_process()
        self.llm = LLM(
            str(policy_dir), dtype=engine_dtype(config.vllm_dtype, device), seed=seed % 2**31,
            logprobs_mode="processed_logprobs",
            # CUDA graphs on a GPU only: the pushes copy into the same tensors, which the
            # graphs keep reading; on the CPU there are none to capture.
            enforce_eager=device.type != "cuda",
            gpu_memory_utilization=config.vllm_gpu_memory_utilization,
            kv_cache_memory_bytes=kv_cache_bytes(config, device),
            **executor,
        )
        if executor:  # atexit runs last in, first out: before the trainer leaves its group (distributed.py)
            atexit.register(self.close)

    def close(self) -> None:
        """Shut the engine down (its memory, and its process groups while torchrun's group is
        still open). A second call does nothing."""
        self.llm.llm_engine.engine_core.shutdown()

    def push(self, lm: torch.nn.Module) -> None:
        """The policy LM's current weights into the engine."""
        self.load(lm.state_dict())

    def load(self, weights: dict[str, Tensor]) -> None:
        """Weights by their HF names into the engine, in place (vLLM maps the names itself)."""
        items = [(name, tensor.detach()) for name, tensor in weights.items()]
        self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": items})

    @torch.no_grad()
    def __call__(self, model: torch.nn.Module, prompt_ids: Tensor, prompt_mask: Tensor, max_new_tokens: int,
                 temperature: float, eos_id: int, pad_id: int, generator: torch.Generator | RowStreams) -> Samples:
        """Samples of the engine's weights (`model` is the trainer's: not read)."""
        prompts = [{"prompt_token_ids": ids[mask].tolist()} for ids, mask in zip(prompt_ids.cpu(), prompt_mask.cpu())]
        params = [self._params(temperature=temperature, max_tokens=max_new_tokens, logprobs=0, seed=seed,
                               top_k=0, top_p=1.0, min_p=0.0, stop_token_ids=[eos_id], detokenize=False)
                  for seed in row_seeds(generator, len(prompts))]
        outputs = self.llm.generate(prompts, params, use_tqdm=False)
        return samples_of(outputs, eos_id, pad_id, prompt_ids.device)


def samples_of(outputs, eos_id: int, pad_id: int, device: torch.device) -> Samples:
    """vLLM's completions as `Samples`: right-padded to the longest, EOS included in the mask."""
    drawn = [list(out.outputs[0].token_ids) for out in outputs]
    logprobs = [[step[token].logprob for step, token in zip(out.outputs[0].logprobs, tokens)]
                for out, tokens in zip(outputs, drawn)]
    width = max(1, max(len(tokens) for tokens in drawn))
    ids = torch.full((len(drawn), width), pad_id, dtype=torch.long)
    logp = torch.zeros(len(drawn), width)
    mask = torch.zeros(len(drawn), width, dtype=torch.bool)
    for row, (tokens, values) in enumerate(zip(drawn, logprobs)):
        # A row stops at its first EOS (vLLM keeps the stop token in its output).
        end = tokens.index(eos_id) + 1 if eos_id in tokens else len(tokens)
        ids[row, :end] = torch.tensor(tokens[:end], dtype=torch.long)
        logp[row, :end] = torch.tensor(values[:end])
        mask[row, :end] = True
    has_eos = torch.tensor([eos_id in tokens for tokens in drawn])
    return Samples(ids.to(device), mask.to(device), logp.to(device), has_eos.to(device))
