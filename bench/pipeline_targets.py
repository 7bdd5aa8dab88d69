"""Measure the pipeline's targets on the demo preset, several seeds, and write
docs/benchmarks.md's pipeline section.

For each seed: the demo pipeline end to end (wall time per stage, held-out gold reward
of the stage-1 model and the final policy, KL, distinct-2, RM gold agreement); then PPO
again from the same stage-1 and stage-2 models with `ppo.kl_coef=0` and 3x the
iterations, the over-optimisation case (proxy reward rising while gold falls).

    python bench/pipeline_targets.py --seeds 0 1 2 --out runs/bench
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import time
from pathlib import Path

from benchlib import replace_section
from rlhflab.config import apply_overrides, load_config, save_config
from rlhflab.doctor.diagnose import diagnose_path
from rlhflab.doctor.signals import smooth
from rlhflab.pipeline import run_pipeline
from rlhflab.ppo.run import run_ppo
from rlhflab.runs import RunDir, read_jsonl

ROOT = Path(__file__).resolve().parents[1]


def hacking_run(healthy: RunDir, config, out: Path) -> list[dict]:
    """PPO with no KL penalty and 3x the iterations, from the healthy run's stage 1 and 2."""
    run = RunDir(out).create()
    for name in ("world", "stage1_lm", "stage2_rm"):
        shutil.copytree(healthy.root / name, run.root / name, dirs_exist_ok=True)
    hacked = apply_overrides(config, {"ppo.kl_coef": 0.0, "ppo.iterations": 3 * config.ppo.iterations})
    save_config(hacked, run.config)
    run_ppo(hacked, run, show_progress=False)
    return read_jsonl(run.metrics("ppo")), [f.rule for f in diagnose_path(run.root).findings]


