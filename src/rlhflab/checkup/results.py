"""What a probe reports: its measured number, its tolerance and the component it clears
or blames; tolerances of the probes that compare forward passes follow their dtype."""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from rlhflab.doctor import Component


@dataclass(frozen=True)
class ProbeResult:
    name: str
    component: Component
    passed: bool
    measured: float
    tolerance: str
    detail: str
    state: str = "start"  # the state it ran in (`states.py`)


class ProbeSkipped(Exception):
    """A probe that cannot run on this input (e.g. no labelled pairs to test the RM on)."""


def within(name: str, component: Component, measured: float, limit: float, detail: str,
           below: bool = True) -> ProbeResult:
    """Passed when `measured` is at most `limit` (or at least, with `below=False`)."""
    passed = measured <= limit if below else measured >= limit
    return ProbeResult(name, component, bool(passed), float(measured), f"{'<=' if below else '>='} {limit:g}", detail)


# Tolerances of the probes that compare two forward passes, by the dtype the forwards run
# in. fp32: last-bit differences of the kernels (healthy runs measure <= 2.1e-6). bf16
# (CUDA autocast; measured by bench/checkup_bf16.py with CPU bf16 autocast on the smoke
# run, no GPU being at hand; table in docs/benchmarks.md): healthy, the sampler's KV-cache
# logprobs differ from the padded forward's by up to 0.052, a sequence's logprobs alone and
# in a batch by 0.0017, and a reward read alone, in a batch or padded on the other side by
# 1.5e-4; the faults these probes catch move them by 1.7 or more (temperature_mismatch,
# logprob_off_by_one, dropout_in_rollout, no_response_mask) and 3.0 (rm_reads_pad). The
# bf16 tolerances sit 4.8x (sampled logprobs), 29x (padding) and 330x (rewards) above the
# healthy values and 6.8x and more below the smallest fault's. Probes that run one forward
# path twice on the same rows (the reference twice; the first minibatch against its
# rollout rows; the old logprobs, which are copies) measure 0 in both dtypes.
FORWARD_TOLERANCES: dict[str, dict[torch.dtype, float]] = {
    "kl_zero_before_update": {torch.float32: 1e-4, torch.bfloat16: 1e-4},
    "first_ratio_is_one": {torch.float32: 1e-5, torch.bfloat16: 1e-5},
    "reference_deterministic": {torch.float32: 1e-5, torch.bfloat16: 1e-5},
    "reference_is_the_starting_model": {torch.float32: 1e-5, torch.bfloat16: 1e-5},  # one forward path, one model
    "old_logprobs_are_the_rollouts": {torch.float32: 1e-6, torch.bfloat16: 1e-6},  # copies: exact in both
    "sampled_logprobs_match_training_forward": {torch.float32: 1e-4, torch.bfloat16: 0.25},
    # the same comparison on responses cut by a short length limit
    "cut_responses_keep_what_was_sampled": {torch.float32: 1e-4, torch.bfloat16: 0.25},
    "logprob_padding_invariance": {torch.float32: 1e-4, torch.bfloat16: 0.05},
    "reward_padding_invariance": {torch.float32: 1e-4, torch.bfloat16: 0.05},
    "reward_padding_side_invariance": {torch.float32: 1e-4, torch.bfloat16: 0.05},
    # a row alone against the padded batch, as reward_padding_invariance (not measured apart in bf16)
    "reward_read_at_the_last_token": {torch.float32: 1e-4, torch.bfloat16: 0.05},
    # the same rows in two batches, their padding possibly placed otherwise (as the padding-side probe)
    "reward_model_learns_from_the_rows_it_scores": {torch.float32: 1e-4, torch.bfloat16: 0.05},
}


def forward_within(name: str, component: Component, measured: float, dtype: torch.dtype, detail: str) -> ProbeResult:
    """A probe comparing forward passes, against the tolerance of the forwards' dtype."""
    result = within(name, component, measured, FORWARD_TOLERANCES[name][dtype], detail)
    return replace(result, tolerance=f"{result.tolerance} ({str(dtype).removeprefix('torch.')})")
