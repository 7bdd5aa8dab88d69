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
from rlhflab.doctor.rules.collapse import DISTINCT2_FRACTION, ENTROPY_FRACTION
from rlhflab.doctor.rules.kl import KL_EARLY_GROWTH, KL_TOKEN_LIMIT
from rlhflab.doctor.rules.reward_model import RM_GOLD_AGREEMENT_LIMIT, RM_LENGTH_CORR_LIMIT, RM_VAL_ACC_LIMIT
from rlhflab.doctor.rules.update import APPROXKL_LIMIT, CLIPFRAC_LIMIT, RATIO_MAX_LIMIT
from rlhflab.doctor.signals import early_level, rolling_median, smooth, window
from rlhflab.faults.zoo import components_for
from rlhflab.pipeline import run_pipeline
from rlhflab.ppo.run import run_ppo
from rlhflab.runs import RunDir, read_jsonl

ROOT = Path(__file__).resolve().parents[1]


def ppo_again(healthy: RunDir, config, overrides: dict, out: Path) -> tuple[list[dict], list[str]]:
    """PPO with `overrides` from the healthy run's stage 1 and 2: its metrics and the doctor's findings."""
    run = RunDir(out).create()
    for name in ("world", "stage1_lm", "stage2_rm"):
        shutil.copytree(healthy.root / name, run.root / name, dirs_exist_ok=True)
    changed = apply_overrides(config, overrides)
    save_config(changed, run.config)
    run_ppo(changed, run, components_for(changed), show_progress=False)  # a config's fault is in its components
    return read_jsonl(run.metrics("ppo")), [f.rule for f in diagnose_path(run.root).findings]


def hacking_run(healthy: RunDir, config, out: Path) -> tuple[list[dict], list[str]]:
    """PPO with no KL penalty and 3x the iterations, the over-optimisation case."""
    return ppo_again(healthy, config, {"ppo.kl_coef": 0.0, "ppo.iterations": 3 * config.ppo.iterations}, out)


ADAPTIVE_TARGET = 3.0  # nats: about what the healthy runs settle at with the fixed beta of 0.2
ADAPTIVE_STARTS = (0.05, 0.8)  # beta 4x too low and 4x too high


def adaptive_runs(healthy: RunDir, config, out: Path) -> dict[float, list[dict]]:
    """The adaptive KL controller at the default horizon, from a beta 4x off either way."""
    return {beta: ppo_again(healthy, config, {"ppo.kl_target": ADAPTIVE_TARGET, "ppo.kl_coef": beta},
                            out / f"beta{beta:g}")[0] for beta in ADAPTIVE_STARTS}


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


APPROACHES = (
    ("largest policy/clipfrac", "clipfrac_max", f"{CLIPFRAC_LIMIT.name} {CLIPFRAC_LIMIT.value:g}"),
    ("largest policy/approxkl", "approxkl_max", f"{APPROXKL_LIMIT.name} {APPROXKL_LIMIT.value:g}"),
    ("largest policy/ratio_max (one token)", "ratio_max", f"{RATIO_MAX_LIMIT.name} {RATIO_MAX_LIMIT.value:g} (windowed median)"),
    ("largest windowed median of policy/ratio_max", "ratio_max_median", f"{RATIO_MAX_LIMIT.name} "
     f"{RATIO_MAX_LIMIT.value:g}"),
    ("largest rolling median of kl/mean / its early level", "kl_growth", f"{KL_EARLY_GROWTH.name} {KL_EARLY_GROWTH.value:g} "
     "(logs without a response length)"),
    ("largest rolling median of KL per token", "kl_token_median_max", f"{KL_TOKEN_LIMIT.name} {KL_TOKEN_LIMIT.value:g}"),
    ("smallest policy/entropy / first", "entropy_kept", f"{ENTROPY_FRACTION.name} {ENTROPY_FRACTION.value:g}"),
    ("smallest response/distinct_2 / first", "distinct2_kept", f"{DISTINCT2_FRACTION.name} {DISTINCT2_FRACTION.value:g}"),
    ("rm/val_acc", "rm_val_acc", f"{RM_VAL_ACC_LIMIT.name} {RM_VAL_ACC_LIMIT.value:g}"),
    ("rm/gold_agreement", "rm_gold_agreement", f"{RM_GOLD_AGREEMENT_LIMIT.name} {RM_GOLD_AGREEMENT_LIMIT.value:g}"),
    ("abs(rm/length_corr)", "rm_length_corr", f"{RM_LENGTH_CORR_LIMIT.name} {RM_LENGTH_CORR_LIMIT.value:g}"),
)


