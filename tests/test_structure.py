"""The shape of the code: no import cycle between modules of `streamasr/`, no module over 500 lines.

What counts as an import: every `import` / `from ... import` that runs when the module is
imported, i.e. at module level, in class bodies and in module-level `if`/`try`/`with` blocks,
but not inside functions and not under `if TYPE_CHECKING:`. A cycle through such imports is
the real problem: which module is half-initialised depends on which one was imported first.
Imports inside functions run later, on a fully imported package, and are how optional
dependencies stay lazy; they are not counted.

`from package import name` is an edge to `package.name` when that is a module, else to
`package` itself. Importing `a.b.c` also runs `a/__init__.py` and `a/b/__init__.py`, but
those implicit edges are not counted: a package's `__init__` that re-exports its submodules
would otherwise form a "cycle" with each of them, which Python handles by design.

The graph is read from the source files with `ast`; nothing is imported.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "streamasr"
MAX_LINES = 500


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def source_modules() -> dict[str, Path]:
    """Every module of the package, by dotted name."""
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _import_time_statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """The statements that run when the module is imported (functions' bodies do not)."""
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        yield node
        if isinstance(node, ast.If):
            if not _is_type_checking(node.test):
                yield from _import_time_statements(node.body)
            yield from _import_time_statements(node.orelse)
        elif isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody):
                yield from _import_time_statements(block)
            for handler in node.handlers:
                yield from _import_time_statements(handler.body)
        elif isinstance(node, (ast.With, ast.ClassDef)):
            yield from _import_time_statements(node.body)


def imported_modules(name: str, path: Path, known: set[str]) -> set[str]:
    """The package modules `name` imports at import time."""
    is_package = path.name == "__init__.py"
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    found: set[str] = set()
    for node in _import_time_statements(tree.body):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")
                base = base if is_package else base[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                child = f"{target}.{alias.name}"
                found.add(child if child in known else target)
    return {m for m in found if m in known and m != name}


def import_graph() -> dict[str, set[str]]:
    modules = source_modules()
    known = set(modules)
    return {name: imported_modules(name, path, known) for name, path in modules.items()}


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


def test_the_graph_reader_sees_module_level_imports_only(tmp_path: Path) -> None:
    source = tmp_path / "probe.py"
    source.write_text(
        "from __future__ import annotations\n"
        "from typing import TYPE_CHECKING\n"
        "import streamasr.errors\n"
        "from streamasr import events\n"
        "from streamasr.audio import to_mono\n"
        "try:\n    from streamasr import tokens\nexcept ImportError:\n    pass\n"
        "if TYPE_CHECKING:\n    from streamasr import stream\n"
        "class A:\n    from streamasr import captions\n"
        "def f():\n    from streamasr import api\n",
        encoding="utf-8",
    )
    known = set(source_modules())
    assert imported_modules("streamasr.probe", source, known) == {
        "streamasr.errors", "streamasr.events", "streamasr.audio", "streamasr.tokens",
        "streamasr.captions",
    }


def test_the_cycle_finder_finds_a_cycle_and_only_cycles() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_inside_the_package() -> None:
    graph = import_graph()
    assert len(graph) > 50  # the whole package was read, not an empty folder
    found = cycles(graph)
    assert not found, "import cycles (module-level imports):\n" + "\n".join(
        _edges_within(c, graph) for c in found
    )


def test_no_module_is_over_500_lines() -> None:
    lengths = {
        name: len(path.read_text(encoding="utf-8").splitlines())
        for name, path in source_modules().items()
    }
    too_long = {name: n for name, n in sorted(lengths.items()) if n > MAX_LINES}
    assert not too_long, f"modules over {MAX_LINES} lines (split them along their seams): " + (
        ", ".join(f"{name} ({n})" for name, n in too_long.items())
    )
