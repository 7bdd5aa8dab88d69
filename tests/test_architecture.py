"""The package's layering: no import cycles, no upward imports, and a doctor that is pure
log analysis (it loads no torch, transformers or pipeline module)."""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"

# Low to high: a unit may import its own layer's units and lower ones, never higher ones.
LAYERS = (
    {"runs", "seeding", "progress", "worlds", "metrics", "data", "distributed", "checkpoint", "markdown", "errors"},
    {"doctor"},  # pure log analysis: the run-directory layout (runs) is all it may use
    {"studies"},  # rating studies: read samples with the doctor's readers, never train
    {"config"},
    {"models", "engines"},
    {"judges"},  # judges load models: they sit above them, beside nothing that trains
    {"sources"},
    {"sample", "ppo", "stages"},  # sample: a model's responses to prompts (a run's from sources), trains nothing
    {"faults", "checkup", "preflight"},  # preflight: what a run needs, checked before it writes
    {"pipeline"},
    {"verify"},
    {"ablate"},  # the candidate fixes over seeds: reruns stages as verify does
    {"faults_bench"},  # the zoo's benchmark: trains, checks and diagnoses, so above verify and ablate
    {"integrations", "cli"},
)
LAYER_OF = {unit: i for i, layer in enumerate(LAYERS) for unit in layer}
# What `import rlhflab.doctor` may load of rlhflab: itself, the run-directory layout, the
# writer of generated doc sections, the family of input errors (`errors`), and the
# pure-python text measures it reads sample files with (`metrics.diversity`, `metrics.text`;
# `metrics.stats` is torch's and stays out: the HEAVY check below sees it).
DOCTOR_MAY_IMPORT = ("rlhflab.doctor", "rlhflab.runs", "rlhflab.metrics.diversity", "rlhflab.metrics.text",
                     "rlhflab.markdown", "rlhflab.errors")
HEAVY = ("torch", "transformers", "tokenizers", "safetensors", "accelerate", "matplotlib", "tensorboard", "numpy")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _unit(module: str) -> str:
    """`rlhflab.ppo.trainer` -> `ppo`: a unit is a top-level module or folder, so a folder is one floor."""
    parts = module.split(".")[1:]
    return parts[0] if parts else "rlhflab"


def import_graph() -> dict[str, set[str]]:
    """Module -> the rlhflab modules it imports, at module level or inside a function."""
    graph: dict[str, set[str]] = defaultdict(set)
    for path in (SRC / "rlhflab").rglob("*.py"):
        module = _module_name(path)
        graph[module]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("rlhflab"):
                graph[module].add(node.module)
            elif isinstance(node, ast.Import):
                graph[module].update(a.name for a in node.names if a.name.startswith("rlhflab"))
    return graph


def test_every_unit_has_a_layer():
    units = {_unit(m) for m in import_graph()} - {"rlhflab"}
    assert units <= set(LAYER_OF), f"units without a layer: {sorted(units - set(LAYER_OF))}"


def test_no_upward_imports():
    upward = sorted(
        f"{module} -> {target}" for module, targets in import_graph().items() for target in targets
        if _unit(module) in LAYER_OF and _unit(target) in LAYER_OF and LAYER_OF[_unit(target)] > LAYER_OF[_unit(module)]
    )
    assert not upward, "\n".join(upward)


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle of `graph` (as a path that ends where it starts), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path + [node, nxt]
            if nxt not in state:
                found = visit(nxt, path + [node])
                if found:
                    return found
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node, [])
            if found:
                return found
    return None


def test_no_import_cycles_between_units():
    graph: dict[str, set[str]] = defaultdict(set)
    for module, targets in import_graph().items():
        graph[_unit(module)].update(_unit(t) for t in targets if _unit(t) != _unit(module))
    cycle = find_cycle(graph)
    assert cycle is None, " -> ".join(cycle)


