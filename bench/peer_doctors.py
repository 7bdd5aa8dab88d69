"""rlhflab's doctor beside a peer tool, rldoctor 0.2.0 (PyPI; a bench extra), on every
public log of ../shared/real_logs (scored against its MANIFEST.md reading) and on the
committed log fixtures whose writer states the run they describe (scored against that).

    python bench/peer_doctors.py [--logs ../shared/real_logs] [--doc docs/benchmarks.md]

Each tool's verdict: a finding (rlhflab: medium or high severity; rldoctor: a detector at
WARNING or CRITICAL), no finding (rldoctor: OK or INFO), cannot tell (rlhflab's own verdict;
rldoctor: every detector SKIPPED), or unreadable (the tool could not read the file). Steps
are those each tool says it read. Grouped by trainer family and file kind.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

from benchlib import replace_section
from real_logs import expected_readings
from rlhflab.doctor.diagnose import diagnose
from rlhflab.doctor.formats import LogFormatError, read_log

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "logs"
START, END = "## Peer doctors", "<!-- end peer doctors -->"
# Committed fixtures whose writer (tests/fixtures/logs/write_fixtures.py) states the run:
# file -> (family, file kind, expected verdict, what the writer says).
FIXTURE_READINGS = {
    "verl_console_early.log": ("veRL", "console", "no_finding", "a synthetic healthy run"),
    "verl_console_late.log": ("veRL", "console", "finding", "a GRPO run with KL as a loss whose KL runs away"),
    "openrlhf_wandb.csv": ("OpenRLHF", "W&B CSV", "finding", "length blows up while the KL climbs fast"),
    "trl_ppo_legacy_tensorboard": ("TRL PPO 0.x", "TensorBoard", "finding", "an adaptive KL controller whose KL "
                                                                          "explodes"),
    "dschat_step3.log": ("DeepSpeed-Chat", "console", "cannot_tell", "no KL, entropy or length logged"),
    "own_loop_nano_aha.jsonl": ("own loop", "JSONL", "no_finding", "a synthetic healthy run (nano-aha-moment's "
                                                                  "names)"),
    "own_loop_kl_runaway.jsonl": ("own loop", "JSONL", "finding", "reward saturates while the KL grows 1000-fold"),
}
# The real logs' family and file kind, by file name.
REAL_GROUPS = {
    "verl_": ("veRL", "console"), "dschat_": ("DeepSpeed-Chat", "console"), "tinker_": ("own loop", "JSONL"),
    "trl0.24_ppo_qwen2.5-1.5b_math_training_metrics.csv": ("own loop", "CSV"),
    "trl0.24_": ("TRL", "trainer_state"), "trl_grpo_chaos": ("TRL", "trainer_state"),
    "trl_grpo_vlm": ("TRL", "console"),
}


def rlhflab_reading(path: Path) -> tuple[str, int]:
    try:
        table = read_log(path)
    except LogFormatError:
        return "unreadable", 0
    return diagnose(table).verdict, table.steps_read


def rldoctor_reading(path: Path) -> tuple[str, int]:
    tool = shutil.which("rldoctor", path=str(Path(sys.executable).parent)) or shutil.which("rldoctor")
    if tool is None:
        raise SystemExit("rldoctor is not installed: pip install -e '.[bench]'")
    done = subprocess.run([tool, "diagnose", str(path), "-f", "json", "--no-color"], capture_output=True, text=True,
                          timeout=300)
    try:
        report = json.loads(done.stdout)
    except json.JSONDecodeError:
        return "unreadable", 0
    worst = report.get("worst_severity", "SKIPPED")
    verdict = {"WARNING": "finding", "CRITICAL": "finding", "OK": "no_finding", "INFO": "no_finding"}.get(
        worst, "cannot_tell")
    return verdict, int(report.get("run", {}).get("n_steps") or 0)


def group_of(name: str) -> tuple[str, str]:
    return next((group for prefix, group in REAL_GROUPS.items() if name.startswith(prefix)), ("other", "other"))


def rows_for(logs: Path | None) -> list[dict]:
    cases = []
    if logs is not None and (logs / "MANIFEST.md").is_file():
        for name, (verdict, words) in sorted(expected_readings(logs / "MANIFEST.md").items()):
            if (logs / name).exists():
                cases.append((logs / name, "real log", *group_of(name), verdict, words))
    for name, (family, kind, verdict, words) in FIXTURE_READINGS.items():
        cases.append((FIXTURES / name, "fixture", family, kind, verdict, words))
    rows = []
    for path, source, family, kind, expected, words in cases:
        ours, our_steps = rlhflab_reading(path)
        theirs, their_steps = rldoctor_reading(path)
        row = {"log": path.name, "source": source, "family": family, "kind": kind, "expected": expected,
               "reading": words, "rlhflab": ours, "rlhflab_steps": our_steps, "rldoctor": theirs,
               "rldoctor_steps": their_steps}
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def render(rows: list[dict]) -> str:
    def right(tool: str, rs: list[dict]) -> int:
        return sum(r[tool] == r["expected"] for r in rs)

    groups: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        groups.setdefault((r["family"], r["kind"]), []).append(r)
    lines = [START, "", "Command: `python bench/peer_doctors.py` (rldoctor 0.2.0 from PyPI, a bench extra). Every public "
             "log of ../shared/real_logs, scored against its MANIFEST.md reading, and the committed fixtures whose "
             "writer states the run they describe. A verdict is right when it is the expected one: a finding (rlhflab: "
             "medium or high; rldoctor: WARNING or CRITICAL), no finding (rldoctor: OK or INFO), cannot tell "
             "(rldoctor: every detector skipped), or unreadable. The shared logs are a check, not the target: the "
             "fixtures of own loops and the tests' generated logs are where the resolver was built.", "",
             f"- right verdicts: rlhflab {right('rlhflab', rows)} of {len(rows)}, rldoctor "
             f"{right('rldoctor', rows)} of {len(rows)}", "",
             "| trainer family | file kind | logs | rlhflab right | rldoctor right | rldoctor unreadable |",
             "|---|---|---|---|---|---|"]
    for (family, kind), rs in sorted(groups.items()):
        lines.append(f"| {family} | {kind} | {len(rs)} | {right('rlhflab', rs)} | {right('rldoctor', rs)} | "
                     f"{sum(r['rldoctor'] == 'unreadable' for r in rs)} |")
    lines += ["", "| log | source | expected | rlhflab (steps) | rldoctor (steps) |", "|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| `{r['log']}` | {r['source']}: {r['family']}, {r['kind']} | {r['expected']} ({r['reading']}) | "
                     f"{r['rlhflab']} ({r['rlhflab_steps']}) | {r['rldoctor']} ({r['rldoctor_steps']}) |")
    return "\n".join(lines + ["", END])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--logs", type=Path, default=ROOT.parent / "shared" / "real_logs")
    parser.add_argument("--doc", type=Path, default=None)
    args = parser.parse_args()
    rows = rows_for(args.logs if args.logs.is_dir() else None)
    if args.doc is not None:
        replace_section(args.doc, START, END, render(rows))


if __name__ == "__main__":
    main()
