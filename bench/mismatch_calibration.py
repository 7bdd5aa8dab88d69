"""Labelled runs for the training-inference mismatch rule where a trainer publishes no limit:
rlhflab's PPO with its sampler as it is (the same weights as the trainer: the mismatch is
float noise between the sampler's KV-cache passes and the padded training forward) and with
a sampler whose weights were never synced after the start (an inference engine whose weight
sync did not take: it keeps sampling from the stage-1 model while the policy moves), on the
faults bench's healthy runs' stages 1-2 for each seed. Prints, per run, the growth of
`mismatch/logp_abs_diff` over its early level (rules/mismatch.py, `mismatch_growth`).

    python bench/mismatch_calibration.py [--base runs/faults-bench] [--run-name healthy-seed{seed}]
        [--out runs/mismatch] [--seeds 0 1 2]
"""

from __future__ import annotations

import argparse
import copy
import json
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


class SamplerNeverSynced:
    """Samples with the weights the sampler got at its first call, never updated after."""

    def __init__(self) -> None:
        self.frozen = None

    def __call__(self, model, prompt_ids, prompt_mask, max_new_tokens, temperature, eos_id, pad_id, generator):
        from rlhflab.models.sampling import sample_responses

        if self.frozen is None:
            self.frozen = copy.deepcopy(model).eval().requires_grad_(False)
        return sample_responses(self.frozen, prompt_ids, prompt_mask, max_new_tokens, temperature, eos_id, pad_id,
                                generator)


def train(base: Path, out: Path, stale: bool) -> list[float]:
    from rlhflab.config import config_from_run
    from rlhflab.ppo.components import PPOComponents
    from rlhflab.runs import RunDir, read_jsonl
    from rlhflab.verify import rerun

    components = replace(PPOComponents(), sample=SamplerNeverSynced()) if stale else PPOComponents()
    run = RunDir(out)
    if not run.metrics("ppo").is_file():
        rerun(config_from_run(base), RunDir(base), run, "ppo", components, show_progress=False)
    return [r["mismatch/logp_abs_diff"] for r in read_jsonl(run.metrics("ppo"))]


def main() -> None:
    from rlhflab.doctor.rules.mismatch import mismatch_growth

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", type=Path, default=ROOT / "runs" / "faults-bench")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "mismatch")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--run-name", default="healthy-seed{seed}", help="each seed's healthy run under --base")
    args = parser.parse_args()
    for seed in args.seeds:
        for stale in (False, True):
            name = f"{'never-synced' if stale else 'healthy'}-seed{seed}"
            values = train(args.base / args.run_name.format(seed=seed), args.out / name, stale)
            measured = mismatch_growth("mismatch/logp_abs_diff", values)
            if measured is None:
                print(json.dumps({"run": name, "growth": None, "why": "shorter than two windows, or no early level"}))
                continue
            growth, smoothed, early = measured
            print(json.dumps({"run": name, "growth": growth, "early": early, "end": smoothed[-1],
                              "first": values[0], "last": values[-1]}), flush=True)


if __name__ == "__main__":
    main()
