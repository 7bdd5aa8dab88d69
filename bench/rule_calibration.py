"""The doctor on its labelled calibration set: for every run, what its label says and what
each candidate signal measured, so that thresholds are fitted on labelled runs with a
stated margin, and checked on runs they were not fitted on.

    python bench/rule_calibration.py [--calibration runs/calibration] [--faults runs/faults-bench]
        [--pipeline runs/bench] [--real ../shared/real_logs] [--doc docs/doctor.md]

Sources, each read from its metrics and the sample files beside them alone (no config, no
checkup), as another trainer's log:
- `--calibration`: bench/calibration.py's TRL GRPO/RLOO/PPO runs, labelled from their gold curves
  (`labels.json`); each read twice: with the callback's held-out columns mapped (HELD_OUT_MAP),
  and without them;
- `--faults`: the faults bench's runs (healthy seeds and the zoo), labelled from their gold
  curves by the same function (a fault whose gold the run does not show: `silent_bug`);
- `--pipeline`: bench/pipeline_targets.py's kl_coef=0 runs (its healthy seeds are the faults
  bench's, trained the same) and its adaptive-KL runs, labelled the same way;
- `--real`: the public real logs with MANIFEST.md's verdicts.
Prints one JSON line per run: the label, the trainer, and the signals; with `--doc`,
writes the per-rule and per-run tables to that file's "Calibration" section.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from benchlib import replace_section
from calibration import label_run
from rlhflab.doctor.diagnose import diagnose
from rlhflab.doctor.formats import read_log
from rlhflab.doctor.formats.mapping import parse_pairs
from rlhflab.doctor.rules import RULES
from rlhflab.doctor.settings import RunSettings
from rlhflab.doctor.signals import baseline, rolling_median, smooth, window
from rlhflab.doctor.table import MetricTable, aligned

ROOT = Path(__file__).resolve().parents[1]
START, END = "<!-- calibration:start -->", "<!-- calibration:end -->"
# A label's family (bench/calibration.py's label_run) -> the rule symptoms that name it.
# A policy made worse by its own updates (gold and proxy falling together) is named by the
# symptoms of a broken update: the update's health, or a policy running away from its reference.
FAMILY_SYMPTOMS = {"reward_hacking": {"reward_hacking"}, "policy_degraded": {"ppo_instability", "exploding_kl"},
                   "mode_collapse": {"mode_collapse"}, "truncation": {"responses"}}
SYMPTOM_OF = {rule.name: rule.symptom for rule in RULES}
# The callback's held-out columns (bench/calibration.py): its gold and its samples' distinct-2.
HELD_OUT_MAP = ["gold=reward/gold_mean", "eval_distinct_2=response/distinct_2"]


def families_found(row: dict) -> list[str]:
    """The label's families that some finding of medium or high severity names."""
    symptoms = {SYMPTOM_OF[f.split(":")[0]] for f in row["findings"] if not f.endswith(":low")
                and f.split(":")[0] in SYMPTOM_OF}
    return [family for family in row["families"] if FAMILY_SYMPTOMS[family] & symptoms]


def smoothed(table: MetricTable, name: str, any_unit: bool = False) -> list[float] | None:
    series = table.get(name, any_unit)
    return smooth(series.values, window(len(series))) if series is not None and len(series) >= 3 else None


