"""The shape of the code: layers that hold, no import cycle, engines kept in backends/, no
module over 500 lines.

What counts as an import: every `import` / `from ... import` in a module, at module level or
inside a function (an import in a function is still an arrow between the two modules: it runs
later, but the modules depend on each other all the same), except under `if TYPE_CHECKING:`,
which never runs. `import_time_graph` keeps the narrower view too (module level only), for the
question of which module is half-initialised when a cycle is imported.

`from package import name` is an edge to `package.name` when that is a module, else to
`package` itself. Importing `a.b.c` also runs `a/__init__.py` and `a/b/__init__.py`, but
those implicit edges are not counted: a package's `__init__` that re-exports its submodules
would otherwise form a "cycle" with each of them, which Python handles by design.

The layers are listed in docs/development.md ("Layers"); `LAYERS` below is that list. The
graph is read from the source files with `ast`; nothing is imported.
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


def _import_time_statements(
    body: list[ast.stmt], functions: bool = False
) -> Iterator[ast.stmt]:
    """The statements that run when the module is imported (functions' bodies do not), or,
    with `functions`, every statement that can run (all but `if TYPE_CHECKING:` blocks)."""
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if functions:
                yield from _import_time_statements(node.body, functions)
            continue
        yield node
        if isinstance(node, ast.If):
            if not _is_type_checking(node.test):
                yield from _import_time_statements(node.body, functions)
            yield from _import_time_statements(node.orelse, functions)
        elif isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody):
                yield from _import_time_statements(block, functions)
            for handler in node.handlers:
                yield from _import_time_statements(handler.body, functions)
        elif isinstance(node, (ast.With, ast.AsyncWith, ast.ClassDef)):
            yield from _import_time_statements(node.body, functions)
        elif functions and isinstance(node, (ast.For, ast.AsyncFor, ast.While)):
            yield from _import_time_statements(node.body + node.orelse, functions)


def imported_modules(
    name: str, path: Path, known: set[str], functions: bool = False, external: bool = False
) -> set[str]:
    """The package modules `name` imports at import time (with `functions`, anywhere but
    under TYPE_CHECKING); with `external`, the top-level names of other packages too."""
    is_package = path.name == "__init__.py"
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    found: set[str] = set()
    for node in _import_time_statements(tree.body, functions):
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
    if external:
        return {m.split(".")[0] for m in found if m and not m.startswith("streamasr")}
    return {m for m in found if m in known and m != name}


def import_graph(functions: bool = True) -> dict[str, set[str]]:
    """Module -> the package modules it imports (anywhere that can run, by default)."""
    modules = source_modules()
    known = set(modules)
    return {
        name: imported_modules(name, path, known, functions) for name, path in modules.items()
    }


def import_time_graph() -> dict[str, set[str]]:
    return import_graph(functions=False)


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
        "from streamasr.session import events\n"
        "from streamasr.audio import to_mono\n"
        "try:\n    from streamasr.text import tokens\nexcept ImportError:\n    pass\n"
        "if TYPE_CHECKING:\n    from streamasr.session import stream\n"
        "class A:\n    from streamasr.text import captions\n"
        "def f():\n    from streamasr import api\n",
        encoding="utf-8",
    )
    known = set(source_modules())
    assert imported_modules("streamasr.probe", source, known) == {
        "streamasr.errors", "streamasr.session.events", "streamasr.audio", "streamasr.text.tokens",
        "streamasr.text.captions",
    }


def test_the_cycle_finder_finds_a_cycle_and_only_cycles() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_full_graph_sees_imports_inside_functions_but_not_type_checking(
    tmp_path: Path,
) -> None:
    source = tmp_path / "probe.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from streamasr.session import stream\n"
        "def f():\n    from streamasr import api\n    for _ in ():\n"
        "        import streamasr.text.tokens\n    import sherpa_onnx\n",
        encoding="utf-8",
    )
    known = set(source_modules())
    assert imported_modules("streamasr.probe", source, known, functions=True) == {
        "streamasr.api", "streamasr.text.tokens",
    }
    assert imported_modules("streamasr.probe", source, known, True, external=True) == {
        "typing", "sherpa_onnx",
    }


def test_no_import_cycle_inside_the_package() -> None:
    """No cycle, counting imports inside functions: a lazy import is still a dependency."""
    graph = import_graph()
    assert len(graph) > 50  # the whole package was read, not an empty folder
    found = cycles(graph)
    assert not found, "import cycles (imports anywhere but under TYPE_CHECKING):\n" + "\n".join(
        _edges_within(c, graph) for c in found
    )


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
        "extras", "whole_file",
    })),
)

#: Engine packages, imported only under backends/ and by the named sherpa-onnx components
ENGINE_PACKAGES = frozenset({"sherpa_onnx", "nemo", "torch", "onnxruntime"})
SHERPA_COMPONENTS = frozenset({"streamasr.output.punctuation", "streamasr.vad.silero"})


def unit_of(module: str) -> str:
    """A module's place in LAYERS: its folder under streamasr/ ("server/"), or its name."""
    parts = module.split(".")
    if len(parts) == 1:
        return "streamasr"
    if (PACKAGE / parts[1]).is_dir():
        return parts[1] + "/"
    return parts[1]


def layer_of(module: str) -> int:
    unit = unit_of(module)
    for depth, (_name, units) in enumerate(LAYERS):
        if unit in units:
            return depth
    raise AssertionError(f"{module} ({unit}) is in no layer: add it to LAYERS and to "
                         "docs/development.md")


def test_every_module_has_a_layer_and_no_arrow_runs_up() -> None:
    upward = [
        f"{a} ({LAYERS[layer_of(a)][0]}) -> {b} ({LAYERS[layer_of(b)][0]})"
        for a, targets in sorted(import_graph().items())
        for b in sorted(targets)
        if layer_of(b) < layer_of(a)
    ]
    assert not upward, "imports that run up a layer:\n" + "\n".join(upward)


def test_no_cycle_between_folders() -> None:
    """Folders depend one way too: two folders that import each other are one piece in two
    places (within a layer the arrows are free, but they may not go round)."""
    graph: dict[str, set[str]] = {}
    for a, targets in import_graph().items():
        graph.setdefault(unit_of(a), set())
        graph[unit_of(a)].update(unit_of(b) for b in targets if unit_of(b) != unit_of(a))
    found = cycles(graph)
    assert not found, "folders that import each other:\n" + "\n".join(
        _edges_within(c, graph) for c in found
    )


def test_the_layers_in_the_manual_are_the_tests_layers() -> None:
    manual = (PACKAGE.parent / "docs" / "development.md").read_text(encoding="utf-8")
    for name, units in LAYERS:
        line = next((ln for ln in manual.splitlines() if ln.startswith(f"| {name} |")), None)
        assert line is not None, f"docs/development.md has no row for the {name} layer"
        for unit in units:
            assert f"`{unit}`" in line, f"docs/development.md: {unit} missing from {name}"


def test_engines_are_imported_only_by_backends() -> None:
    """sherpa-onnx, NeMo and torch (and the engine packages under backends/) are the
    engines' own; outside backends/ only the named sherpa-onnx components use one."""
    modules = source_modules()
    known = set(modules)
    leaks = []
    for name, path in modules.items():
        if name.startswith("streamasr.backends") or name in SHERPA_COMPONENTS:
            continue
        outside = imported_modules(name, path, known, functions=True, external=True)
        inside = imported_modules(name, path, known, functions=True)
        leaks += [f"{name} -> {m}" for m in sorted(outside & ENGINE_PACKAGES)]
        leaks += [
            f"{name} -> {m}" for m in sorted(inside)
            if m.startswith(("streamasr.backends.sherpa", "streamasr.backends.nemo"))
        ]
    assert not leaks, "engine modules imported outside backends/:\n" + "\n".join(leaks)


def test_no_module_is_over_500_lines() -> None:
    lengths = {
        name: len(path.read_text(encoding="utf-8").splitlines())
        for name, path in source_modules().items()
    }
    too_long = {name: n for name, n in sorted(lengths.items()) if n > MAX_LINES}
    assert not too_long, f"modules over {MAX_LINES} lines (split them along their seams): " + (
        ", ".join(f"{name} ({n})" for name, n in too_long.items())
    )
