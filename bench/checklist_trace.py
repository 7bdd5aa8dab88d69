"""Which tests run each statement of the doctor: the source of the checklist's traced rows
(docs/checklist.md), and their check.

Runs the doctor's tests (or those named) with a line tracer on src/rlhflab/doctor, keeps the
tests that executed each line, then checks every traced row of the checklist: at least one
test it cites must run one of its statement's lines. `--rows NAME...` prints rows for
functions (e.g. a new one) from the trace: each statement with the two tests that run it
and execute the fewest other lines of the doctor (the most specific), or "open: no test runs it".

    python bench/checklist_trace.py [--out runs/checklist-trace.json] [--tests tests/...]
    python bench/checklist_trace.py --trace runs/checklist-trace.json --check
    python bench/checklist_trace.py --trace runs/checklist-trace.json --rows doctor.rules.kl.kl_negative

The tracing run takes about ten minutes on two cores (the tests that train included); run
it alone.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
import threading
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCTOR = ROOT / "src" / "rlhflab" / "doctor"
sys.path.insert(0, str(ROOT / "tests"))

from helpers.statement_graph import default_pipeline, statement_key  # noqa: E402

# The tests that exercise the doctor: its readers, rules, causes, report and live watch.
DOCTOR_TESTS = [
    "tests/test_doctor_follow.py", "tests/test_doctor_formats.py", "tests/test_doctor_plan.py",
    "tests/test_doctor_rules.py", "tests/test_trainer_logs.py", "tests/test_impossible_numbers.py",
    "tests/test_excuses.py", "tests/test_log_robustness.py", "tests/test_reader_steps.py",
    "tests/test_calibration_labels.py", "tests/test_name_resolver.py", "tests/test_samples.py",
    "tests/test_console_runs.py", "tests/test_notebook_table.py", "tests/test_wandb_run.py",
    "tests/test_interchange.py", "tests/test_component_graph.py", "tests/test_trainer_dialects.py",
    "tests/test_rated_truth.py", "tests/test_cli_snapshots.py", "tests/test_doctor_verify.py",
    "tests/test_pipeline.py", "tests/test_integrations.py", "tests/test_refusals.py",
]
TRACED = re.compile(r"`(tests/[a-z_0-9/]+\.py::[a-z_0-9]+)`")


class LineTrace:
    """A pytest plugin: the doctor's lines each test's call executes."""

    def __init__(self) -> None:
        self.hits: dict[str, set[str]] = defaultdict(set)
        self.current: str | None = None

    def _trace(self, frame, event, arg):
        if not frame.f_code.co_filename.startswith(str(DOCTOR)):
            return None

        def local(frame, event, arg):
            if event == "line" and self.current:
                self.hits[f"{frame.f_code.co_filename}:{frame.f_lineno}"].add(self.current)
            return local
        return local

    def pytest_runtest_call(self, item):
        self.current = item.nodeid.split("[")[0]
        sys.settrace(self._trace)
        threading.settrace(self._trace)

    def pytest_runtest_teardown(self, item):
        sys.settrace(None)
        threading.settrace(None)
        self.current = None


def trace(tests: list[str]) -> dict[str, list[str]]:
    import pytest

    plugin = LineTrace()
    pytest.main(["-q", "-p", "no:cacheprovider", *tests], plugins=[plugin])
    return {line: sorted(names) for line, names in plugin.hits.items()}


def _statements(function) -> dict[str, set[int]]:
    lines: dict[str, set[int]] = defaultdict(set)

    def walk(body):
        for node in body:
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
                continue
            lines[statement_key(node)].add(node.lineno)
            for part in ("body", "orelse", "handlers", "finalbody"):
                walk(getattr(node, part, None) or [])

    walk(function.node.body)
    return lines


def _path(function) -> str:
    base = ROOT / "src" / Path(*function.module.split("."))
    return str(base.with_suffix(".py") if base.with_suffix(".py").is_file() else base / "__init__.py")


def runners(hits: dict[str, list[str]], function, statement: str) -> set[str]:
    path = _path(function)
    return {t for line in _statements(function)[statement] for t in hits.get(f"{path}:{line}", [])}


def rows(hits: dict[str, list[str]], names: list[str]) -> list[str]:
    graph = {f.name: f for f in default_pipeline()}
    size = Counter(t for tests in hits.values() for t in tests)
    out = []
    for name in names:
        out.append(f"## {name}")
        for statement in _statements(graph[name]):
            tests = sorted(runners(hits, graph[name], statement), key=lambda t: (size[t], t))[:2]
            held = (", ".join(f"`{t}`" for t in tests) + " (run by; the doctor's output asserted)") if tests else \
                "open: no test runs it"
            out.append(f"| `{name}` | `{statement.replace('|', chr(92) + '|')}` | {held} |")
    return out


def check(hits: dict[str, list[str]]) -> list[str]:
    """Traced rows whose cited tests no longer run their statement."""
    from test_invariant_checklist import checklist

    graph = {f.name: f for f in default_pipeline()}
    stale = []
    for (function, statement), held in checklist().items():
        if "(run by;" not in held:
            continue
        cited = set(TRACED.findall(held))
        if not cited & runners(hits, graph[function], statement):
            stale.append(f"{function}: `{statement}`: {sorted(cited)} no longer run it")
    return stale


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tests", nargs="*", default=DOCTOR_TESTS)
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "checklist-trace.json")
    parser.add_argument("--trace", type=Path, help="a trace written before (no tests run)")
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--rows", nargs="*", default=None)
    args = parser.parse_args()
    if args.trace:
        hits = json.loads(args.trace.read_text())
    else:
        hits = trace(args.tests)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(hits))
        print(f"{len(hits)} lines of the doctor traced: {args.out}")
    if args.rows:
        print("\n".join(rows(hits, args.rows)))
    if args.check:
        stale = check(hits)
        print("\n".join(stale) or "every traced row's tests run its statement")
        sys.exit(1 if stale else 0)


if __name__ == "__main__":
    main()
