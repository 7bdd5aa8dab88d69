"""Every statement of the PPO update, the rollout and the reward model's training step is in
the checklist of docs/doctor.md, with the probes that hold it (each a registered probe) or the
reason none can; the statements are read from the functions' syntax trees, so a statement
added to one of them without its row fails here."""

import ast
import re
from pathlib import Path

import pytest

from rlhflab.checkup.probes import PROBES

ROOT = Path(__file__).resolve().parents[1]
FUNCTIONS = {"ppo_update": "src/rlhflab/ppo/trainer.py", "make_rollout": "src/rlhflab/ppo/rollout.py",
             "reward_step": "src/rlhflab/stages/reward.py"}
START, END = "<!-- invariant checklist:start -->", "<!-- invariant checklist:end -->"
OPERATORS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}


def _callee(node: ast.AST) -> str:
    """A call's function, any call inside it shortened the same way: `f(...).view`."""
    if isinstance(node, ast.Attribute):
        return f"{_callee(node.value)}.{node.attr}"
    if isinstance(node, ast.Call):
        return f"{_callee(node.func)}(...)"
    return ast.unparse(node)


def _short(node: ast.AST) -> str:
    return _callee(node) if isinstance(node, ast.Call) else ast.unparse(node)


def _target(node: ast.AST) -> str:
    return ", ".join(ast.unparse(e) for e in node.elts) if isinstance(node, ast.Tuple) else ast.unparse(node)


def statement_key(node: ast.stmt) -> str:
    """How the checklist names a statement: what it assigns and the function it calls, `...`
    for the rest; a block by its header."""
    if isinstance(node, ast.Assign):
        value = _short(node.value) if isinstance(node.value, ast.Call) else "..."
        return f"{' = '.join(_target(t) for t in node.targets)} = {value}"
    if isinstance(node, ast.AnnAssign):
        return f"{_target(node.target)} = ..."
    if isinstance(node, ast.AugAssign):
        return f"{_target(node.target)} {OPERATORS[type(node.op)]}= ..."
    if isinstance(node, ast.Expr):
        return _short(node.value)
    if isinstance(node, ast.Return):
        return f"return {_short(node.value)}" if isinstance(node.value, ast.Call) else "return ..."
    if isinstance(node, ast.For):
        return f"for {_target(node.target)} in {_short(node.iter)}"
    if isinstance(node, ast.With):
        return "with " + ", ".join(_short(item.context_expr) for item in node.items)
    if isinstance(node, ast.If):
        return f"if {ast.unparse(node.test)}"
    raise AssertionError(f"line {node.lineno}: a {type(node).__name__} statement the checklist cannot name yet")


def statements(body: list[ast.stmt]):
    for node in body:
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # the docstring
        yield statement_key(node)
        for field in ("body", "orelse"):
            yield from statements(getattr(node, field, None) or [])


def function_statements(name: str) -> set[str]:
    tree = ast.parse((ROOT / FUNCTIONS[name]).read_text())
    [function] = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == name]
    return set(statements(function.body))


def checklist() -> dict[tuple[str, str], str]:
    text = (ROOT / "docs" / "doctor.md").read_text()
    table = text[text.index(START) + len(START):text.index(END)]
    rows = {}
    for line in table.strip().splitlines()[2:]:
        function, statement, held = (cell.strip() for cell in line.strip().strip("|").split(" | ", 2))
        rows[(function.strip("`"), statement.strip("`"))] = held
    return rows


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_every_statement_is_in_the_checklist_and_every_row_is_a_statement(name):
    rows = {statement for function, statement in checklist() if function == name}
    found = function_statements(name)
    assert not found - rows, f"statements of {name} missing from docs/doctor.md's checklist: {sorted(found - rows)}"
    assert not rows - found, f"checklist rows of {name} that are no statement of it: {sorted(rows - found)}"


# Names in backticks that are not probes: a setting, a clue and a rule of the doctor, a statement.
NOT_PROBES = {"entropy_coef", "negative_entropy_coef", "first_ratio_not_one", "full_weights"}


def test_every_row_names_registered_probes_or_says_why_none_can():
    probes = {p.name for p in PROBES}
    for (function, statement), held in checklist().items():
        named = set(re.findall(r"`([a-z_]+)`", held))
        assert named <= probes | NOT_PROBES, (function, statement, sorted(named - probes - NOT_PROBES))
        assert named & probes or held.startswith(("none", "as ")), (function, statement, held)


def test_a_new_statement_is_caught():
    body = ast.parse("def f(x):\n    y = g(x)\n    y.h()\n    for a in range(3):\n        z += a\n    return y").body
    assert list(statements(body[0].body)) == ["y = g(...)", "y.h(...)", "for a in range(...)", "z += ...",
                                              "return ..."]
