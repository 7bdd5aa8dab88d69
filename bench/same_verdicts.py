"""Whether a change that should not move the doctor's verdicts moved any: every labelled run
and log at hand diagnosed by this checkout and by an earlier commit (its source checked out
in a temporary git worktree), and the diagnoses compared field by field.

    python bench/same_verdicts.py --against COMMIT [--smoke]

Read: the faults bench's runs (runs/faults-bench: the zoo's table), the outside-bugs
bench's (runs/outside-faults), the shared real logs (../shared/real_logs: the real-log and
peer tables) and the committed log fixtures (tests/fixtures/logs). With `--smoke`, the
smoke pipeline is also trained by both and its `metrics/ppo.jsonl` (every metric but the
wall-clock `time/*`) and `metrics/eval.json` compared. Exits 1 when anything differs, listing what.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = (ROOT / "runs" / "faults-bench", ROOT / "runs" / "outside-faults", ROOT.parent / "shared" / "real_logs",
           ROOT / "tests" / "fixtures" / "logs")
NOT_LOGS = {"MANIFEST.md", "README.md", "write_fixtures.py", "labels.json"}

# Run by the interpreter of either checkout: prints {log: diagnosis} as JSON.
DIAGNOSE_ALL = """
import json, sys
from pathlib import Path
from rlhflab.doctor.diagnose import diagnosis_json, read_and_diagnose
out = {}
for path in sys.argv[1:]:
    try:
        out[path] = diagnosis_json(read_and_diagnose(Path(path))[1])
    except Exception as err:  # an unreadable log is a verdict too
        out[path] = {"error": type(err).__name__ + ": " + str(err)}
print(json.dumps(out, default=str))
"""


def logs() -> list[str]:
    """Run directories (those with metrics/) and every log file or folder of the log sources."""
    found = []
    for source in SOURCES:
        if source.is_dir():
            runs = source.parent.name == "runs"
            found += [str(p) for p in sorted(source.iterdir())
                      if ((p / "metrics").is_dir() if runs else p.name not in NOT_LOGS)]
    return found


def diagnoses(src: Path, paths: list[str]) -> dict:
    env = {**os.environ, "PYTHONPATH": str(src)}
    result = subprocess.run([sys.executable, "-c", DIAGNOSE_ALL, *paths], env=env, capture_output=True, text=True,
                            cwd=ROOT, check=True)
    return json.loads(result.stdout)


def smoke_metrics(src: Path, out: Path) -> dict:
    """The smoke pipeline's PPO metrics (but wall-clock `time/*`) and held-out evaluation."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    subprocess.run([sys.executable, "-m", "rlhflab.cli", "pipeline", "--preset", "smoke", "--out", str(out)], env=env,
                   cwd=ROOT, check=True, capture_output=True)
    rows = [json.loads(line) for line in (out / "metrics" / "ppo.jsonl").read_text().splitlines() if line.strip()]
    return {"metrics/ppo.jsonl": [{k: v for k, v in row.items() if not k.startswith("time/")} for row in rows],
            "metrics/eval.json": json.loads((out / "metrics" / "eval.json").read_text())}


def differences(before, after, where: str = "") -> list[str]:
    if isinstance(before, dict) and isinstance(after, dict):
        found = []
        for key in sorted(set(before) | set(after), key=str):
            found += differences(before.get(key, "<absent>"), after.get(key, "<absent>"), f"{where}/{key}")
        return found
    if isinstance(before, list) and isinstance(after, list) and len(before) == len(after):
        return [d for i, (b, a) in enumerate(zip(before, after)) for d in differences(b, a, f"{where}[{i}]")]
    return [] if before == after else [f"{where}: {json.dumps(before)[:160]} -> {json.dumps(after)[:160]}"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", required=True, help="the commit before the change")
    parser.add_argument("--smoke", action="store_true", help="also train the smoke pipeline with both")
    args = parser.parse_args()
    paths = logs()
    with tempfile.TemporaryDirectory() as tmp:
        earlier = Path(tmp) / "earlier"
        subprocess.run(["git", "worktree", "add", "--detach", str(earlier), args.against], cwd=ROOT, check=True,
                       capture_output=True)
        try:
            found = differences(diagnoses(earlier / "src", paths), diagnoses(ROOT / "src", paths))
            if args.smoke:
                found += differences(smoke_metrics(earlier / "src", Path(tmp) / "smoke-before"),
                                     smoke_metrics(ROOT / "src", Path(tmp) / "smoke-after"), "smoke")
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(earlier)], cwd=ROOT, check=True)
    print(f"{len(paths)} logs and runs diagnosed by {args.against} and by this checkout"
          + (", and the smoke pipeline trained by both" if args.smoke else "") + f": {len(found)} difference(s)")
    for line in found:
        print("  " + line)
    sys.exit(1 if found else 0)


if __name__ == "__main__":
    main()