def test_the_cycle_finder_finds_cycles():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_the_doctor_loads_nothing_heavy_even_when_diagnosing_a_trl_log(tmp_path: Path):
    log = tmp_path / "trainer_state.json"
    log.write_text(json.dumps({"log_history": [{"step": i, "objective/kl": 0.1 * i, "objective/scores": 0.01 * i}
                                               for i in range(1, 30)]}))
    code = (
        "import sys, json\n"
        "import rlhflab.doctor\n"
        "after_import = set(sys.modules)\n"
        "from rlhflab.doctor import diagnose_path, diagnosis_json\n"
        f"diagnosis_json(diagnose_path({str(log)!r}))\n"
        "print(json.dumps([sorted(after_import), sorted(sys.modules)]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    for loaded in json.loads(out):
        heavy = [m for m in loaded if m.split(".")[0] in HEAVY]
        ours = [m for m in loaded if m.startswith("rlhflab.") and not m.startswith(DOCTOR_MAY_IMPORT)
                and m != "rlhflab.metrics"]
        assert not heavy, heavy
        assert not ours, ours
        assert "rlhflab.doctor.diagnose" in loaded


# Run `rlhflab` as on a light install (`pip install rlhflab`): every training-stack module
# fails to import, as it would when the [train] extra is absent.
LIGHT_INSTALL = """
import importlib.abc, sys
BLOCKED = {blocked!r}
class Absent(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"No module named {{name!r}} (light install)")
        return None
sys.meta_path.insert(0, Absent())
from typer.testing import CliRunner
from rlhflab.cli import app
result = CliRunner().invoke(app, {args!r})
print(result.exit_code)
print(result.output)
"""
TRAINING_STACK = HEAVY + ("vaderSentiment", "pyarrow", "starlette", "uvicorn", "jinja2", "python_multipart")


def run_light(args: list[str]) -> tuple[int, str]:
    code = LIGHT_INSTALL.format(blocked=TRAINING_STACK, args=args)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    exit_code, output = out.split("\n", 1)
    return int(exit_code), output


def test_a_light_install_diagnoses_logs_and_says_what_training_needs(tmp_path: Path, smoke_run):
    log = tmp_path / "trainer_state.json"
    log.write_text(json.dumps({"log_history": [{"step": i, "objective/kl": 0.1 * i} for i in range(1, 30)]}))
    code, output = run_light(["doctor", str(log), "--json"])
    assert code == 3, output  # one symptom family (KL) only: "cannot tell"
    assert json.loads(output)["trainer"] == "trl-ppo"
    run = tmp_path / "copy"  # the doctor writes diagnosis.json into a run: not into the shared one
    shutil.copytree(smoke_run.root / "metrics", run / "metrics")
    shutil.copy(smoke_run.config, run / "config.toml")
    code, output = run_light(["doctor", str(run), "--json"])
    assert code == 0 and json.loads(output)["trainer"] == "rlhflab", output
    code, output = run_light(["pipeline", "--preset", "smoke", "--out", str(tmp_path / "run")])
    assert code == 2 and "rlhflab[train]" in output, output
    code, output = run_light(["rate", str(smoke_run.root), "--study", str(tmp_path / "study"), "--no-serve"])
    assert code == 2 and "rlhflab[studies]" in output, output
    from torch.utils.tensorboard import SummaryWriter

    with SummaryWriter(log_dir=str(tmp_path / "tb")) as writer:
        writer.add_scalar("objective/kl", 0.1, 1)
    code, output = run_light(["doctor", str(tmp_path / "tb")])
    assert code == 2 and "rlhflab[tensorboard]" in output, output


def test_code_outside_the_doctor_enters_by_its_front_door():
    """Outside `rlhflab.doctor`, the package's code imports only names of `rlhflab.doctor.__all__`,
    from `rlhflab.doctor` itself."""
    import rlhflab.doctor

    public = set(rlhflab.doctor.__all__)
    side_doors = []
    for path in (SRC / "rlhflab").rglob("*.py"):
        if _module_name(path).startswith("rlhflab.doctor"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("rlhflab.doctor"):
                names = {a.name for a in node.names}
                if node.module != "rlhflab.doctor" or not names <= public:
                    side_doors.append(f"{_module_name(path)}: from {node.module} import {', '.join(sorted(names))}")
            elif isinstance(node, ast.Import):
                side_doors += [f"{_module_name(path)}: import {a.name}" for a in node.names
                               if a.name.startswith("rlhflab.doctor.")]
    assert not side_doors, "\n".join(side_doors)
    assert all(hasattr(rlhflab.doctor, name) for name in public)


def test_every_rule_family_is_imported_by_name():
    from rlhflab.doctor.rules.registry import FAMILIES

    init = SRC / "rlhflab" / "doctor" / "rules" / "__init__.py"
    imported = {a.name for node in ast.walk(ast.parse(init.read_text(encoding="utf-8")))
                if isinstance(node, ast.ImportFrom) and node.module == "rlhflab.doctor.rules" for a in node.names}
    modules = {p.stem for p in init.parent.glob("*.py")} - {"__init__", "registry"}
    assert imported == set(FAMILIES) == modules


def module_level_imports() -> dict[str, set[str]]:
    """Module -> the rlhflab modules it imports when it is imported: statements at module level,
    those under `if TYPE_CHECKING:` (and any other module-level `if`/`try`) included, imports
    inside functions left out. `from a.b import c` imports the module a.b.c where there is one
    (its package is imported first in any case), else the name c of a.b."""
    modules = {_module_name(p) for p in (SRC / "rlhflab").rglob("*.py")}
    graph: dict[str, set[str]] = defaultdict(set)

    def statements(body):
        for node in body:
            if isinstance(node, (ast.If, ast.Try)):
                yield from statements(node.body + node.orelse + getattr(node, "finalbody", [])
                                      + [s for h in getattr(node, "handlers", []) for s in h.body])
            else:
                yield node

    for path in (SRC / "rlhflab").rglob("*.py"):
        module = _module_name(path)
        graph[module]
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in statements(ast.parse(path.read_text(encoding="utf-8")).body):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
                if not base.startswith("rlhflab"):
                    continue
                submodules = {f"{base}.{a.name}" for a in node.names} & modules
                graph[module].update(submodules)
                if len(submodules) < len(node.names):  # a name the package itself defines
                    graph[module].add(base)
            elif isinstance(node, ast.Import):
                graph[module].update(a.name for a in node.names if a.name.startswith("rlhflab"))
    return {m: {t for t in targets if t in modules and t != m} for m, targets in graph.items()}


def test_no_import_cycles_between_modules():
    """No module imports, when it is imported, a module that imports it back, at any depth
    (TYPE_CHECKING imports too: a cycle there is one a type checker and a reader walk)."""
    cycle = find_cycle(module_level_imports())
    assert cycle is None, " -> ".join(cycle)


def test_each_module_of_the_command_line_is_short():
    """The command line is a package of command families (cli/stages.py, doctor.py, fixes.py,
    studies.py), rendering and errors: no module of it grows past 400 lines."""
    long = {p.name: n for p in (SRC / "rlhflab" / "cli").glob("*.py")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > 400}
    assert not long, long


def test_every_command_is_registered_once_in_the_commands_registry():
    from rlhflab.cli import COMMANDS, app

    names = [c.callback.__name__ for c in app.registered_commands]
    assert names == [command.__name__ for command, _ in COMMANDS] and len(set(names)) == len(names)


def _kind_comparisons(tree: ast.AST, names: set[str]) -> list[int]:
    """Lines that branch on a study's kind: `….design.kind` compared or used as a key, a kind's
    name compared with something called kind, or a mapping keyed by kinds' names."""
    def design_kind(node: ast.AST) -> bool:
        return (isinstance(node, ast.Attribute) and node.attr == "kind" and isinstance(node.value, ast.Attribute)
                and node.value.attr == "design")

    def a_name(node: ast.AST) -> bool:
        return isinstance(node, ast.Constant) and node.value in names

    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = (node.left, *node.comparators)
            if any(design_kind(n) for n in sides) or (
                    any(a_name(n) for n in sides) and any("kind" in ast.unparse(n) for n in sides if not a_name(n))):
                lines.append(node.lineno)
        elif (isinstance(node, ast.Subscript) and design_kind(node.slice)) or (
                isinstance(node, ast.Dict) and sum(a_name(k) for k in node.keys if k is not None) >= 2):
            lines.append(node.lineno)
    return lines


def test_no_module_but_the_kinds_registry_compares_a_study_s_kind():
    """Study kinds are a registry (studies/kinds): a kind declares its design, page, columns,
    results and exports in its module, and everything else asks the registry for the study's
    kind instead of comparing names, so adding a kind touches its module and one line of
    `KINDS`."""
    from rlhflab.studies.kinds import KINDS

    registry = SRC / "rlhflab" / "studies" / "kinds" / "__init__.py"
    found = {f"{path.relative_to(SRC)}:{line}" for path in (SRC / "rlhflab").rglob("*.py") if path != registry
             for line in _kind_comparisons(ast.parse(path.read_text(encoding="utf-8")), set(KINDS))}
    assert not found, sorted(found)
    probe = ast.parse('if study.design.kind == "pair": pass\nPAGES = {"rating": "r.html", "pair": "p.html"}\n'
                      'x = FIELD[study.design.kind]\nif kind != "rating": pass\nif result["type"] == "rating": pass')
    assert _kind_comparisons(probe, set(KINDS)) == [1, 2, 3, 4]  # the check sees what it forbids, and only that


def test_every_kind_module_is_registered_and_declares_a_page_that_exists():
    from rlhflab.studies.kinds import KINDS

    modules = {p.stem for p in (SRC / "rlhflab" / "studies" / "kinds").glob("*.py")} - {"__init__"}
    assert modules == {kind.name for kind in KINDS.values()}
    templates = SRC / "rlhflab" / "studies" / "templates"
    for kind in KINDS.values():
        assert (templates / kind.page).is_file(), kind.page
        assert kind.answer_field in (templates / kind.page).read_text(encoding="utf-8")