def kl_growth(kl: list[float]) -> float:
    """kl_explosion's measure for a per-sequence KL without lengths: the peak of its rolling
    median over its early level."""
    start = early_level(kl, window(len(kl)))
    return max(rolling_median(kl, window(len(kl)))) / start if start else float("nan")


def update_health(run: RunDir) -> dict:
    """The PPO update's size and the closest approaches to the doctor's thresholds, from a run's logs."""
    records = read_jsonl(run.metrics("ppo"))
    series = lambda key: [r[key] for r in records]  # noqa: E731
    reward = read_jsonl(run.metrics("reward"))[-1]
    return {
        "approxkl_median": statistics.median(series("policy/approxkl")), "approxkl_max": max(series("policy/approxkl")),
        "clipfrac_median": statistics.median(series("policy/clipfrac")), "clipfrac_max": max(series("policy/clipfrac")),
        "ratio_max": max(series("policy/ratio_max")), "kl_max": max(series("kl/mean")),
        "kl_growth": kl_growth(series("kl/mean")),
        "ratio_max_median": max(rolling_median(series("policy/ratio_max"), window(len(records)))),
        "kl_token_median_max": max(rolling_median([r["kl/mean"] / r["response/length_mean"] for r in records],
                                                  window(len(records)))),
        "entropy_kept": min(series("policy/entropy")) / records[0]["policy/entropy"],
        "distinct2_kept": min(series("response/distinct_2")) / records[0]["response/distinct_2"],
        "rm_length_corr": abs(reward["rm/length_corr"]),
    }


def hacking_summary(records: list[dict]) -> dict:
    """Where smoothed gold peaked, and what proxy and gold did after."""
    gold, proxy = smooth([r["reward/gold_mean"] for r in records], 5), smooth([r["reward/proxy_mean"] for r in records], 5)
    peak = max(range(len(gold)), key=gold.__getitem__)
    return {
        "gold_peak_step": records[peak]["step"], "gold_peak": gold[peak], "gold_final": gold[-1],
        "proxy_at_gold_peak": proxy[peak], "proxy_final": proxy[-1], "kl_final": records[-1]["kl/mean"],
    }


START, END = "<!-- pipeline-targets:start -->", "<!-- pipeline-targets:end -->"


