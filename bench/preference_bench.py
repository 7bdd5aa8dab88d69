"""A fix judged by preference, scored on the world: does a comparison study's verdict agree
with the hidden gold's, and what does a reward-model judge say?

    python bench/preference_bench.py --base runs/demo [--out runs/preference-bench] [--seeds 10] [--doc docs/benchmarks.md]

Policies: the base run's stages 1-2 with PPO trained again at ppo.seed = 0..N-1, with the base
config (healthy) and with ppo.kl_coef=0 (over-optimised on the world). Pairs, as a fix would
be judged: kl_coef=0 seed k (before) against healthy seed k (after), a real difference; and
healthy seed k against healthy seed k+1 (mod N), seed only, no difference (each healthy policy
is in two such pairs). Each policy is sampled on the base run's held-out prompts (`rlhflab
sample`'s code, seed 0), and each pair is a comparison study of every prompt, answered by
three simulated labelers (studies/bots.py `WorldComparer`) at the fitted noise and at twice
it, and by the base run's reward model as a judge (the higher score wins).

The hidden gold: the world's gold utility of every response; its verdict on a pair is the
mean paired difference (after - before) with a normal 95% interval over the prompts: "after",
"before" (better) or "none". A study's verdict: the after side's win rate with Wilson's 95%
interval, the same three outcomes. The reward model is the proxy PPO optimised: it is expected
to prefer the over-optimised policy, the reason a truth must not be the reward optimised.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path

from benchlib import replace_section, wilson
from rlhflab.config import apply_overrides, config_from_run
from rlhflab.faults.zoo import components_for
from rlhflab.runs import RunDir
from rlhflab.verify import rerun

ROOT = Path(__file__).resolve().parent.parent
START, END = "<!-- preference-bench:start -->", "<!-- preference-bench:end -->"
NOISES = (1.0, 2.0)  # times WORLD_NOISE
LABELERS = 3


def policy(base: Path, out: Path, seed: int, overrides: dict[str, str]) -> Path:
    if (out / "stage3_policy").is_dir():
        return out
    config = apply_overrides(config_from_run(base), {"ppo.seed": str(seed), **overrides}, source="bench")
    rerun(config, RunDir(base), RunDir(out), "ppo", components_for(config), show_progress=False)
    return out


def samples(run: Path) -> Path:
    from rlhflab.sample import load_model, run_sampling, sample_to_file

    out = run / "samples" / "policy.jsonl"
    models, prompts, settings, gold = run_sampling(run)
    model, tokenizer = load_model(models["policy"])
    sample_to_file(model, tokenizer, prompts, out, settings, model_name=str(models["policy"]),
                   prompts_name="the run's held-out prompts", gold=gold)
    return out


def gold_verdict(before: Path, after: Path) -> tuple[str, float, float, float]:
    """(verdict, mean difference, low, high) of after - before over the shared prompts."""
    gold = [{r["prompt"]: r["gold"] for r in map(json.loads, path.read_text().splitlines())} for path in (before, after)]
    diffs = [gold[1][p] - gold[0][p] for p in gold[0] if p in gold[1]]
    mean, half = statistics.fmean(diffs), 1.96 * statistics.stdev(diffs) / math.sqrt(len(diffs))
    verdict = "after" if mean - half > 0 else "before" if mean + half < 0 else "none"
    return verdict, mean, mean - half, mean + half


def study_verdict(truth) -> str:
    return ("after" if truth.change > 0 else "before") if truth.significant else "none"


def judge_pair(base: Path, before: Path, after: Path, study_dir: Path) -> dict:
    """Each judge's verdict on one pair: labelers at each noise, and the reward model."""
    from rlhflab.judges.pairs import FunctionPairJudge, RewardModelPairJudge, judge_pairs
    from rlhflab.seeding import derive_seed
    from rlhflab.studies.bots import WORLD_NOISE, WorldComparer, world_utility
    from rlhflab.studies.build import Source
    from rlhflab.studies.pair_results import preference_change
    from rlhflab.studies.pairs import build_pair_study
    from rlhflab.studies.whose import JUDGES

    utility = world_utility(base)
    reference = [json.loads(line) for line in (base / "samples" / "stage1.jsonl").read_text().splitlines()]
    spread = statistics.pstdev(r["gold"] for r in reference)
    out = {}
    for noise in NOISES:
        study, _ = build_pair_study(study_dir / f"labelers-{noise:g}x", [Source("before", before), Source("after", after)],
                                    {"ratings_per_item": LABELERS, "repeat_every": 0})
        for k in range(LABELERS):  # each labeler a judge of its own, answering every pair
            labeler = WorldComparer(utility, noise * WORLD_NOISE * spread, derive_seed(0, str(study_dir), str(k)))
            judge_pairs(study, FunctionPairJudge(f"labeler-{k}", labeler))
        out[f"labelers {noise:g}x"] = preference_change(study, ["before"], ["after"], whose=JUDGES)
    study, _ = build_pair_study(study_dir / "rm", [Source("before", before), Source("after", after)],
                                {"ratings_per_item": 1, "repeat_every": 0})
    judge_pairs(study, RewardModelPairJudge(base / "stage2_rm", base / "stage1_lm"))
    out["reward model"] = preference_change(study, ["before"], ["after"], whose=JUDGES)
    return {name: {"verdict": study_verdict(t), "rate": t.after_end, "low": t.low + 0.5, "high": t.high + 0.5}
            for name, t in out.items()}