def plot_hacking(curves: dict[int, list[dict]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for seed, records in curves.items():
        steps = [r["step"] for r in records]
        axes[0].plot(steps, smooth([r["reward/proxy_mean"] for r in records], 5), label=f"proxy, seed {seed}")
        axes[0].plot(steps, smooth([r["reward/gold_mean"] for r in records], 5), "--", label=f"gold, seed {seed}")
        axes[1].plot(steps, [r["kl/mean"] for r in records], label=f"seed {seed}")
    axes[0].set(title="ppo.kl_coef=0: reward (5-iteration mean)", xlabel="PPO iteration")
    axes[1].set(title="kl/mean (nats)", xlabel="PPO iteration", yscale="log")
    axes[0].legend(fontsize=7)
    axes[1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def hacking_summary(records: list[dict]) -> dict:
    """Where smoothed gold peaked, and what proxy and gold did after."""
    gold, proxy = smooth([r["reward/gold_mean"] for r in records], 5), smooth([r["reward/proxy_mean"] for r in records], 5)
    peak = max(range(len(gold)), key=gold.__getitem__)
    return {
        "gold_peak_step": records[peak]["step"], "gold_peak": gold[peak], "gold_final": gold[-1],
        "proxy_at_gold_peak": proxy[peak], "proxy_final": proxy[-1], "kl_final": records[-1]["kl/mean"],
    }


START, END = "<!-- pipeline-targets:start -->", "<!-- pipeline-targets:end -->"


def render(rows: list[dict], curves: dict[int, list[dict]], kl0_findings: dict[int, list[str]], command: str) -> str:
    med = lambda key: statistics.median(r[key] for r in rows)  # noqa: E731
    lines = [
        START,
        "## Pipeline targets (issue: three-stage pipeline)",
        "",
        f"Command: `{command}` (2-core CPU, torch CPU build). Medians over seeds {', '.join(str(r['seed']) for r in rows)}.",
        "",
        "| target | median | per seed | pass |",
        "|---|---|---|---|",
    ]
    checks = [
        ("demo wall time < 300 s", "wall_s", lambda v: v < 300, "{:.0f} s"),
        ("held-out gold gain (policy - stage 1) >= 0.3", "gold_gain", lambda v: v >= 0.3, "{:+.3f}"),
        ("held-out KL of the policy < 10 nats", "policy_kl", lambda v: v < 10, "{:.2f}"),
        ("distinct-2 policy / stage 1 >= 0.7", "distinct2_ratio", lambda v: v >= 0.7, "{:.2f}"),
        ("rm/gold_agreement >= 0.75", "rm_gold_agreement", lambda v: v >= 0.75, "{:.3f}"),
        ("doctor findings on the healthy run = 0", "n_findings", lambda v: v == 0, "{:.0f}"),
    ]
    for r in rows:
        r["n_findings"] = len(r["findings"])
    for label, key, ok, fmt in checks:
        per_seed = ", ".join(fmt.format(r[key]) for r in rows)
        lines.append(f"| {label} | {fmt.format(med(key))} | {per_seed} | {'yes' if ok(med(key)) else 'NO'} |")
    lines += [
        "",
        "| seed | pretrain s | reward s | ppo s | stage-1 gold | policy gold | policy KL | last-iteration kl/mean "
        "| grammatical stage 1 / policy | RM val acc | doctor findings |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['seed']} | {r['time/pretrain_s']:.0f} | {r['time/reward_s']:.0f} | {r['time/ppo_s']:.0f} | "
            f"{r['stage1_gold']:+.3f} | {r['policy_gold']:+.3f} | {r['policy_kl']:.2f} | {r['final_iter_kl']:.2f} | "
            f"{r['grammatical_stage1']:.3f} / {r['grammatical_policy']:.3f} | {r['rm_val_acc']:.3f} | "
            f"{', '.join(r['findings']) or 'none'} |"
        )
    lines += [
        "",
        "### Over-optimisation with `ppo.kl_coef=0` and 3x the iterations",
        "",
        "Same stage-1 and stage-2 models per seed; training-batch rewards smoothed over 5 iterations.",
        "",
        "| seed | gold peak (step) | gold at end | proxy at gold peak | proxy at end | kl/mean at end | doctor findings |",
        "|---|---|---|---|---|---|---|",
    ]
    for seed, records in curves.items():
        h = hacking_summary(records)
        lines.append(
            f"| {seed} | {h['gold_peak']:+.3f} ({h['gold_peak_step']}) | {h['gold_final']:+.3f} | "
            f"{h['proxy_at_gold_peak']:+.3f} | {h['proxy_final']:+.3f} | {h['kl_final']:.1f} | "
            f"{', '.join(kl0_findings[seed]) or 'none'} |"
        )
    lines += ["", "![proxy and gold reward, kl_coef=0](img/kl0_reward_hacking.png)", "", END]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--preset", default="demo")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "bench")
    parser.add_argument("--results", type=Path, default=ROOT / "bench" / "results" / "pipeline_targets.json")
    args = parser.parse_args()

    from transformers.utils import logging

    logging.set_verbosity_error()
    logging.disable_progress_bar()

    rows, curves, kl0_findings = [], {}, {}
    for seed in args.seeds:
        config = load_config(args.preset, overrides=[f"seed={seed}"])
        start = time.perf_counter()
        result = run_pipeline(config, args.out / f"{args.preset}-seed{seed}", show_progress=False)
        wall = time.perf_counter() - start
        s = result.summary
        rows.append({
            "seed": seed,
            "wall_s": wall,
            **{f"time/{k}": v for k, v in s["time"].items()},
            "stage1_gold": s["eval"]["stage1"]["gold_mean"],
            "policy_gold": s["eval"]["policy"]["gold_mean"],
            "gold_gain": s["eval"]["policy"]["gold_mean"] - s["eval"]["stage1"]["gold_mean"],
            "policy_kl": s["eval"]["policy"]["kl_mean"],
            "final_iter_kl": read_jsonl(result.run.metrics("ppo"))[-1]["kl/mean"],
            "distinct2_ratio": s["eval"]["policy"]["distinct_2"] / s["eval"]["stage1"]["distinct_2"],
            "rm_gold_agreement": s["reward"]["gold_agreement"],
            "rm_val_acc": s["reward"]["val_acc"],
            "grammatical_stage1": s["eval"]["stage1"]["grammatical_rate"],
            "grammatical_policy": s["eval"]["policy"]["grammatical_rate"],
            "findings": s["findings"],
        })
        print(json.dumps(rows[-1]), flush=True)
        curves[seed], kl0_findings[seed] = hacking_run(result.run, config, args.out / f"{args.preset}-seed{seed}-kl0")
    args.results.parent.mkdir(parents=True, exist_ok=True)
    args.results.write_text(json.dumps({"healthy": rows, "kl0": {str(k): v for k, v in curves.items()},
                                        "kl0_findings": kl0_findings}, indent=1))
    plot_hacking(curves, ROOT / "docs" / "img" / "kl0_reward_hacking.png")
    command = f"python bench/pipeline_targets.py --preset {args.preset} --seeds {' '.join(map(str, args.seeds))}"
    replace_section(ROOT / "docs" / "benchmarks.md", START, END, render(rows, curves, kl0_findings, command))
    print(f"wrote {args.results} and docs/benchmarks.md")


if __name__ == "__main__":
    main()
