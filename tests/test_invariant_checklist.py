"""Every statement of every function the default pipeline reaches from `run_pipeline` is in
the checklist of docs/checklist.md, held by a registered probe or a named test that runs the
real code, or given a reason from a closed list (logging, timing, progress display), or
marked open with the invariant it still needs; a function not walked yet is named in that
file's list, which only shrinks. The functions come from the call graph of the package's
syntax trees (tests/helpers/statement_graph.py), so a new function on the default path, or a
new statement in a walked one, without its rows fails here. docs/doctor.md gives the counts
per function (`RLHFLAB_CHECKLIST=write` rewrites that table)."""

import ast
import os
import re
from collections import Counter
from pathlib import Path

import pytest

from helpers.statement_graph import Graph, default_pipeline, function_statements, modules_from_sources, statements
from rlhflab.checkup.probes import PROBES

ROOT = Path(__file__).resolve().parents[1]
CHECKLIST = ROOT / "docs" / "checklist.md"
DOCTOR = ROOT / "docs" / "doctor.md"
ROWS = ("<!-- statement checklist:start -->", "<!-- statement checklist:end -->")
NOT_WALKED = ("<!-- not walked:start -->", "<!-- not walked:end -->")
COUNTS = ("<!-- checklist counts:start -->", "<!-- checklist counts:end -->")
REASONS = ("logging", "timing", "progress display")  # the closed list: what reaches no file, input or loss
# The functions not walked yet may only become fewer; lower this as rows are written.
NOT_WALKED_AT_MOST = 0
# Names in backticks that are not probes: settings, a clue and a rule of the doctor, a statement.
NOT_PROBES = {"entropy_coef", "negative_entropy_coef", "first_ratio_not_one", "full_weights"}


def _between(text: str, markers: tuple[str, str]) -> str:
    start, end = markers
    return text[text.index(start) + len(start):text.index(end)]


def checklist() -> dict[tuple[str, str], str]:
    rows = {}
    for line in _between(CHECKLIST.read_text(), ROWS).strip().splitlines()[2:]:
        function, statement, held = (cell.strip().replace("\\|", "|") for cell in line.strip().strip("|").split(" | ", 2))
        key = (function.strip("`"), statement.strip("`"))  # a `|` inside a cell is written `\|`
        assert key not in rows, f"docs/checklist.md: the row {key} twice"
        rows[key] = held
    return rows


def not_walked() -> list[str]:
    return re.findall(r"^- `([^`]+)`", _between(CHECKLIST.read_text(), NOT_WALKED), flags=re.M)


@pytest.fixture(scope="module")
def graph():
    return {f.name: f for f in default_pipeline()}


def test_every_function_on_the_default_path_is_walked_or_listed_as_not_yet(graph):
    walked = {function for function, _ in checklist()}
    walked |= {name for name, f in graph.items() if not function_statements(f)}  # a docstring only: nothing to hold
    pending = not_walked()
    assert len(pending) == len(set(pending))
    assert not walked - set(graph), f"rows for functions off the default path: {sorted(walked - set(graph))}"
    assert not set(pending) - set(graph), f"listed as not walked, off the default path: {sorted(set(pending) - set(graph))}"
    assert not set(pending) & walked, f"walked and listed as not walked: {sorted(set(pending) & walked)}"
    missing = set(graph) - walked - set(pending)
    assert not missing, f"functions on the default path with no rows in docs/checklist.md: {sorted(missing)}"
    assert len(pending) <= NOT_WALKED_AT_MOST, "a function was added to the not-walked list: write its rows instead"


def test_every_statement_of_a_walked_function_has_its_row(graph):
    rows = checklist()
    for name in sorted({function for function, _ in rows}):
        found = function_statements(graph[name])
        listed = {statement for function, statement in rows if function == name}
        assert not found - listed, f"statements of {name} missing from docs/checklist.md: {sorted(found - listed)}"
        assert not listed - found, f"rows of {name} that are no statement of it: {sorted(listed - found)}"


def _kind(held: str) -> str:
    """probed (a probe or a test holds it), traced (the tests that run it, found by tracing),
    reasoned (a reason of the closed list), open."""
    probes = {p.name for p in PROBES}
    named = set(re.findall(r"`([a-z_0-9]+)`", held))
    tests = re.findall(r"`(tests/[a-z_0-9/]+\.py)::([a-z_0-9]+)`", held)
    assert named <= probes | NOT_PROBES, f"not a registered probe: {sorted(named - probes - NOT_PROBES)}"
    for path, test in tests:
        assert re.search(rf"^def {test}\(", (ROOT / path).read_text(), flags=re.M), f"no test {path}::{test}"
    if "open:" in held:  # a part of it still open makes the row open
        return "open"
    if "(run by;" in held:  # chosen by tracing which tests run the statement, not by reading what they assert
        return "traced"
    if named & probes or tests:
        return "probed"
    assert held.startswith(REASONS), f"neither a probe, a test, a reason of {REASONS} nor open: {held!r}"
    return "reasoned"


