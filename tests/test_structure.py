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


# --- the walk of --chunk ------------------------------------------------------------------

#: How `--chunk 16` goes from the command line to the sherpa-onnx engine, call by call, for
#: `file` (parsed by the plan, then loaded) and `latency --model DIR --measure` (the engine's
#: budget, the load, the measurement). Each hop is (module, function, the name it calls
#: next); the last hop of a walk calls nothing further. The same walks, in words, are in
#: docs/development.md ("The walk of --chunk").
CHUNK_WALKS: tuple[tuple[tuple[str, str, str | None], ...], ...] = (
    (  # file: the flag's text parsed by the chosen engine's declaration, into the plan
        ("streamasr.commands.options", "open_planned", "load_plan"),
        ("streamasr.commands.options", "load_plan", "make_plan"),
        ("streamasr.backends.plan", "make_plan", "engine_options"),
        ("streamasr.backends.registry", "engine_options", "value"),
        ("streamasr.backends.options", "EngineOption.value", None),
    ),
    (  # file: the plan loads it; the engine reads its settings and picks the export
        ("streamasr.commands.options", "open_planned", "load"),
        ("streamasr.backends.plan", "LoadPlan.load", "load"),
        ("streamasr.backends.sherpa.entry", "_load", "resolve_model"),
        ("streamasr.backends.sherpa.modeldir", "resolve_model", None),
    ),
    (
        ("streamasr.backends.sherpa.entry", "_load", "of"),
        ("streamasr.backends.sherpa.options", "SherpaSettings.of", "complete"),
        ("streamasr.backends.options", "complete", None),
    ),
    (
        ("streamasr.backends.sherpa.entry", "_load", "SherpaRecognizer"),
        ("streamasr.backends.sherpa.engine", "SherpaRecognizer.__init__", None),
    ),
    (  # latency: parsed by the same plan
        ("streamasr.commands.latency", "build_budget", "_backend_budget"),
        ("streamasr.commands.latency", "_backend_budget", "make_plan"),
        ("streamasr.backends.plan", "make_plan", None),
    ),
    (  # latency: the engine's declared budget of the export --chunk picks
        ("streamasr.commands.latency", "_backend_budget", "budget"),
        ("streamasr.backends.sherpa.entry", "_budget", "model_budget"),
        ("streamasr.backends.sherpa.model_budget", "model_budget", "resolve_model"),
        ("streamasr.backends.sherpa.modeldir", "resolve_model", None),
    ),
    (  # latency --measure: loaded by the plan, stepped through the stepping core
        ("streamasr.commands.latency", "_backend_budget", "load"),
        ("streamasr.backends.plan", "LoadPlan.load", None),
    ),
    (
        ("streamasr.commands.latency", "_backend_budget", "measure_engine"),
        ("streamasr.session.measure", "measure_engine", "engine_step"),
        ("streamasr.session.batch", "engine_step", "decode_batch"),
        ("streamasr.backends.sherpa.engine", "SherpaRecognizer.decode_batch", None),
    ),
)


def _function(module: str, qualname: str) -> ast.FunctionDef:
    """The function `qualname` ("f" or "Class.f") defined in `module`."""
    tree = ast.parse(source_modules()[module].read_text(encoding="utf-8"))
    body: list[ast.stmt] = tree.body
    *owners, name = qualname.split(".")
    for owner in owners:
        body = next(n for n in body if isinstance(n, ast.ClassDef) and n.name == owner).body
    found = [n for n in body if isinstance(n, ast.FunctionDef) and n.name == name]
    assert found, f"{module} has no function {qualname}: update CHUNK_WALKS"
    return found[0]


def _called_names(function: ast.FunctionDef) -> set[str]:
    """Every name called in a function: f(...) and x.f(...)."""
    names = set()
    for node in ast.walk(function):
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name):
                names.add(func.id)
            elif isinstance(func, ast.Attribute):
                names.add(func.attr)
    return names


def _lands_on(called: str, module: str, qualname: str) -> bool:
    """A call named `called` reaches `qualname` in `module`: by its name, its class's name
    (a constructor), or an engine entry's hook (`load=_load`)."""
    name = qualname.split(".")[-1]
    if called in (name, qualname.split(".")[0]):
        return True
    source = source_modules()[module].read_text(encoding="utf-8")
    return f"{called}={name}," in source.replace(" ", "")


def _walk_faults(modules: list[str]) -> list[str]:
    """What is wrong with a walk through `modules`: a file or folder entered again after the
    walk left it (A -> B -> A), or a step up a layer."""
    faults = []
    for kind, places in (("file", modules), ("folder", [unit_of(m) for m in modules])):
        runs = [p for i, p in enumerate(places) if i == 0 or places[i - 1] != p]
        faults += [f"re-enters {kind} {p}" for i, p in enumerate(runs) if p in runs[:i]]
    depths = [layer_of(m) for m in modules]
    if depths != sorted(depths):
        faults.append("runs up a layer")
    return faults


def test_the_walk_checker_finds_a_walk_that_comes_back() -> None:
    # latency --measure as it was: the engine's budget hook measured through analysis/,
    # which stepped the engine again
    old = ["streamasr.commands.latency", "streamasr.backends.sherpa.entry",
           "streamasr.backends.sherpa.model_budget", "streamasr.analysis.latency",
           "streamasr.backends.sherpa.engine"]
    assert _walk_faults(old) == ["re-enters folder backends/", "runs up a layer"]
    assert _walk_faults(["streamasr.backends.plan", "streamasr.backends.registry",
                         "streamasr.backends.plan"]) == ["re-enters file streamasr.backends.plan"]
    assert _walk_faults(["streamasr.commands.options", "streamasr.commands.options",
                         "streamasr.backends.plan"]) == []


def test_the_walk_of_chunk_is_real_and_goes_down_without_coming_back() -> None:
    """Each hop of each walk calls the next (so a stale walk fails here); along a walk the
    layers only go down, and a file or folder once left is never entered again (A -> B -> A).
    The hops are listed by hand: this checks the listed walks, it does not find new routes."""
    for walk in CHUNK_WALKS:
        for (module, qualname, called), (nxt, nxt_name, _) in zip(walk, walk[1:], strict=False):
            assert called is not None, f"{module}.{qualname} ends its walk early"
            assert called in _called_names(_function(module, qualname)), (
                f"{module}.{qualname} no longer calls {called}: update CHUNK_WALKS"
            )
            _function(nxt, nxt_name)
            assert _lands_on(called, nxt, nxt_name), f"{called} does not reach {nxt}.{nxt_name}"
        _function(*walk[-1][:2])
        assert walk[-1][2] is None
        modules = [module for module, _, _ in walk]
        assert not _walk_faults(modules), f"{_walk_faults(modules)}: " + " -> ".join(modules)
