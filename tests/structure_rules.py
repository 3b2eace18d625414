"""The rules tests/test_structure.py holds the package to, as functions of a package folder,
so the same checker can be run on a planted copy (a checker that is never shown a violation
may pass on anything: the test of the test plants each kind it must catch).

What counts as an import: every `import` / `from ... import` anywhere in a module, however
deep (module level, functions, classes, `try`/`try*`, `with`, loops, `match` cases, and
`if TYPE_CHECKING:` blocks). An import in a function is still an arrow between two modules:
it runs later, but the modules depend on each other all the same; one under TYPE_CHECKING
never runs, yet the module is written against the other one's types, so it counts too.
The reader is `ast.NodeVisitor`'s full walk, not a list of statement kinds, so a kind it was
not told about cannot hide an import from it.

A literal `importlib.import_module("streamasr....")` or `__import__("streamasr....")` is an
import statement in disguise (no arrow would be drawn for it): it is a finding of its own.
Module names that arrive as data (the command table, `--backend module:ATTRIBUTE`) are not.

`from package import name` is an edge to `package.name` when that is a module, else to
`package` itself. Importing `a.b.c` also runs `a/__init__.py` and `a/b/__init__.py`, but
those implicit edges are not counted: a package's `__init__` that re-exports its submodules
would otherwise form a "cycle" with each of them, which Python handles by design.

The layers are listed in docs/development.md ("Layers"); `LAYERS` below is that list. The
graph is read from the source files with `ast`; nothing is imported.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "streamasr"

#: Top to bottom: a module may import from its own layer or any layer below, never above.
#: The same list, with what each layer is for, is in docs/development.md ("Layers").
LAYERS: tuple[tuple[str, frozenset[str]], ...] = (
    ("entry", frozenset({"__main__", "cli", "streamasr"})),
    ("commands", frozenset({"commands/"})),
    ("services", frozenset({"server/", "cluster/"})),
    ("runs", frozenset({"bench/", "api"})),
    ("sessions", frozenset({"devices/", "output/", "session/", "vad/"})),
    ("engines", frozenset({"backends/"})),
    ("foundations", frozenset({
        "distribution/", "analysis/", "text/", "audio/", "cuda", "config", "errors", "version",
        "extras", "whole_file", "memory",
    })),
)

#: Engine packages, imported only under backends/ and by the named sherpa-onnx components
ENGINE_PACKAGES = frozenset({"sherpa_onnx", "nemo", "torch", "onnxruntime", "onnx"})
SHERPA_COMPONENTS = frozenset({"streamasr.output.punctuation", "streamasr.vad.silero"})
DYNAMIC_IMPORTERS = frozenset({"import_module", "__import__"})


@dataclass(frozen=True)
class Import:
    """One import as written in a module: the dotted name it reaches and where."""

    target: str
    line: int
    type_only: bool  # under `if TYPE_CHECKING:`

    def where(self, module: str) -> str:
        return f"{module}:{self.line}" + (" (TYPE_CHECKING)" if self.type_only else "")


def module_name(path: Path, package: Path = PACKAGE) -> str:
    parts = list(path.relative_to(package.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def source_modules(package: Path = PACKAGE) -> dict[str, Path]:
    """Every module of the package, by dotted name."""
    return {module_name(p, package): p for p in sorted(package.rglob("*.py"))}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


class _ImportReader(ast.NodeVisitor):
    """Collects every import of one module (see the module's docstring)."""

    def __init__(self, module: str, is_package: bool) -> None:
        self.module = module
        self.is_package = is_package
        self.imports: list[Import] = []
        self.dynamic: list[Import] = []
        self.type_only = False

    def visit_If(self, node: ast.If) -> None:
        if not _is_type_checking(node.test):
            self.generic_visit(node)
            return
        outer, self.type_only = self.type_only, True
        for statement in node.body:
            self.visit(statement)
        self.type_only = outer
        for statement in node.orelse:
            self.visit(statement)

    def visit_Import(self, node: ast.Import) -> None:
        self.imports += [Import(a.name, node.lineno, self.type_only) for a in node.names]

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        target = node.module or ""
        if node.level:
            base = self.module.split(".")
            base = base if self.is_package else base[:-1]
            base = base[: len(base) - (node.level - 1)]
            target = ".".join(base + ([node.module] if node.module else []))
        # `from a import b`: b may be a module (a.b) or a name in a; resolve() decides
        self.imports += [
            Import(f"{target}\0{a.name}", node.lineno, self.type_only) for a in node.names
        ]

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        called = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
        first = node.args[0] if node.args else None
        if (
            called in DYNAMIC_IMPORTERS
            and isinstance(first, ast.Constant)
            and isinstance(first.value, str)
            and first.value.split(".")[0] == "streamasr"
        ):
            self.dynamic.append(Import(first.value, node.lineno, self.type_only))
        self.generic_visit(node)


def read_module(name: str, path: Path) -> _ImportReader:
    reader = _ImportReader(name, path.name == "__init__.py")
    reader.visit(ast.parse(path.read_text(encoding="utf-8"), str(path)))
    return reader


def _resolved(target: str, known: set[str]) -> str:
    """`package\\0name` -> package.name when that is a module, else package."""
    package, _, name = target.partition("\0")
    if not name:
        return package
    child = f"{package}.{name}"
    return child if child in known else package


def package_imports(name: str, path: Path, known: set[str]) -> list[Import]:
    """The package modules `name` imports, each import where it is written."""
    found = [Import(_resolved(i.target, known), i.line, i.type_only)
             for i in read_module(name, path).imports]
    return [i for i in found if i.target in known and i.target != name]


def external_imports(name: str, path: Path) -> list[Import]:
    """The imports of other packages, by their top-level name."""
    found = [Import(i.target.partition("\0")[0].split(".")[0], i.line, i.type_only)
             for i in read_module(name, path).imports]
    return [i for i in found if i.target and i.target != "streamasr"]


def import_graph(package: Path = PACKAGE, type_only: bool = True) -> dict[str, set[str]]:
    """Module -> the package modules it imports (anywhere; under TYPE_CHECKING too unless
    `type_only` is False)."""
    modules = source_modules(package)
    known = set(modules)
    return {
        name: {i.target for i in package_imports(name, path, known) if type_only or not i.type_only}
        for name, path in modules.items()
    }


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _edges_within(component: list[str], graph: dict[str, set[str]]) -> str:
    members = set(component)
    return "; ".join(
        f"{a} -> {b}" for a in component for b in sorted(graph[a] & members)
    )


def unit_of(module: str, package: Path = PACKAGE) -> str:
    """A module's place in LAYERS: its folder under streamasr/ ("server/"), or its name."""
    parts = module.split(".")
    if len(parts) == 1:
        return "streamasr"
    if (package / parts[1]).is_dir():
        return parts[1] + "/"
    return parts[1]


def layer_of(module: str, package: Path = PACKAGE) -> int:
    unit = unit_of(module, package)
    for depth, (_name, units) in enumerate(LAYERS):
        if unit in units:
            return depth
    raise AssertionError(f"{module} ({unit}) is in no layer: add it to LAYERS and to "
                         "docs/development.md")


# --- the rules: each returns its findings, one line each; none is a pass -----------------


def module_cycles(package: Path = PACKAGE) -> list[str]:
    """No two modules import each other, counting imports inside functions (a lazy import is
    still a dependency). A back-reference under TYPE_CHECKING inside one folder (a stream
    typed by the recognizer that makes it) is the usual idiom and is left to the folder and
    layer rules, which count it."""
    graph = import_graph(package, type_only=False)
    return [_edges_within(c, graph) for c in cycles(graph)]


def upward_arrows(package: Path = PACKAGE) -> list[str]:
    modules = source_modules(package)
    known = set(modules)
    return [
        f"{i.where(a)} ({LAYERS[layer_of(a, package)][0]}) -> "
        f"{i.target} ({LAYERS[layer_of(i.target, package)][0]})"
        for a, path in modules.items()
        for i in package_imports(a, path, known)
        if layer_of(i.target, package) < layer_of(a, package)
    ]


def folder_cycles(package: Path = PACKAGE) -> list[str]:
    """Folders depend one way too: two folders that import each other are one piece in two
    places (within a layer the arrows are free, but they may not go round)."""
    graph: dict[str, set[str]] = {}
    for a, targets in import_graph(package).items():
        unit = unit_of(a, package)
        graph.setdefault(unit, set())
        graph[unit].update(u for u in (unit_of(b, package) for b in targets) if u != unit)
    return [_edges_within(c, graph) for c in cycles(graph)]


def engine_leaks(package: Path = PACKAGE) -> list[str]:
    """sherpa-onnx, NeMo, torch and ONNX (and the engine packages under backends/) are the
    engines' own; outside backends/ only the named sherpa-onnx components use one."""
    modules = source_modules(package)
    known = set(modules)
    leaks = []
    for name, path in modules.items():
        if name.startswith("streamasr.backends") or name in SHERPA_COMPONENTS:
            continue
        leaks += [f"{i.where(name)} -> {i.target}" for i in external_imports(name, path)
                  if i.target in ENGINE_PACKAGES]
        leaks += [f"{i.where(name)} -> {i.target}" for i in package_imports(name, path, known)
                  if i.target.startswith(("streamasr.backends.sherpa", "streamasr.backends.nemo"))]
    return leaks


def literal_dynamic_imports(package: Path = PACKAGE) -> list[str]:
    """`import_module("streamasr.x")` / `__import__("streamasr.x")`: write `import` instead,
    so the arrow is seen (a name that arrives as data is not literal, and not found here)."""
    return [
        f"{d.where(name)} imports {d.target!r} by name"
        for name, path in source_modules(package).items()
        for d in read_module(name, path).dynamic
    ]


#: Every rule the package must pass, by what a finding means
RULES = {
    "import cycles": module_cycles,
    "imports that run up a layer": upward_arrows,
    "folders that import each other": folder_cycles,
    "engine modules imported outside backends/": engine_leaks,
    "literal module names passed to import_module/__import__": literal_dynamic_imports,
}