def test_every_row_names_what_holds_it_or_a_reason_of_the_closed_list():
    for (function, statement), held in checklist().items():
        try:
            _kind(held)
        except AssertionError as error:
            raise AssertionError(f"docs/checklist.md, {function}, `{statement}`: {error}") from None


def counts_table(graph) -> str:
    kinds = {}
    for (function, _), held in checklist().items():
        kinds.setdefault(function, Counter())[_kind(held)] += 1
    pending = not_walked()
    lines = ["| function | statements | probed | traced | reasoned | open |", "|---|---|---|---|---|---|"]
    for function, c in sorted(kinds.items()):
        lines.append(f"| `{function}` | {sum(c.values())} | {c['probed']} | {c['traced']} | {c['reasoned']} | "
                     f"{c['open']} |")
    total = Counter()
    for c in kinds.values():
        total.update(c)
    waiting = sum(len(function_statements(graph[name])) for name in pending)
    lines.append(f"| all {len(kinds)} walked | {sum(total.values())} | {total['probed']} | {total['traced']} | "
                 f"{total['reasoned']} | {total['open']} |")
    lines.append(f"| not walked yet: {len(pending)} functions | {waiting} | | | | |")
    return "\n".join(lines)


def test_the_doctor_docs_give_the_counts_per_function(graph):
    table = counts_table(graph)
    text = DOCTOR.read_text()
    if os.environ.get("RLHFLAB_CHECKLIST") == "write":
        start, end = COUNTS
        DOCTOR.write_text(text[:text.index(start) + len(start)] + "\n" + table + "\n" + text[text.index(end):])
        text = DOCTOR.read_text()
    assert _between(text, COUNTS).strip() == table, "run RLHFLAB_CHECKLIST=write pytest tests/test_invariant_checklist.py"


def test_a_new_statement_is_caught():
    body = ast.parse("def f(x):\n    y = g(x)\n    y.h()\n    for a in range(3):\n        z += a\n"
                     "    try:\n        raise E(y)\n    except E:\n        pass\n    return y").body
    assert statements(body[0].body) == ["y = g(...)", "y.h(...)", "for a in range(...)", "z += ...", "try",
                                        "raise E(...)", "except E", "pass", "return ..."]


def test_the_graph_follows_calls_imports_components_methods_and_registries():
    """A second path: a made-up package whose every kind of edge leads to one function."""
    sources = {
        ("pkg", True): "",
        ("pkg.pipeline", False): (
            "from pkg.parts import helper, Parts\nfrom pkg import rules\n"
            "def run_pipeline(c):\n    helper()\n    c.step()\n    Parts().go()\n    return rules.RULES\n"),
        ("pkg.parts", False): (
            "from dataclasses import dataclass\nfrom pkg.impl import default_step\n"
            "def helper():\n    pass\n"
            "@dataclass\nclass Parts:\n    step: object = default_step\n    def go(self):\n        pass\n"),
        ("pkg.impl", False): "def default_step():\n    pass\ndef unused():\n    pass\n",
        ("pkg.rules", False): (
            "_SEEN = {}\ndef rule(f):\n    _SEEN[f.__name__] = f\n    return f\n"
            "@rule\ndef a_rule():\n    pass\nRULES = tuple(_SEEN.values())\n"),
    }
    reached = {f.name for f in Graph(modules_from_sources(sources)).reachable("pkg.pipeline", "run_pipeline")}
    assert reached == {"pkg.pipeline.run_pipeline", "pkg.parts.helper", "pkg.parts.Parts.go",
                       "pkg.impl.default_step", "pkg.rules.a_rule", "pkg.rules.rule"}


@pytest.mark.slow
def test_every_function_the_smoke_pipeline_calls_is_on_the_static_graph(graph, tmp_path):
    """A second path to the call graph: the functions a real smoke run calls, recorded as
    they are entered, are all among those the syntax trees reach."""
    import sys

    from rlhflab.config import load_config
    from rlhflab.pipeline import run_pipeline

    package = str(ROOT / "src" / "rlhflab")
    called = set()

    def profile(frame, event, arg):
        code = frame.f_code
        if event == "call" and code.co_filename.startswith(package) and "<" not in code.co_qualname:
            module = code.co_filename[len(package) + 1:].removesuffix(".py").removesuffix("/__init__")
            called.add(f"{module.replace('/', '.')}.{code.co_qualname}")

    config = load_config("smoke")  # read before the run starts: not on its path
    sys.setprofile(profile)
    try:
        run_pipeline(config, tmp_path / "run", show_progress=False)
    finally:
        sys.setprofile(None)
    assert called and not called - set(graph), sorted(called - set(graph))
