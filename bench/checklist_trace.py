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
    python bench/checklist_trace.py --mutate 30 [--seed 0]

`--mutate N` measures how much a traced row holds: for N traced `if` statements drawn at
random, it turns the condition's first comparison around (`<` into `>=`, `==` into `!=`,
...), runs the tests the row cites, and counts the mutants they kill.

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


FLIPS = [(" <= ", " > "), (" >= ", " < "), (" == ", " != "), (" != ", " == "), (" < ", " >= "), (" > ", " <= ")]


def mutate(n: int, seed: int) -> tuple[int, list[str]]:
    """(killed, lines): N traced `if` statements with a comparison, each turned around in
    its source and its cited tests run against it; the file restored after each."""
    import random
    import subprocess

    from test_invariant_checklist import checklist

    graph = {f.name: f for f in default_pipeline()}
    candidates = []
    for (function, statement), held in sorted(checklist().items()):
        if "(run by;" in held and statement.startswith("if ") and any(a in statement for a, _ in FLIPS):
            candidates.append((function, statement, sorted(set(TRACED.findall(held)))))
    killed, lines = 0, []
    for function, statement, tests in random.Random(seed).sample(candidates, min(n, len(candidates))):
        path = Path(_path(graph[function]))
        source = path.read_text(encoding="utf-8")
        number = min(_statements(graph[function])[statement]) - 1
        rows = source.splitlines(keepends=True)
        old, new = next((a, b) for a, b in FLIPS if a in rows[number])
        rows[number] = rows[number].replace(old, new, 1)
        try:
            path.write_text("".join(rows), encoding="utf-8")
            run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *tests],
                                 cwd=ROOT, capture_output=True, text=True, timeout=600)
        finally:
            path.write_text(source, encoding="utf-8")
        dead = run.returncode != 0
        killed += dead
        lines.append(f"{'killed' if dead else 'LIVED '} {function}: `{statement}` ({old.strip()} -> {new.strip()})")
    return killed, lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tests", nargs="*", default=DOCTOR_TESTS)
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "checklist-trace.json")
    parser.add_argument("--trace", type=Path, help="a trace written before (no tests run)")
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--rows", nargs="*", default=None)
    parser.add_argument("--mutate", type=int, default=0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.mutate:
        killed, lines = mutate(args.mutate, args.seed)
        print("\n".join(lines) + f"\nkilled {killed} of {len(lines)}")
        return
    if args.trace:
        if not args.trace.is_file():
            parser.error(f"{args.trace}: no such trace; write one first (without --trace)")
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
