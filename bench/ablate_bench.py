"""`rlhflab ablate` scored on the fault zoo: does the experiment confirm the right cause?

    python bench/ablate_bench.py [--base runs/demo] [--out runs/ablate-bench] [--top 2] [--seeds 3]
                                 [--jobs 1] [--only FAULT ...] [--doc docs/benchmarks.md] [--render]

Each fault is run once on the base run's stages (demo size, from the stage its keys touch,
as the faults bench does), then ablated: the doctor's top-K fixes, one arm per non-default
component, N seeds each against a control. Setting faults (a config change only) are right
when the ablation confirms a cure whose component is the fault's; code faults (a replaced
component) when no setting cures them and the component's arm does.

False cures: a pool of sick seeds (one fault at its N control seeds plus more, all from the
same stages); each resampled "ablation" takes N control seeds and N other seeds as an arm that
changes nothing, and is ranked by the same code. A cure called there is a false cure.

Results go to OUT/results.jsonl as each fault finishes (a rerun skips those already there;
each ablation resumes), and the table to docs/benchmarks.md with --doc.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

from benchlib import replace_section, wilson
from rlhflab.ablate import AblateError, SeedTask, ablate, run_seed
from rlhflab.config import config_from_run
from rlhflab.doctor.arms import Arm, rank_arms
from rlhflab.doctor.diagnose import read_and_diagnose
from rlhflab.doctor.report import headline_component
from rlhflab.faults.zoo import FAULTS, components_for, with_fault
from rlhflab.faults_bench import first_stage
from rlhflab.runs import RunDir
from rlhflab.verify import rerun

ROOT = Path(__file__).resolve().parent.parent
START, END = "<!-- ablate-bench:start -->", "<!-- ablate-bench:end -->"
POOL_FAULT = "kl_coef_zero"


def sick_run(base: Path, out: Path, fault) -> Path:
    if (out / "stage3_policy").is_dir():
        return out
    config = with_fault(config_from_run(base), fault.name)
    rerun(config, RunDir(base), RunDir(out), first_stage(fault), components_for(config), show_progress=False)
    return out


def score(fault, result, run: Path) -> dict:
    ranking = result.ranking
    confirmed = ranking.confirmed
    setting = not fault.code
    doctor_first = headline_component(read_and_diagnose(run)[1])
    if setting:
        settings = [o for o in confirmed if o.arm.kind != "component"]
        right = ranking.verdict == "confirmed" and settings[0].arm.component == fault.component
        said = ", ".join(settings[0].arm.changes) if settings else ranking.verdict
    else:
        right = ranking.verdict == "no setting cures it" and any(o.arm.kind == "component" for o in confirmed)
        said = ranking.why
    return {"fault": fault.name, "kind": "setting" if setting else "code", "component": fault.component,
            "verdict": ranking.verdict, "said": said, "right": right, "doctor_first": doctor_first,
            "arms": {o.arm.name: o.comparison.verdict + (" (confirmed)" if o.confirmed else "")
                     for o in ranking.outcomes},
            "control_counts": ranking.control_counts, "seeds": result.plan.seeds}


def false_cures(base_run: Path, pool: int, draws: int, seeds: int, seed: int = 0) -> dict:
    """Ablations whose arm changes nothing, resampled from `pool` sick seeds."""
    root = base_run / "ablate" / "control"
    for s in range(pool):
        out = root / f"seed{s}"
        run_seed(SeedTask(base_run, out, (), s, True, None))
    tables = [read_and_diagnose(root / f"seed{s}")[0] for s in range(pool)]
    rng = random.Random(seed)
    cures, uses = 0, [0] * pool
    for _ in range(draws):
        picked = rng.sample(range(pool), 2 * seeds)
        for i in picked:
            uses[i] += 1
        control, arm = [tables[i] for i in picked[:seeds]], [tables[i] for i in picked[seeds:]]
        ranking = rank_arms(control, [(Arm("nothing", "given", ("ppo.seed=other",), ""), arm)])
        cures += ranking.verdict == "confirmed"
    return {"fault": POOL_FAULT, "pool": pool, "draws": draws, "seeds": seeds, "false_cures": cures,
            "uses_min": min(uses), "uses_max": max(uses)}


def render(rows: list[dict], null: dict | None, command: str) -> str:
    setting = [r for r in rows if r["kind"] == "setting"]
    code = [r for r in rows if r["kind"] == "code"]
    k = sum(r["right"] for r in setting)
    low, high = wilson(k, len(setting))
    missing = [f.name for f in FAULTS if f.name not in {r["fault"] for r in rows}]
    lines = [START, "## Ablation: the confirmed cause on the fault zoo", "",
             f"Command: `{command}`. Measured on a 2-core CPU, demo size, each fault on the demo run's stages 1-2.", "",
             f"- setting faults: the confirmed cause is right for {k}/{len(setting)} ({low:.2f}-{high:.2f}, Wilson 95%; "
             "target: at least 90%)",
             f"- code faults: 'no setting cures it' and the component's arm cures: {sum(r['right'] for r in code)}/"
             f"{len(code)}"]
    if missing:
        lines.append(f"- not measured yet: {', '.join(missing)}")
    if null:
        lo, hi = wilson(null["false_cures"], null["draws"])
        lines.append(f"- false cures: {null['false_cures']} of {null['draws']} ablations whose arm changes nothing "
                     f"({lo:.2f}-{hi:.2f}), resampled from {null['pool']} sick seeds of {null['fault']} "
                     f"({null['seeds']} a side; each seed used in {null['uses_min']}-{null['uses_max']} of them)")
    lines += ["", "| fault | kind | component | doctor's first cause | ablation's verdict | said | right | arms | seconds |",
              "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        arms = "; ".join(f"{name}: {v}" for name, v in r["arms"].items())
        lines.append(f"| {r['fault']} | {r['kind']} | {r['component']} | {r['doctor_first'] or '-'} | {r['verdict']} "
                     f"| {r['said']} | {'yes' if r['right'] else 'no'} | {arms} | {r['seconds']} |")
    lines.append(END)
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", type=Path, default=ROOT / "runs" / "demo")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "ablate-bench")
    parser.add_argument("--top", type=int, default=2)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--pool", type=int, default=12)
    parser.add_argument("--draws", type=int, default=20)
    parser.add_argument("--only", nargs="*")
    parser.add_argument("--doc", type=Path)
    parser.add_argument("--render", action="store_true", help="Write the doc from the results so far; train nothing.")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    results = args.out / "results.jsonl"
    done = {json.loads(line)["fault"]: json.loads(line) for line in results.read_text().splitlines()} \
        if results.is_file() else {}
    faults = sorted(FAULTS, key=lambda f: bool(f.code))  # setting faults first
    null_path = args.out / "false_cures.json"
    for fault in [] if args.render else faults:
        if fault.code and not args.only and not null_path.is_file():  # the pool after the setting faults
            pool_run = args.out / POOL_FAULT
            null_path.write_text(json.dumps(false_cures(pool_run, args.pool, args.draws, args.seeds)) + "\n")
        if (args.only and fault.name not in args.only) or fault.name in done:
            continue
        start = time.perf_counter()
        run = sick_run(args.base, args.out / fault.name, fault)
        try:
            result = ablate(run, args.top, args.seeds, jobs=args.jobs, resume=True, show_progress=False)
            row = score(fault, result, run)
        except AblateError as err:  # no finding with a setting to change: counted, not right
            row = {"fault": fault.name, "kind": "code" if fault.code else "setting", "component": fault.component,
                   "verdict": "nothing to ablate", "said": str(err).split(": ", 1)[1], "right": False,
                   "doctor_first": headline_component(read_and_diagnose(run)[1]), "arms": {}, "control_counts": {},
                   "seeds": []}
        row["seconds"] = round(time.perf_counter() - start)
        done[fault.name] = row
        with open(results, "a") as f:
            f.write(json.dumps(row) + "\n")
        print(json.dumps(row), flush=True)
    null = json.loads(null_path.read_text()) if null_path.is_file() else None
    if args.doc:
        rows = [done[f.name] for f in faults if f.name in done]
        command = "python bench/" + " ".join(Path(a).name if a.endswith(".py") else a for a in sys.argv
                                            if a != "--render")
        replace_section(args.doc, START, END, render(rows, null, command))
        print(render(rows, null, command))


if __name__ == "__main__":
    main()
