"""The functions the default pipeline reaches from `run_pipeline`, read from the package's
syntax trees: a reference to a function (a call, or the function passed as a value) is an
edge, resolved through the module's own definitions and its imports; `x.name` is every
method `name` of a class in the caller's module or a module it imports, and every dataclass
field `name` whose default is a function (the components). A class reached brings all its
methods (an `nn.Module` is called through `forward`). The graph errs on the side of more
functions, never fewer: an unresolved name stays out only when nothing in the package could
answer it."""

from __future__ import annotations

import ast
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"
PACKAGE = "rlhflab"


@dataclass(frozen=True)
class Function:
    module: str
    qualname: str
    node: ast.FunctionDef | ast.AsyncFunctionDef = field(compare=False, hash=False)

    @property
    def name(self) -> str:
        return f"{self.module.removeprefix(PACKAGE + '.')}.{self.qualname}"


@dataclass
class Module:
    name: str
    functions: dict[str, Function] = field(default_factory=dict)  # top-level, by name
    classes: dict[str, list[Function]] = field(default_factory=dict)  # methods, by class name
    imported: dict[str, tuple[str, str | None]] = field(default_factory=dict)  # local -> (module, name)
    assigned: dict[str, ast.AST] = field(default_factory=dict)  # module-level values, by name
    fields: dict[str, ast.AST] = field(default_factory=dict)  # dataclass field defaults, by field name


def _module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _absolute(module: str, node: ast.ImportFrom, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")
    base = base if is_package else base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def read_package() -> dict[str, Module]:
    return modules_from_sources({
        (_module_name(path), path.name == "__init__.py"): path.read_text(encoding="utf-8")
        for path in sorted((SRC / PACKAGE).rglob("*.py"))})


def modules_from_sources(sources: dict[tuple[str, bool], str]) -> dict[str, Module]:
    """Modules by name from their source, each key (dotted name, is a package)."""
    modules = {}
    for (name, is_package), source in sources.items():
        tree = ast.parse(source)
        module = Module(name)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                origin = _absolute(name, node, is_package)
                for alias in node.names:
                    module.imported[alias.asname or alias.name] = (origin, alias.name)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    module.imported[alias.asname or alias.name.split(".")[0]] = (
                        alias.name if alias.asname else alias.name.split(".")[0], None)
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                module.functions[node.name] = Function(name, node.name, node)
            elif isinstance(node, ast.ClassDef):
                methods = []
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        methods.append(Function(name, f"{node.name}.{item.name}", item))
                    elif isinstance(item, ast.AnnAssign) and item.value is not None:
                        module.fields[ast.unparse(item.target)] = item.value
                    elif isinstance(item, ast.Assign):
                        for target in item.targets:
                            module.fields[ast.unparse(target)] = item.value
                module.classes[node.name] = methods
            elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
                for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                    for name_node in ast.walk(target):
                        if isinstance(name_node, ast.Name):
                            module.assigned[name_node.id] = node.value
        modules[name] = module
    return modules


class Graph:
    """Reachability over the package's functions."""

    def __init__(self, modules: dict[str, Module]):
        self.modules = modules
        self.methods: dict[str, list[tuple[str, Function]]] = defaultdict(list)
        self.fields: dict[str, list[tuple[str, ast.AST]]] = defaultdict(list)
        self.registered: dict[Function, list[Function]] = defaultdict(list)
        self.registries: dict[tuple[str, str], list[Function]] = defaultdict(list)
        for module in modules.values():
            for name, value in module.fields.items():
                self.fields[name].append((module.name, value))
            for function in [*module.functions.values(), *(m for ms in module.classes.values() for m in ms)]:
                for decorator in function.node.decorator_list:
                    call = decorator.func if isinstance(decorator, ast.Call) else decorator
                    for registrar in self.references(module.name, call):
                        if isinstance(registrar, Function):
                            self.registered[registrar].append(function)
        # what a registering decorator writes (`_REGISTERED[name] = ...`): a reader of that
        # module-level name reaches every function the decorator registered
        for registrar, registered in self.registered.items():
            for node in ast.walk(registrar.node):
                written = node.value if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store) else (
                    node.func.value if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) else None)
                if isinstance(written, ast.Name) and written.id in modules[registrar.module].assigned:
                    self.registries[(registrar.module, written.id)] += registered
        for module in modules.values():
            for methods in module.classes.values():
                for method in methods:
                    self.methods[method.qualname.split(".")[-1]].append((module.name, method))

    def _lookup(self, module: str, name: str, seen: frozenset = frozenset()) -> list:
        """What `name` means in `module`: functions, or expressions to read for more."""
        if (module, name) in seen or module not in self.modules:
            return []
        seen = seen | {(module, name)}
        m = self.modules[module]
        if name in m.functions:
            return [m.functions[name]]
        if name in m.classes:
            return list(m.classes[name])
        if name in m.assigned:
            return [(module, m.assigned[name])]
        if name in m.imported:
            source, imported = m.imported[name]
            if imported is None:
                return []
            if f"{source}.{imported}" in self.modules:
                return []  # a submodule, resolved through its attribute
            return self._lookup(source, imported, seen)
        return []

    def _module_alias(self, module: str, name: str) -> str | None:
        source, imported = self.modules[module].imported.get(name, (None, None))
        if source is None:
            return None
        target = source if imported is None else f"{source}.{imported}"
        return target if target in self.modules else None

    def _neighbours_of_module(self, module: str) -> set[str]:
        m = self.modules[module]
        return {module} | {source for source, _ in m.imported.values() if source in self.modules} | {
            f"{source}.{imported}" for source, imported in m.imported.values()
            if imported and f"{source}.{imported}" in self.modules}

    def references(self, module: str, node: ast.AST) -> list:
        """The functions (and module-level values) that `node` names, seen from `module`."""
        found = []
        for sub in ast.walk(node):
            if isinstance(sub, ast.Name):
                found += self._lookup(module, sub.id) + self.registries.get((module, sub.id), [])
            elif isinstance(sub, ast.Attribute):
                if isinstance(sub.value, ast.Name) and (target := self._module_alias(module, sub.value.id)):
                    found += self._lookup(target, sub.attr)
                    continue
                near = self._neighbours_of_module(module)
                found += [method for owner, method in self.methods.get(sub.attr, []) if owner in near]
                # a component travels far from the module that declares it
                found += [(owner, value) for owner, value in self.fields.get(sub.attr, [])]
        return found

    def reachable(self, module: str, name: str) -> list[Function]:
        start = self._lookup(module, name)
        seen: set[Function] = set()
        read: set[int] = set()
        todo = list(start)
        while todo:
            item = todo.pop()
            if isinstance(item, Function):
                if item in seen:
                    continue
                seen.add(item)
                todo += self.registered.get(item, [])  # a registry's decorator reaches what it registered
                # its body, default values and decorators; not its annotations (a type named is no call)
                args = item.node.args
                for part in [*item.node.body, *args.defaults, *args.kw_defaults, *item.node.decorator_list]:
                    if part is not None:
                        todo += self.references(item.module, part)
            else:
                owner, value = item
                if id(value) not in read:
                    read.add(id(value))
                    todo += self.references(owner, value)
        return sorted(seen, key=lambda f: (f.module, f.qualname))