def render(rows: list[dict], curves: dict[int, list[dict]], kl0_findings: dict[int, list[str]],
           adaptive: dict[float, list[dict]], command: str) -> str:
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
        ("demo wall time < 180 s", "wall_s", lambda v: v < 180, "{:.0f} s"),
        ("median policy/approxkl per iteration in 0.005-0.05", "approxkl_median", lambda v: 0.005 <= v <= 0.05,
         "{:.4f}"),
        ("policy/clipfrac at most 0.2 (largest iteration)", "clipfrac_max", lambda v: v <= 0.2, "{:.3f}"),
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
        passed = all(ok(r[key]) for r in rows)
        lines.append(f"| {label} | {fmt.format(med(key))} | {per_seed} | {'yes, every seed' if passed else 'NO'} |")
    lines += [
        "",
        "How close the healthy runs come to the doctor's thresholds (the worst value over the run, per seed; the "
        "windowed and smoothed series the rules read stay further away):",
        "",
        "| signal | threshold | per seed |",
        "|---|---|---|",
    ]
    for label, key, threshold in APPROACHES:
        lines.append(f"| {label} | {threshold} | {', '.join(f'{r[key]:.3f}' for r in rows)} |")
    lines += [
        "",
        "| seed | wall s | pretrain s | reward s | ppo s | stage-1 gold | policy gold | policy KL | last-iteration kl/mean "
        "| grammatical stage 1 / policy | RM val acc | doctor findings |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['seed']} | {r['wall_s']:.0f} | {r['time/pretrain_s']:.0f} | {r['time/reward_s']:.0f} | "
            f"{r['time/ppo_s']:.0f} | "
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
    lines += ["", "![proxy and gold reward, kl_coef=0](img/kl0_reward_hacking.png)"]
    lines += [
        "",
        f"### The adaptive KL controller at the default horizon (seed {rows[0]['seed']})",
        "",
        f"PPO again from the first seed's stage-1 and stage-2 models with `ppo.kl_target={ADAPTIVE_TARGET:g}` and "
        "beta starting 4x too low or too high; `kl/mean` (nats) and `kl/coef` every 10 iterations.",
        "",
        "| start beta | " + " | ".join(f"it. {i}" for i in range(0, len(next(iter(adaptive.values()))), 10)) + " | last |",
        "|---|" + "---|" * (len(range(0, len(next(iter(adaptive.values()))), 10)) + 1),
    ]
    for beta, records in adaptive.items():
        cells = [f"{r['kl/mean']:.2f} / {r['kl/coef']:.3f}" for r in records[::10]] + [
            f"{records[-1]['kl/mean']:.2f} / {records[-1]['kl/coef']:.3f}"]
        lines.append(f"| {float(beta):g} | " + " | ".join(cells) + " |")
    lines += ["", END]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--preset", default="demo")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "bench")
    parser.add_argument("--results", type=Path, default=ROOT / "bench" / "results" / "pipeline_targets.json")
    parser.add_argument("--render-only", action="store_true",
                        help="write the section and its plot again from --results and the runs under --out, "
                             "training nothing")
    args = parser.parse_args()
    command = f"python bench/pipeline_targets.py --preset {args.preset} --seeds {' '.join(map(str, args.seeds))}"
    if args.render_only:
        saved = json.loads(args.results.read_text())
        rows = [r | update_health(RunDir(args.out / f"{args.preset}-seed{r['seed']}")) for r in saved["healthy"]]
        curves = {int(k): v for k, v in saved["kl0"].items()}
        kl0_findings = {int(k): v for k, v in saved["kl0_findings"].items()}
        adaptive = saved["adaptive"]
        plot_hacking(curves, ROOT / "docs" / "img" / "kl0_reward_hacking.png")
        replace_section(ROOT / "docs" / "benchmarks.md", START, END, render(rows, curves, kl0_findings, adaptive, command))
        return

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
            **update_health(result.run),
        })
        print(json.dumps(rows[-1]), flush=True)
        curves[seed], kl0_findings[seed] = hacking_run(result.run, config, args.out / f"{args.preset}-seed{seed}-kl0")
        if seed == args.seeds[0]:
            adaptive = adaptive_runs(result.run, config, args.out / f"{args.preset}-seed{seed}-adaptive")
    args.results.parent.mkdir(parents=True, exist_ok=True)
    args.results.write_text(json.dumps({"healthy": rows, "kl0": {str(k): v for k, v in curves.items()},
                                        "kl0_findings": kl0_findings,
                                        "adaptive": {str(k): v for k, v in adaptive.items()}}, indent=1))
    plot_hacking(curves, ROOT / "docs" / "img" / "kl0_reward_hacking.png")
    replace_section(ROOT / "docs" / "benchmarks.md", START, END, render(rows, curves, kl0_findings, adaptive, command))
    print(f"wrote {args.results} and docs/benchmarks.md")


if __name__ == "__main__":
    main()
