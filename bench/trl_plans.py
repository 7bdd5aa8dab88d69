"""`rlhflab doctor LOG --plan` scored on TRL's own runs of the world: does the plan, run as a
TRL user would run it, confirm the right cause where the log alone ranks the wrong one?

    python bench/trl_plans.py --base runs/demo [--out runs/trl-plans] [--only CASE ...] [--doc docs/benchmarks.md]

Each case is one wrong setting over bench/calibration.py's healthy run of a trainer (TRL's
GRPOTrainer in .venv, TRL 1.12's PPOTrainer in .venv-trl), trained once by bench/trl_world.py
with TRL's own flags. Then, as a user would: `rlhflab doctor` reads its trainer_state.json
(gold mapped in) and writes the plan for the top 2 causes, 3 seeds each, from the launch
command; every planned command runs unchanged (TRL's HfArgumentParser parses its flags); the
plan's own `rlhflab compare` ranks the arms. Right: the confirmed arm is the one that changes
the wrong setting. Against it, the log alone: the doctor's first-ranked cause. Each run is
also labelled from its held-out gold (calibration.label_run), never from the doctor.

Results go to OUT/results.jsonl as each case finishes (a rerun skips the cases there, and a
planned run whose directory holds its label), the table to the doc with --doc.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from benchlib import replace_section, wilson

ROOT = Path(__file__).resolve().parent.parent
START, END = "<!-- trl-plans:start -->", "<!-- trl-plans:end -->"
PYTHON = {"grpo": Path(sys.executable), "ppo": ROOT / ".venv-trl" / "bin" / "python"}
RLHFLAB = Path(sys.executable).with_name("rlhflab")
TOP, SEEDS = 2, 3


@dataclass(frozen=True)
class Case:
    """One wrong setting of a TRL run: the flags that make it, the config field they break
    (an arm that changes it is the right cure) and the doctor's component for that field."""

    name: str
    trainer: str
    flags: tuple[str, ...]
    wrong: str
    component: str
    steps: int


# The healthy run is calibration's (GRPO: beta 0.04, lr 1e-4; PPO: kl_coef 0.05, lr 1e-4). Zero
# KL at the healthy 1e-4 stays healthy over 250 GRPO steps and 60 PPO steps: the penalty
# matters once steps are larger, so the zero-KL cases run at 3e-4, where the healthy
# penalty keeps gold (GRPO, 250 steps: gold ends +0.18 with beta 0.04, -0.53 without; PPO,
# 150 steps: +0.62 with kl_coef 0.05, -0.78 without). 30x the rate is sick within 60 steps.
CASES = (
    Case("grpo-zero-kl", "grpo", ("--beta", "0", "--learning_rate", "3e-4"), "beta", "kl_control", 250),
    Case("grpo-lr30x", "grpo", ("--learning_rate", "3e-3"), "learning_rate", "ppo_hyperparameters", 60),
    Case("ppo-zero-kl", "ppo", ("--kl_coef", "0", "--learning_rate", "3e-4"), "kl_coef", "kl_control", 150),
    Case("ppo-lr30x", "ppo", ("--learning_rate", "3e-3"), "learning_rate", "ppo_hyperparameters", 60),
)
EVAL_EVERY = 10


def launch_command(case: Case, base: Path) -> str:
    """The case's launch command, as a user would type it."""
    python = PYTHON[case.trainer].relative_to(ROOT) if PYTHON[case.trainer].is_relative_to(ROOT) \
        else PYTHON[case.trainer]
    return shlex.join([str(python), "bench/trl_world.py", case.trainer, "--base", str(base), "--steps",
                       str(case.steps), "--eval-every", str(EVAL_EVERY), *case.flags])


