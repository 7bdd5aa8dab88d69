"""`DoctorCallback` inside TRL's trainers, on the reviews world at demo size: the current
TRL's GRPOTrainer (in .venv) and TRL 1.12's PPOTrainer (in .venv-trl), each healthy and
with a learning rate 100x too high. Measures when a run whose KL runs away stops itself,
that a healthy one is not stopped, and what the callback costs per logging call against
a training step (the callback diagnoses at every logging call here, `every=1`, so each
history length is timed).

    python bench/doctor_callback.py --base RUN --out runs/doctor-callback --only grpo-healthy grpo-lr100x
    .venv-trl/bin/python bench/doctor_callback.py --base RUN --out runs/doctor-callback --only ppo-healthy ppo-lr100x
    python bench/doctor_callback.py --out runs/doctor-callback --doc docs/benchmarks.md

RUN is an rlhflab demo run (its stage-1 model is the policy and reference, its reward
model the reward). Each run writes OUT/NAME.json; `--doc` writes their table.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

from benchlib import replace_section
from calibration import Variant, build_trainer

ROOT = Path(__file__).resolve().parents[1]
STOP_ON = ("kl_explosion", "approxkl_high")  # a policy running away, or updates too large for its learning rate
START, END = "## The doctor inside TRL's trainers", "<!-- end doctor callback -->"
RUNS = {
    "grpo-healthy": (Variant("grpo", beta=0.04, learning_rate=1e-4), 100),
    "grpo-lr100x": (Variant("grpo", beta=0.04, learning_rate=1e-2), 100),
    "ppo-healthy": (Variant("ppo", beta=0.05, learning_rate=1e-4), 60),
    "ppo-lr100x": (Variant("ppo", beta=0.05, learning_rate=1e-2), 60),
}


def run(name: str, base: Path, out: Path) -> dict:
    import trl
    from transformers.utils import logging

    from rlhflab.integrations import DoctorCallback, DoctorStop

    logging.set_verbosity_error()
    variant, steps = RUNS[name]
    callback = DoctorCallback(every=1, stop_on=STOP_ON)
    trainer = build_trainer(variant, base, out / name, steps, callback)
    start = time.perf_counter()
    raised = False
    try:
        trainer.train()
    except DoctorStop:
        raised = True  # the trainer ignored should_training_stop (TRL 1.12's PPO)
    seconds = time.perf_counter() - start
    done = trainer.state.global_step
    stop = callback.watch.stopped_by
    result = {
        "run": name, "trainer": f"TRL {trl.__version__} {variant.trainer.upper()}", "lr": variant.learning_rate,
        "beta": variant.beta, "steps_planned": steps, "steps_run": done,
        "stopped_by": stop.rule if stop else None, "stop_step": callback.stopped_at, "raised": raised,
        "onset": stop.onset_step if stop else None, "title": stop.title if stop else None,
        "checkpoint": (out / name / f"checkpoint-{callback.stopped_at}").is_dir() if stop else None,
        "findings": sorted(callback.watch.told), "train_seconds": seconds,
        "step_seconds": (seconds - sum(callback.seconds)) / max(done, 1),
        "callback_median_s": statistics.median(callback.seconds), "callback_max_s": max(callback.seconds),
        "calls": len(callback.seconds),
    }
    (out / f"{name}.json").write_text(json.dumps(result, indent=1))
    print(json.dumps(result), flush=True)
    return result


def render(out: Path) -> str:
    rows = [json.loads(p.read_text()) for p in sorted(out.glob("*.json"))]
    lines = [START, "",
             "Commands: `python bench/doctor_callback.py --base runs/bench/demo-seed0 --out runs/doctor-callback "
             "--only grpo-healthy grpo-lr100x`, the same with `.venv-trl/bin/python` and `--only ppo-healthy "
             "ppo-lr100x`, then `--doc docs/benchmarks.md` (2-core CPU). `DoctorCallback(every=1, "
             "stop_on=(\"kl_explosion\", \"approxkl_high\"))` on the reviews world's demo models; a step is one "
             "logged update. TRL 1.12's PPOTrainer ignores `control.should_training_stop`: the callback raises "
             "`DoctorStop` at its next logging call, after the checkpoint it saved.", "",
             "| run | trainer | lr | beta | steps run / planned | stopped by | at step (onset) | checkpoint "
             "| findings told | one step | callback per call: median (max) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        stop = r["stopped_by"] or "not stopped"
        at = f"{r['stop_step']} ({r['onset']})" if r["stopped_by"] else "-"
        checkpoint = {True: "saved", False: "missing", None: "-"}[r["checkpoint"]]
        lines.append(f"| {r['run']} | {r['trainer']} | {r['lr']:g} | {r['beta']:g} | {r['steps_run']} / "
                     f"{r['steps_planned']} | {stop}{' (DoctorStop raised)' if r['raised'] else ''} | {at} | "
                     f"{checkpoint} | {', '.join(r['findings']) or 'none'} | {r['step_seconds']:.2f} s | "
                     f"{1000 * r['callback_median_s']:.1f} ms ({1000 * r['callback_max_s']:.1f} ms) |")
    lines += ["", "The callback's cost is one read of the history so far and one diagnosis, which grows with the "
              "history (`bench/doctor_speed.py`: a 100,000-row log in about 2.5 s); at the default `every=10` it is "
              "paid once per 10 logging calls.", "", END]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", type=Path, help="an rlhflab demo run with stage1_lm and stage2_rm")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "doctor-callback")
    parser.add_argument("--only", nargs="*", default=None, choices=sorted(RUNS))
    parser.add_argument("--doc", type=Path, default=None, help="write the table of OUT's results into this file")
    args = parser.parse_args()
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    if args.doc is not None:
        replace_section(args.doc, START, END, render(args.out))
        return
    if args.base is None:
        parser.error("--base RUN is needed to train")
    args.out.mkdir(parents=True, exist_ok=True)
    for name in args.only or RUNS:
        run(name, args.base, args.out)


if __name__ == "__main__":
    main()
