"""What each lever on the demo's wall time costs in quality, stage by stage.

Every stage-1 variant trains from scratch; every stage-2 variant starts from the default
stage-1 model, every PPO variant from the default stage-1 and stage-2 models, so a row
differs from the defaults in one lever only. One seed, one process, variants in a row.

    python bench/demo_levers.py --seed 0 --out runs/levers
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import time
from pathlib import Path

import torch

import rlhflab.stages.pretrain as pretrain_stage
import rlhflab.stages.reward as reward_stage
from benchlib import replace_section
from rlhflab.config import apply_overrides, load_config, save_config
from rlhflab.data.batching import length_grouped_batches
from rlhflab.doctor.diagnose import diagnose_path
from rlhflab.ppo.run import run_ppo
from rlhflab.runs import RunDir, read_jsonl

ROOT = Path(__file__).resolve().parents[1]
START, END = "<!-- demo-levers:start -->", "<!-- demo-levers:end -->"
RANDOM_BATCHES = "random batches (before length grouping)"

STAGE1 = {"defaults": {}, RANDOM_BATCHES: {}, "600 steps": {"pretrain.steps": 600},
          "corpus of 10,000": {"pretrain.corpus_size": 10000}, "4 layers (before)": {"pretrain.n_layer": 4}}
STAGE2 = {"defaults": {}, RANDOM_BATCHES: {}, "12,000 pairs": {"reward.pairs": 12000},
          "15,000 pairs": {"reward.pairs": 15000}, "1 epoch": {"reward.epochs": 1}}
PPO = {"defaults": {}, "4 epochs (before)": {"ppo.epochs": 4}}


def random_batches(lengths: torch.Tensor, batch_size: int, generator: torch.Generator, pool: int = 50):
    """One epoch of batches of random rows (the batching before `length_grouped_batches`)."""
    return list(torch.randperm(len(lengths), generator=generator).split(batch_size))


def fresh_run(out: Path, config, base: RunDir | None, keep: tuple[str, ...]) -> RunDir:
    shutil.rmtree(out, ignore_errors=True)
    run = RunDir(out).create()
    save_config(config, run.config)
    for name in keep:
        shutil.copytree(base.root / name, run.root / name, dirs_exist_ok=True)
    return run


def stage1_row(name: str, config, out: Path) -> dict:
    batching = random_batches if name == RANDOM_BATCHES else length_grouped_batches
    pretrain_stage.length_grouped_batches = batching
    result = pretrain_stage.run_pretrain(config, fresh_run(out, config, None, ()), show_progress=False)
    pretrain_stage.length_grouped_batches = length_grouped_batches
    return {"seconds": result.seconds, "val_loss": result.val_loss, "grammatical": result.grammatical_rate}


def stage2_row(name: str, config, base: RunDir, out: Path) -> dict:
    reward_stage.length_grouped_batches = random_batches if name == RANDOM_BATCHES else length_grouped_batches
    result = reward_stage.run_reward(config, fresh_run(out, config, base, ("world", "stage1_lm")), show_progress=False)
    reward_stage.length_grouped_batches = length_grouped_batches
    return {"seconds": result.seconds, "val_acc": result.val_acc, "gold_agreement": result.gold_agreement,
            "length_corr": result.length_corr}


def ppo_row(config, base: RunDir, out: Path) -> dict:
    run = fresh_run(out, config, base, ("world", "stage1_lm", "stage2_rm", "metrics"))
    start = time.perf_counter()
    evaluation = run_ppo(config, run, show_progress=False)
    seconds = time.perf_counter() - start
    records = read_jsonl(run.metrics("ppo"))
    stage1, policy = evaluation["stage1"], evaluation["policy"]
    return {"seconds": seconds, "approxkl": statistics.median(r["policy/approxkl"] for r in records),
            "clipfrac": statistics.median(r["policy/clipfrac"] for r in records),
            "gold_gain": policy["gold_mean"] - stage1["gold_mean"], "kl": policy["kl_mean"],
            "findings": ", ".join(f.rule for f in diagnose_path(run.root).findings) or "none"}


def render(seed: int, stage1: dict, stage2: dict, ppo: dict, command: str) -> str:
    lines = [START, "### Each lever on the demo's time, stage by stage", "",
             f"Command: `{command}` (2-core CPU, seed {seed}, one process, variants in a row). Each row changes "
             "one lever from the demo defaults; stage-2 rows start from the default stage-1 model, PPO rows from the "
             "default stage-1 and stage-2 models. Times move by about a tenth between runs on this machine.", "",
             "| stage 1 variant | seconds | lm/val_loss | grammatical rate of samples |", "|---|---|---|---|"]
    lines += [f"| {n} | {r['seconds']:.0f} | {r['val_loss']:.3f} | {r['grammatical']:.3f} |" for n, r in stage1.items()]
    lines += ["", "| stage 2 variant | seconds | rm/val_acc | rm/gold_agreement | rm/length_corr |", "|---|---|---|---|---|"]
    lines += [f"| {n} | {r['seconds']:.0f} | {r['val_acc']:.3f} | {r['gold_agreement']:.3f} | {r['length_corr']:+.3f} |"
              for n, r in stage2.items()]
    lines += ["", "| PPO variant | seconds | median policy/approxkl | median policy/clipfrac | held-out gold gain | "
              "policy KL | doctor findings |", "|---|---|---|---|---|---|---|"]
    lines += [f"| {n} | {r['seconds']:.0f} | {r['approxkl']:.4f} | {r['clipfrac']:.3f} | {r['gold_gain']:+.3f} | "
              f"{r['kl']:.2f} | {r['findings']} |" for n, r in ppo.items()]
    return "\n".join(lines + [END]) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("runs/levers"))
    parser.add_argument("--doc", type=Path, default=ROOT / "docs" / "benchmarks.md")
    args = parser.parse_args()
    defaults = load_config("demo", overrides=[f"seed={args.seed}"])
    stage1, stage2, ppo = {}, {}, {}
    for name, overrides in STAGE1.items():
        stage1[name] = stage1_row(name, apply_overrides(defaults, overrides), args.out / "stage1" / str(len(stage1)))
        print("stage 1", name, stage1[name], flush=True)
    base = RunDir(args.out / "stage1" / "0")
    for name, overrides in STAGE2.items():
        stage2[name] = stage2_row(name, apply_overrides(defaults, overrides), base, args.out / "stage2" / str(len(stage2)))
        print("stage 2", name, stage2[name], flush=True)
    base = RunDir(args.out / "stage2" / "0")
    for name, overrides in PPO.items():
        ppo[name] = ppo_row(apply_overrides(defaults, overrides), base, args.out / "ppo" / str(len(ppo)))
        print("ppo", name, ppo[name], flush=True)
    command = f"python bench/demo_levers.py --seed {args.seed}"
    replace_section(args.doc, START, END, render(args.seed, stage1, stage2, ppo, command))


if __name__ == "__main__":
    main()