def run_shell(command: str) -> None:
    done = subprocess.run(command, shell=True, cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{command}\n{done.stderr[-3000:]}")


def label_of(run_dir: Path) -> str:
    label = json.loads((ROOT / run_dir / "label.json").read_text())
    return label["label"] + (f" ({', '.join(label['families'])})" if label["families"] else "")


def run_case(case: Case, base: Path, out: Path) -> dict:
    from rlhflab.doctor.diagnose import read_and_diagnose
    from rlhflab.doctor.formats.mapping import parse_map_options
    from rlhflab.doctor.report import headline_component

    start = time.perf_counter()
    command = launch_command(case, base)
    sick = out / case.name / "run"
    if not (ROOT / sick / "label.json").is_file():
        run_shell(f"{command} --seed 0 --output_dir {shlex.quote(str(sick))}")
    log = sick / "trainer_state.json"
    maps = ["gold=reward/gold_mean"]
    doctor_first = headline_component(read_and_diagnose(ROOT / log, parse_map_options(maps))[1])
    planning = subprocess.run(
        [str(RLHFLAB), "doctor", str(log), "--map", maps[0], "--plan", "--top", str(TOP), "--seeds", str(SEEDS),
         "--plan-out", str(out / case.name / "ablation"), "--command", command, "--json"],
        cwd=ROOT, capture_output=True, text=True)
    if planning.returncode == 2:
        return {"case": case.name, "trainer": case.trainer, "wrong": case.wrong, "component": case.component,
                "doctor_first": doctor_first, "sick": label_of(sick), "verdict": "no plan",
                "said": planning.stdout.strip() or planning.stderr.strip(), "right": False, "arms": {},
                "seconds": round(time.perf_counter() - start)}
    plan = json.loads(planning.stdout)
    for run in plan["runs"]:
        if not (ROOT / run["out"] / "label.json").is_file():
            run_shell(run["command"])
    compare = plan["compare"].replace("rlhflab compare ", f"{shlex.quote(str(RLHFLAB))} compare --json ", 1)
    ranked = subprocess.run(compare, shell=True, cwd=ROOT, capture_output=True, text=True)
    ranking = json.loads(ranked.stdout)
    confirmed = [a["arm"]["name"] for a in ranking["arms"] if a["confirmed"]]
    changes = {arm: changes for arm, changes in plan["arms"].items()}
    said = ", ".join(changes.get(confirmed[0], [confirmed[0]])) if confirmed else ranking["verdict"]
    right = ranking["verdict"] == "confirmed" and any(
        c.split("=", 1)[0] == case.wrong for c in changes.get(confirmed[0], []))
    labels = {arm: [label_of(Path(r["out"])) for r in plan["runs"] if r["arm"] == arm] for arm in plan["arms"]}
    return {"case": case.name, "trainer": case.trainer, "wrong": case.wrong, "component": case.component,
            "doctor_first": doctor_first, "sick": label_of(sick), "checked_by": plan["checked_by"],
            "check_errors": plan["check_errors"], "verdict": ranking["verdict"], "said": said, "right": right,
            "arms": {a["arm"]["name"]: a["verdict"] + (" (confirmed)" if a["confirmed"] else "")
                     for a in ranking["arms"]},
            "gold_labels": labels, "seconds": round(time.perf_counter() - start)}


def training_seconds(out: Path, case: str) -> int:
    """The case's training time: its runs' trainer.train() wall time, from their labels."""
    return round(sum(json.loads(p.read_text())["seconds"] for p in (ROOT / out / case).rglob("label.json")))


def render(rows: list[dict], command: str, out: Path) -> str:
    right = sum(r["right"] for r in rows)
    first = sum(r["doctor_first"] == r["component"] for r in rows)
    lines = [START, "## Ablation plans for TRL's own runs of the world", "",
             f"Command: `{command}`. Measured on a 2-core CPU; each case one wrong setting over bench/calibration.py's "
             f"healthy run, its plan the doctor's top {TOP} causes with {SEEDS} seeds each, every planned command run "
             "unchanged by bench/trl_world.py (TRL's HfArgumentParser parses its flags), ranked by the plan's own "
             "`rlhflab compare`.", "",
             f"- the ablation's confirmed cause is the wrong setting: {right}/{len(rows)} "
             f"({wilson(right, len(rows))[0]:.2f}-{wilson(right, len(rows))[1]:.2f}, Wilson 95%)",
             f"- the log alone, the doctor's first-ranked cause is the wrong setting's component: {first}/{len(rows)}",
             "",
             "| case | trainer | wrong setting | gold label of the run | doctor's first cause (log alone) | "
             "ablation's verdict | confirmed | right | arms | gold labels per arm (seeds 0-2) | training seconds |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        arms = "; ".join(f"{k}: {v}" for k, v in r["arms"].items())
        labels = "; ".join(f"{arm}: {', '.join(x.split(' ')[0] for x in found)}"
                           for arm, found in r.get("gold_labels", {}).items())
        lines.append(f"| {r['case']} | {r['trainer']} | {r['wrong']} ({r['component']}) | {r['sick']} | "
                     f"{r['doctor_first']}{'' if r['doctor_first'] == r['component'] else ' (wrong)'} | "
                     f"{r['verdict']} | {r['said']} | {'yes' if r['right'] else 'no'} | {arms} | {labels} | "
                     f"{training_seconds(out, r['case'])} |")
    return "\n".join(lines + [END]) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", type=Path, default=Path("runs/demo"), help="an rlhflab run (stage1_lm, stage2_rm)")
    parser.add_argument("--out", type=Path, default=Path("runs/trl-plans"))
    parser.add_argument("--only", nargs="*", choices=[c.name for c in CASES])
    parser.add_argument("--doc", type=Path)
    args = parser.parse_args()
    if not PYTHON["ppo"].is_file() and (args.only is None or any(n.startswith("ppo") for n in args.only)):
        parser.error(f"TRL 1.12's PPO needs {PYTHON['ppo']}: make .venv-trl/.installed")
    results_path = ROOT / args.out / "results.jsonl"
    results_path.parent.mkdir(parents=True, exist_ok=True)
    done = {r["case"]: r for r in map(json.loads, results_path.read_text().splitlines())} \
        if results_path.is_file() else {}
    for case in CASES:
        if case.name in done or (args.only and case.name not in args.only):
            continue
        done[case.name] = run_case(case, args.base, args.out)
        with results_path.open("a") as f:
            f.write(json.dumps(done[case.name]) + "\n")
        print(json.dumps(done[case.name]), flush=True)
    rows = [done[c.name] for c in CASES if c.name in done]
    if args.doc:
        command = f"python bench/trl_plans.py --base {args.base} --out {args.out} --doc {args.doc}"
        replace_section(ROOT / args.doc, START, END, render(rows, command, args.out))


if __name__ == "__main__":
    main()