def signals(table: MetricTable) -> dict:
    """The numbers the candidate rules compare with their thresholds."""
    out: dict = {"steps": table.steps_read}
    kl_token = smoothed(table, "kl/token_mean")
    kl = smoothed(table, "kl/mean")
    if kl_token:
        out["kl_token_max"] = max(kl_token)
        series = table.get("kl/token_mean")
        medians = rolling_median(series.values, window(len(series)))
        out["kl_token_median_max"] = max(medians) if medians else None
    if kl:
        out["kl_seq_max"] = max(kl)
    length = table.get("response/length_mean")
    if length is not None and len(length) >= 3:
        s = smooth(length.values, window(len(length)))
        start = baseline(length.values, window(len(length)))
        out["length_min_ratio"] = min(s) / start if start else None
        out["length_max_ratio"] = max(s) / start if start else None
    entropy = table.get("policy/entropy", any_unit=True)
    if entropy is not None and len(entropy) >= 3:
        s = smooth(entropy.values, window(len(entropy)))
        start = baseline(entropy.values, window(len(entropy)))
        out["entropy_min_ratio"] = min(s) / start if start else None
    for name, key in (("reward/zero_std_frac", "zero_std_max"), ("response/truncated_frac", "truncated_max")):
        s = smoothed(table, name)
        if s:
            out[key] = max(s)
    share = table.get("text/opening_share")  # OPENING_SHARE_LIMIT, OPENING_SHARE_RISE (from the samples)
    if share is not None and len(share) >= 3:
        w = window(len(share))
        out["opening_share_start"] = baseline(share.values, w)
        out["opening_share_max"] = max(smooth(share.values, w))
        out["samples_per_step"] = statistics.median(table.get("text/samples").values)
    corr = table.get("text/reward_gold_corr")  # docs/metrics.md: the proxy tracking the truth over a step's samples
    if corr is not None and len(corr) >= 3:
        w = window(len(corr))
        out["reward_gold_corr_start"] = baseline(corr.values, w)
        out["reward_gold_corr_end"] = smooth(corr.values, w)[-1]
    grad = table.get("policy/grad_norm")
    if grad is not None and len(grad) >= 4:
        half = grad.values[len(grad) // 2:]
        out["dead_grad_frac_late"] = sum(1 for g in half if abs(g) < 1e-8) / len(half)
    for name, key in (("policy/approxkl", "approxkl_median"), ("policy/clipfrac", "clipfrac_median")):
        series = table.get(name)
        if series is not None and len(series):
            out[key] = statistics.median(series.values)
    approxkl, clipfrac = table.get("policy/approxkl"), table.get("policy/clipfrac")
    if approxkl is not None:
        out["first_approxkl"] = approxkl.values[0]  # FIRST_UPDATE_LIMIT
    if clipfrac is not None:
        out["clipfrac_zero_share"] = sum(v == 0.0 for v in clipfrac.values) / len(clipfrac)  # CLIP_SILENT_SHARE
    kl, coef = table.get("kl/mean"), table.get("kl/coef")
    if kl is not None and coef is not None and len(coef) >= 10 and len(set(coef.values)) > 2:
        kl, coef = aligned(kl, coef)  # CONTROLLER_CORRELATION: beta's changes against the KL before them
        out["controller_correlation"] = statistics.correlation(
            [b - a for a, b in zip(coef.values, coef.values[1:])], list(kl.values[:-1]))
    diagnosis = diagnose(table)
    out["findings"] = [f"{f.rule}:{f.severity}" for f in diagnosis.findings]
    out["verdict"] = diagnosis.verdict
    return out


def render(rows: list[dict], command: str) -> str:
    """The per-rule table (how often each rule fired at medium or high severity on healthy
    and on pathological runs) and the per-run table."""
    healthy = [r for r in rows if r["label"] == "healthy"]
    sick = [r for r in rows if r["label"] == "pathological"]

    def fired(rule: str, runs: list[dict]) -> int:
        return sum(any(f in (f"{rule}:high", f"{rule}:medium") for f in r["findings"]) for r in runs)

    lines = [START, "### Calibration", "",
             f"Command: `{command}`. Every run read from its metrics and the sample files beside them alone (no config, "
             "no checkup), labelled from its "
             "gold curve (bench/calibration.py's label_run, for the TRL runs and rlhflab's), or by MANIFEST.md (real "
             "logs), never by the doctor.", "",
             f"| rule | fired on healthy runs ({len(healthy)}) | fired on pathological runs ({len(sick)}) |",
             "|---|---|---|"]
    lines += [f"| `{rule.name}` | {fired(rule.name, healthy)} | {fired(rule.name, sick)} |" for rule in RULES]
    lines += ["", "| run | label | its truth | verdict | of its family | findings (medium or high) |",
              "|---|---|---|---|---|---|"]
    for r in rows:
        serious = [f.split(":")[0] for f in r["findings"] if not f.endswith(":low")]
        found = f"{len(families_found(r))}/{len(r['families'])}" if r["families"] else "-"
        lines.append(f"| {r['run']} | {r['label']} | {', '.join(r['families']) or '-'} | {r['verdict']} | {found} | "
                     f"{', '.join(serious) or 'none'} |")
    healthy_ok = sum(1 for r in healthy if r["verdict"] != "finding")
    sick_ok = sum(1 for r in sick if r["verdict"] == "finding")
    family_ok = sum(1 for r in sick if not r["families"] or families_found(r))
    family_all = sum(1 for r in sick if len(families_found(r)) == len(r["families"]))
    others = sorted({r["label"] for r in rows} - {"healthy", "pathological"})
    lines += ["", f"Healthy runs without a finding of medium or high severity: {healthy_ok} of {len(healthy)}; "
              f"pathological runs with one: {sick_ok} of {len(sick)}; with one of a family their label names: "
              f"{family_ok} of {len(sick)} (of every family it names: {family_all}). Runs labelled "
              f"{' or '.join(others) or 'otherwise'} count in neither: `no_learning` is a run whose gold neither rose "
              "nor fell, `silent_bug` a run trained with a fault (a zoo fault, or a TRL variant with one) whose gold "
              "the run does not show (the checkup's to find: docs/faults.md).", "",
              f"From gold's best to the end, the proxy (in its own units) moved {proxy_moves(rows, 'reward_hacking')} "
              f"on the runs labelled reward_hacking and {proxy_moves(rows, 'policy_degraded')} on those labelled "
              "policy_degraded.", END]
    return "\n".join(lines) + "\n"


def proxy_change(label: dict) -> float | None:
    """How the proxy moved from gold's best to the end (label_run's trailing means)."""
    start, end = label.get("proxy_at_gold_best"), label.get("proxy_end")
    return end - start if start is not None and end is not None else None


def proxy_moves(rows: list[dict], family: str) -> str:
    """The range of the proxy's move from gold's best to the end over the runs whose label names `family`."""
    moves = sorted({r["proxy_change"] for r in rows if family in r["families"] and r.get("proxy_change") is not None})
    return f"{moves[0]:+.2f} to {moves[-1]:+.2f}" if moves else "(no run)"


def curve_label(run: Path, fault: bool) -> dict:
    """An rlhflab run's label from its gold curve, by bench/calibration.py's label_run (gold
    and distinct-2 of each step's samples, EOS rate for truncation), never by the doctor. A
    zoo fault whose gold the run does not show is a `silent_bug`, not a healthy run."""
    rows = [json.loads(line) for line in (run / "metrics" / "ppo.jsonl").read_text().splitlines() if line.strip()]
    rows = [r for r in rows if "reward/gold_mean" in r]
    history = [{"step": r["step"], "gold": r["reward/gold_mean"], "eval_distinct_2": r.get("response/distinct_2", 1.0),
                "eval_truncated": 1.0 - r.get("response/eos_rate", 1.0)} for r in rows]
    label = label_run(history, [(r["step"], r["reward/proxy_mean"]) for r in rows])
    if fault and label["label"] == "healthy":
        label["label"] = "silent_bug"
    return {"label": label["label"], "families": label["families"], "proxy_change": proxy_change(label)}


def calibration_label(label: dict) -> str:
    """A TRL run's label (labels.json): a run trained with a fault (its variant expects one: beta = 0, a
    30x learning rate, a length reward, cold sampling) whose gold does not show it is a `silent_bug`,
    as a zoo fault's is (curve_label), not a healthy reference."""
    if label["label"] == "healthy" and label.get("expect", "healthy") != "healthy":
        return "silent_bug"
    return label["label"]


def metrics_only(path: Path, mapping=None) -> MetricTable:
    table = read_log(path, mapping)
    table.settings = RunSettings(trainer=table.settings.trainer, kl_coef=table.settings.kl_coef
                                 if table.settings.trainer not in ("rlhflab", "canonical") else None)
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calibration", type=Path, default=ROOT / "runs" / "calibration")
    parser.add_argument("--faults", type=Path, default=ROOT / "runs" / "faults-bench")
    parser.add_argument("--pipeline", type=Path, default=ROOT / "runs" / "bench")
    parser.add_argument("--real", type=Path, default=ROOT.parent / "shared" / "real_logs")
    parser.add_argument("--doc", type=Path, default=None, help="write the tables into this markdown file")
    args = parser.parse_args()
    rows = []
    labels_path = args.calibration / "labels.json"
    if labels_path.is_file():
        for name, label in json.loads(labels_path.read_text()).items():
            log = args.calibration / name / "trainer_state.json"
            run_label = calibration_label(label)
            rows.append({"run": f"calibration/{name}", "label": run_label, "families": label["families"],
                         "proxy_change": proxy_change(label),
                         **signals(metrics_only(log, parse_pairs(HELD_OUT_MAP)))})
            # The same run as a log without a gold column, as most users' logs are.
            rows.append({"run": f"calibration/{name} (no gold)", "label": run_label,
                         "families": label["families"], **signals(metrics_only(log))})
    if args.faults.is_dir():
        for run in sorted(p for p in args.faults.iterdir() if (p / "metrics" / "ppo.jsonl").is_file()):
            healthy = run.name.startswith("healthy")
            rows.append({"run": f"faults/{run.name}", **curve_label(run, fault=not healthy),
                         **signals(metrics_only(run))})
    if args.pipeline.is_dir():
        for run in sorted(p for p in args.pipeline.iterdir() if (p / "metrics" / "ppo.jsonl").is_file()):
            if not run.name.endswith("-kl0"):  # its healthy seeds are the faults bench's, trained the same
                continue
            rows.append({"run": f"pipeline/{run.name}", **curve_label(run, fault=False),
                         **signals(metrics_only(run))})
            # Adaptive KL from a beta 4x off and the inverted
            # controller (bench/pipeline_targets.py for seed 0, bench/controller_check.py after).
            for adaptive in sorted((args.pipeline / run.name.replace("-kl0", "-adaptive")).glob("*/metrics/ppo.jsonl")):
                adaptive = adaptive.parents[1]
                label = curve_label(adaptive, fault=not adaptive.name.startswith("beta"))
                rows.append({"run": f"pipeline/{adaptive.parent.name}/{adaptive.name}", **label,
                             **signals(metrics_only(adaptive))})
    if (args.real / "MANIFEST.md").is_file():
        verdicts = {"verl_ppo_qwen2.5-0.5b_gsm8k_resp256.log": ("healthy", []),
                    "trl_grpo_vlm_qwen2.5vl-3b_collapse_run_terminal.md": ("pathological",
                                                                            ["mode_collapse", "reward_hacking"]),
                    "dschat_step3_opt1.3b_opt350m.log": ("cannot_tell", [])}
        for name, (label, families) in verdicts.items():
            if (args.real / name).is_file():
                rows.append({"run": f"real/{name}", "label": label, "families": families,
                             **signals(read_log(args.real / name))})
    for row in rows:
        print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in row.items()}))
    if args.doc is not None:
        replace_section(args.doc, START, END, render(rows, "python bench/rule_calibration.py --calibration "
                                                           "runs/calibration --faults runs/faults-bench --pipeline runs/bench"))


if __name__ == "__main__":
    main()