def default_pipeline() -> list[Function]:
    return Graph(read_package()).reachable(f"{PACKAGE}.pipeline", "run_pipeline")


# How the checklist names a statement: what it assigns and the function it calls, `...` for
# the rest; a block by its header. Two statements of one function with the same name share
# a row.
OPERATORS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%",
             ast.Pow: "**", ast.BitOr: "|", ast.BitAnd: "&", ast.MatMult: "@"}


def _callee(node: ast.AST) -> str:
    """A call's function, any call inside it shortened the same way: `f(...).view`."""
    if isinstance(node, ast.Attribute):
        inner = _callee(node.value)
        plain = isinstance(node.value, (ast.Name, ast.Attribute, ast.Call, ast.Subscript, ast.Constant))
        return f"{inner if plain else f'({inner})'}.{node.attr}"
    if isinstance(node, ast.Call):
        return f"{_callee(node.func)}(...)"
    return ast.unparse(node)


def _short(node: ast.AST | None) -> str:
    if node is None:
        return ""
    return _callee(node) if isinstance(node, ast.Call) else ast.unparse(node)


def _target(node: ast.AST) -> str:
    return ", ".join(ast.unparse(e) for e in node.elts) if isinstance(node, ast.Tuple) else ast.unparse(node)


def statement_key(node: ast.stmt | ast.ExceptHandler) -> str:
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
    if isinstance(node, (ast.For, ast.AsyncFor)):
        return f"for {_target(node.target)} in {_short(node.iter)}"
    if isinstance(node, (ast.With, ast.AsyncWith)):
        return "with " + ", ".join(_short(item.context_expr) for item in node.items)
    if isinstance(node, ast.If):
        return f"if {ast.unparse(node.test)}"
    if isinstance(node, ast.While):
        return f"while {ast.unparse(node.test)}"
    if isinstance(node, ast.Raise):
        return f"raise {_short(node.exc)}".rstrip()
    if isinstance(node, ast.Assert):
        return f"assert {ast.unparse(node.test)}"
    if isinstance(node, (ast.Try, ast.TryStar)):
        return "try"
    if isinstance(node, ast.ExceptHandler):
        return f"except {ast.unparse(node.type)}" if node.type is not None else "except"
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return f"def {node.name}(...)"
    if isinstance(node, ast.ClassDef):
        return f"class {node.name}"
    if isinstance(node, ast.Delete):
        return "del " + ", ".join(ast.unparse(t) for t in node.targets)
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return "import " + ", ".join(a.asname or a.name for a in node.names)
    if isinstance(node, (ast.Pass, ast.Break, ast.Continue)):
        return type(node).__name__.lower()
    if isinstance(node, (ast.Global, ast.Nonlocal)):
        return f"{type(node).__name__.lower()} {', '.join(node.names)}"
    raise AssertionError(f"line {node.lineno}: a {type(node).__name__} statement the checklist cannot name yet")


def statements(body: list) -> list[str]:
    """Every statement of a body, nested blocks and nested functions included, docstrings not."""
    found = []
    for node in body:
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            continue
        found.append(statement_key(node))
        for part in ("body", "orelse", "handlers", "finalbody"):
            found += statements(getattr(node, part, None) or [])
    return found


def function_statements(function: Function) -> set[str]:
    return set(statements(function.node.body))
