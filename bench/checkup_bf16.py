"""The checkup's forward-comparing probes in fp32 and under bf16 autocast (the dtype of
CUDA runs, exercised here on the CPU), on a healthy smoke run and with each fault these
probes are meant to catch: what `FORWARD_TOLERANCES` in src/rlhflab/checkup/results.py
is set from.

    python bench/checkup_bf16.py [--run RUN]

Without `--run`, a smoke pipeline is trained into a temporary directory first. Results
go to docs/benchmarks.md ("Checkup tolerances under bf16").
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

from benchlib import replace_section

ROOT = Path(__file__).resolve().parents[1]
START, END = "## Checkup tolerances under bf16", "<!-- end checkup bf16 -->"
PROBES = ("kl_zero_before_update", "first_ratio_is_one", "old_logprobs_are_the_rollouts",
          "sampled_logprobs_match_training_forward", "logprob_padding_invariance", "reference_deterministic",
          "reward_padding_invariance", "reward_padding_side_invariance")
FAULTS = (None, "temperature_mismatch", "logprob_off_by_one", "dropout_in_rollout", "no_response_mask",
          "rm_reads_pad", "ref_is_policy")


def measure(run_dir: Path) -> dict[tuple[str, str], dict[str, float]]:
    """(dtype, fault) -> probe -> measured value."""
    import rlhflab.models.precision as precision
    from rlhflab.checkup import run_checkup
    from rlhflab.config import config_from_run
    from rlhflab.faults.zoo import get_fault
    from rlhflab.ppo.components import PPOComponents
    from rlhflab.runs import RunDir

    run, config = RunDir(run_dir), config_from_run(run_dir)
    results = {}
    for dtype, devices in (("float32", ("cuda",)), ("bfloat16", ("cpu", "cuda"))):
        precision.BF16_DEVICES = devices
        for fault in FAULTS:
            components = get_fault(fault).components() if fault else PPOComponents()
            measured = {r.name: r.measured for r in run_checkup(config, run, components).results}
            results[(dtype, fault or "healthy")] = {p: measured[p] for p in PROBES}
            print(dtype, fault or "healthy", results[(dtype, fault or "healthy")], flush=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", type=Path, default=None, help="a smoke run to probe (a copy is used)")
    parser.add_argument("--doc", type=Path, default=ROOT / "docs" / "benchmarks.md")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        if args.run is None:
            from rlhflab.config import load_config
            from rlhflab.pipeline import run_pipeline

            run_pipeline(load_config("smoke"), run_dir, show_progress=False)
        else:
            shutil.copytree(args.run, run_dir)
        results = measure(run_dir)
    import torch

    from rlhflab.checkup.results import FORWARD_TOLERANCES

    rows = [f"| {dtype} | {fault} | " + " | ".join(f"{values[p]:.2g}" for p in PROBES) + " |"
            for (dtype, fault), values in results.items()]
    tolerances = [f"| {name} | tolerance | " + " | ".join(f"{FORWARD_TOLERANCES[p][dtype]:g}" for p in PROBES) + " |"
                  for name, dtype in (("float32", torch.float32), ("bfloat16", torch.bfloat16))]
    section = "\n".join([
        START, "",
        "Command: `python bench/checkup_bf16.py` (2-core CPU; bf16 through CPU autocast, no GPU here). Measured",
        "value of each forward-comparing probe on the smoke run, healthy and with each fault; a probe passes at or",
        "below its tolerance (`FORWARD_TOLERANCES`, src/rlhflab/checkup/results.py).", "",
        "| dtype | run | " + " | ".join(f"`{p}`" for p in PROBES) + " |",
        "|---|---|" + "---|" * len(PROBES), *rows, *tolerances, "", END,
    ])
    replace_section(args.doc, START, END, section)
    print(section)


if __name__ == "__main__":
    main()