def render(rows: list[dict], command: str) -> str:
    judges = list(rows[0]["judges"])
    lines = [START, "## A fix judged by preference: comparison studies against the hidden gold", "",
             f"Command: `{command}`. Measured on a 2-core CPU at demo size (docstring of bench/preference_bench.py). "
             "Agreement: the study's verdict (after better, before better, or no preference: the after side's win "
             "rate, Wilson 95%) is the gold's (the mean paired gold difference over the same prompts, 95%).", "",
             "| pairs | gold's verdicts | " + " | ".join(f"{j}: agrees with gold" for j in judges) + " | "
             "reward model prefers before (the kl_coef=0 policy where there is one) |",
             "|---|---|" + "---|" * len(judges) + "---|"]
    for kind in ("kl_coef=0 -> healthy", "seed only"):
        mine = [r for r in rows if r["kind"] == kind]
        if not mine:
            continue
        golds = ", ".join(f"{v} {n}" for v, n in sorted(
            {v: sum(r["gold"]["verdict"] == v for r in mine) for v in ("after", "before", "none")}.items()) if n)
        cells = []
        for j in judges:
            agree = sum(r["judges"][j]["verdict"] == r["gold"]["verdict"] for r in mine)
            low, high = wilson(agree, len(mine))
            cells.append(f"{agree}/{len(mine)} ({low:.2f}-{high:.2f})")
        before = sum(r["judges"]["reward model"]["verdict"] == "before" for r in mine)
        lines.append(f"| {kind} ({len(mine)}) | {golds} | " + " | ".join(cells) + f" | {before}/{len(mine)} |")
    lines += ["", "| pair | gold: after - before (95%) | " + " | ".join(f"{j}: after's win rate" for j in judges) + " |",
              "|---|---|" + "---|" * len(judges)]
    for r in rows:
        g = r["gold"]
        cells = [f"{r['judges'][j]['rate']:.2f} [{r['judges'][j]['low']:.2f}, {r['judges'][j]['high']:.2f}] "
                 f"{r['judges'][j]['verdict']}" for j in judges]
        lines.append(f"| {r['pair']} | {g['mean']:+.3f} [{g['low']:+.3f}, {g['high']:+.3f}] {g['verdict']} | "
                     + " | ".join(cells) + " |")
    return "\n".join(lines + [END]) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", type=Path, default=Path("runs/demo"))
    parser.add_argument("--out", type=Path, default=Path("runs/preference-bench"))
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--doc", type=Path)
    args = parser.parse_args()
    from transformers.utils import logging

    logging.set_verbosity_error()
    base = args.base.resolve()
    if not (base / "samples" / "stage1.jsonl").is_file():  # the labelers' noise unit: stage-1 samples' gold spread
        from rlhflab.sample import load_model, run_sampling, sample_to_file

        models, prompts, settings, gold = run_sampling(base)
        model, tokenizer = load_model(models["stage1"])
        sample_to_file(model, tokenizer, prompts, base / "samples" / "stage1.jsonl", settings,
                       model_name=str(models["stage1"]), prompts_name="the run's held-out prompts", gold=gold)
    results = ROOT / args.out / "results.jsonl"
    results.parent.mkdir(parents=True, exist_ok=True)
    done = {r["pair"]: r for r in map(json.loads, results.read_text().splitlines())} if results.is_file() else {}
    healthy = [ROOT / args.out / f"healthy-s{k}" for k in range(args.seeds)]
    hacked = [ROOT / args.out / f"kl0-s{k}" for k in range(args.seeds)]
    pairs = [("kl_coef=0 -> healthy", hacked[k], healthy[k]) for k in range(args.seeds)]
    pairs += [("seed only", healthy[k], healthy[(k + 1) % args.seeds]) for k in range(args.seeds)]
    for kind, before, after in pairs:
        name = f"{before.name} -> {after.name}"
        if name in done:
            continue
        for run, overrides in ((before, {"ppo.kl_coef": "0"} if "kl0" in before.name else {}), (after, {})):
            policy(base, run, int(run.name.rsplit("-s", 1)[1]), overrides)
        verdict, mean, low, high = gold_verdict(samples(before), samples(after))
        row = {"pair": name, "kind": kind, "gold": {"verdict": verdict, "mean": mean, "low": low, "high": high},
               "judges": judge_pair(base, samples(before), samples(after), ROOT / args.out / "studies" /
                                    name.replace(" -> ", "--"))}
        done[name] = row
        with results.open("a") as f:
            f.write(json.dumps(row) + "\n")
        print(json.dumps(row), flush=True)
    if args.doc:
        command = f"python bench/preference_bench.py --base {args.base} --out {args.out} --seeds {args.seeds}"
        replace_section(ROOT / args.doc, START, END, render([done[f"{b.name} -> {a.name}"] for _, b, a in pairs],
                                                            command))


if __name__ == "__main__":
    main()
