"""The doctor on public logs of real runs (../shared/real_logs, described by its
MANIFEST.md): for each, the format and trainer recognised, the steps understood and the
last one, the metrics mapped and not, the findings, the verdict, and the verdict the
manifest gives.

    python bench/real_logs.py [--logs ../shared/real_logs]

Writes its table to docs/benchmarks.md ("Real logs"). Skips cleanly (exit 0, nothing
written) when the logs are absent: they stay outside the repository.
"""

from __future__ import annotations

import argparse
import re
import time
from pathlib import Path

from benchlib import replace_section
from rlhflab.doctor.diagnose import diagnose
from rlhflab.doctor.formats import LogFormatError, read_log
from rlhflab.doctor.metrics import KNOWN, REWARD_FUNCTION_PREFIX

ROOT = Path(__file__).resolve().parents[1]
START, END = "## Real logs", "<!-- end real logs -->"
_ROW = re.compile(r"^\|\s*`(?P<file>[^`]+)`\s*\|(?P<trainer>[^|]*)\|(?P<model>[^|]*)\|(?P<reading>.*)\|\s*$")


def expected_readings(manifest: Path) -> dict[str, tuple[str, str]]:
    """File -> (expected verdict, the manifest's words): "cannot tell" wherever the
    manifest says so, "no finding" for a run it calls healthy, else a finding."""
    readings = {}
    for line in manifest.read_text(encoding="utf-8").splitlines():
        match = _ROW.match(line)
        if not match:
            continue
        words = match["reading"].strip()
        head = words.split(":", 1)[0].lower()  # the verdict, before the evidence
        if "cannot tell" in words.lower():
            verdict = "cannot_tell"
        elif "healthy" in head:
            verdict = "no_finding"
        else:
            verdict = "finding"
        bold = re.search(r"\*\*([^*]+)\*\*", words)
        readings[match["file"]] = (verdict, bold[1] if bold else words.split("(", 1)[0].strip())
    return readings


def read_one(path: Path) -> dict:
    start = time.perf_counter()
    try:
        table = read_log(path)
    except LogFormatError as err:
        return {"error": str(err)}
    diagnosis = diagnose(table)
    seconds = time.perf_counter() - start
    understood = [n for n in table.series if n in KNOWN or n.startswith(REWARD_FUNCTION_PREFIX)]
    training = [table.series[n] for n in understood if n != "reward/gold_mean"]
    return {
        "format": table.format, "trainer": table.settings.trainer, "steps": diagnosis.steps,
        "last_step": max((s.steps[-1] for s in training if len(s)), default=None),
        "mapped": len(understood), "unknown": len(table.unknown),
        "findings": [f"{f.rule} ({f.severity})" for f in diagnosis.findings],
        "verdict": diagnosis.verdict, "families": diagnosis.families_checked, "seconds": seconds,
    }


def render(rows: list[tuple[str, dict, tuple[str, str]]], command: str) -> str:
    lines = [
        START, "",
        f"Command: `{command}`. Each public log of a real run in `../shared/real_logs` (not in the repository; its "
        "MANIFEST.md gives the source and what a correct reading is), read by `rlhflab doctor` with no flag: the "
        "format and trainer it recognised, the distinct training steps it understood and the last step read, the "
        "canonical metrics it filled and the names it left unread, its findings and verdict, and the manifest's.",
        "",
        "| log | format / trainer | steps (last) | metrics mapped / not | families checked | findings | verdict "
        "| expected | agrees |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, got, (expected, words) in rows:
        if "error" in got:
            lines.append(f"| `{name}` | error: {got['error']} | | | | | | {expected} ({words}) | no |")
            continue
        agrees = "yes" if got["verdict"] == expected else "no"
        lines.append(
            f"| `{name}` | {got['format']} / {got['trainer']} | {got['steps']} ({got['last_step']}) | "
            f"{got['mapped']} / {got['unknown']} | {', '.join(got['families']) or 'none'} | "
            f"{', '.join(got['findings']) or 'none'} | {got['verdict']} | {expected} ({words}) | {agrees} |")
    agree = sum(1 for _, got, (expected, _) in rows if got.get("verdict") == expected)
    lines += ["", f"Verdicts that agree with the manifest: {agree} of {len(rows)}.", "", END]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--logs", type=Path, default=ROOT.parent / "shared" / "real_logs")
    parser.add_argument("--doc", type=Path, default=ROOT / "docs" / "benchmarks.md")
    args = parser.parse_args()
    manifest = args.logs / "MANIFEST.md"
    if not manifest.is_file():
        print(f"skipped: {manifest} not found (the public logs are kept outside the repository)")
        return
    readings = expected_readings(manifest)
    rows = []
    for name in sorted(readings):
        path = args.logs / name
        if not path.exists():
            print(f"skipped {name}: not found")
            continue
        rows.append((name, read_one(path), readings[name]))
        print(name, rows[-1][1], flush=True)
    section = render(rows, "python bench/real_logs.py")
    replace_section(args.doc, START, END, section)
    print(section)


if __name__ == "__main__":
    main()
