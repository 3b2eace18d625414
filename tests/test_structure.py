"""The shape of the code: layers that hold, no import cycle, engines kept in backends/, no
module over 500 lines, and the walk of `--chunk` down the layers.

The rules and the import reader are in tests/structure_rules.py, as functions of a package
folder; here they run on the package, and on copies of it with a violation planted, so a
rule that could not see a kind of violation fails its own test instead of passing quietly.
"""

from __future__ import annotations

import ast
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from structure_rules import (
    LAYERS,
    PACKAGE,
    RULES,
    Import,
    cycles,
    engine_leaks,
    external_imports,
    folder_cycles,
    layer_of,
    literal_dynamic_imports,
    module_cycles,
    package_imports,
    read_module,
    source_modules,
    unit_of,
    upward_arrows,
)

MAX_LINES = 500


def _copy_package(tmp_path: Path) -> Path:
    """The package's modules (sources only) in a folder of their own."""
    copy = tmp_path / "streamasr"
    for path in source_modules().values():
        target = copy / path.relative_to(PACKAGE)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
    return copy


#: (where, code appended to it, the rule that must see it, its finding; "{line}" is the line
#: marked "# planted")
PLANTED: tuple[tuple[str, str, Callable[[Path], list[str]], str], ...] = (
    ("errors.py",
     "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
     "    from streamasr.commands import bench  # planted\n",
     upward_arrows, "streamasr.errors:{line} (TYPE_CHECKING) (foundations) -> "
     "streamasr.commands.bench (commands)"),
    ("audio/base.py",
     "def _late():\n    import importlib\n"
     "    return importlib.import_module('streamasr.commands.bench')  # planted\n",
     literal_dynamic_imports,
     "streamasr.audio.base:{line} imports 'streamasr.commands.bench' by name"),
    ("audio/base.py", "def _late():\n    return __import__('streamasr.cli')  # planted\n",
     literal_dynamic_imports, "streamasr.audio.base:{line} imports 'streamasr.cli' by name"),
    ("text/tokens.py",
     "def _pick(x):\n    match x:\n        case 1:\n"
     "            from streamasr import cli  # planted\n",
     upward_arrows, "streamasr.text.tokens:{line} (foundations) -> streamasr.cli (entry)"),
    ("text/tokens.py",
     "def _pick():\n    try:\n        pass\n    except* ValueError:\n"
     "        class _Late:\n            def f(self):\n"
     "                import streamasr.api  # planted\n",
     upward_arrows, "streamasr.text.tokens:{line} (foundations) -> streamasr.api (runs)"),
    ("session/stream.py",
     "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
     "    from streamasr.output import render  # planted\n",
     folder_cycles, "output/ -> session/; session/ -> output/"),
    ("text/tokens.py",
     "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import onnx  # planted\n",
     engine_leaks, "streamasr.text.tokens:{line} (TYPE_CHECKING) -> onnx"),
    ("output/render.py",
     "def _f():\n    with open('x'):\n        import torch.nn  # planted\n",
     engine_leaks, "streamasr.output.render:{line} -> torch"),
    ("session/stream.py", "def _f():\n    from streamasr.session import driver  # planted\n",
     module_cycles, "streamasr.session.driver -> streamasr.session.stream; "
     "streamasr.session.stream -> streamasr.session.driver"),
)


@pytest.mark.parametrize(("module", "code", "rule", "finding"), PLANTED,
                         ids=[f"{r.__name__}:{m}" for m, _, r, _ in PLANTED])
def test_each_rule_finds_its_planted_violation(
    tmp_path: Path, module: str, code: str, rule: Callable[[Path], list[str]], finding: str
) -> None:
    """Each violation written into a copy of the package is its rule's one finding, at the
    line of the planted import (the copy passes every rule before it is planted)."""
    copy = _copy_package(tmp_path)
    assert rule(copy) == []
    path = copy / module
    before = path.read_text(encoding="utf-8")
    path.write_text(before + "\n" + code, encoding="utf-8")
    line = next(n for n, text in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
                if text.endswith("# planted"))
    assert rule(copy) == [finding.format(line=line)]


def test_the_reader_sees_every_kind_of_import(tmp_path: Path) -> None:
    source = tmp_path / "probe.py"
    source.write_text(
        "from __future__ import annotations\n"                                  # 1
        "from typing import TYPE_CHECKING\n"                                    # 2
        "import streamasr.errors\n"                                             # 3
        "from streamasr.session import events\n"                                # 4
        "from streamasr.audio import to_mono\n"                                 # 5
        "try:\n    from streamasr.text import tokens\nexcept ImportError:\n    pass\n"  # 7
        "if TYPE_CHECKING:\n    from streamasr.session import stream\n"          # 11
        "else:\n    from . import api\n"                                        # 13
        "class A:\n    from .text import captions\n"                            # 15
        "def f(x):\n    match x:\n        case _:\n            import sherpa_onnx\n"  # 19
        "async def g():\n    async with x:\n        import importlib\n"        # 22
        "        importlib.import_module('streamasr.bench')\n",                  # 23
        encoding="utf-8",
    )
    known = set(source_modules())
    assert package_imports("streamasr.probe", source, known) == [
        Import("streamasr.errors", 3, False), Import("streamasr.session.events", 4, False),
        Import("streamasr.audio", 5, False), Import("streamasr.text.tokens", 7, False),
        Import("streamasr.session.stream", 11, True), Import("streamasr.api", 13, False),
        Import("streamasr.text.captions", 15, False),
    ]
    assert [i.target for i in external_imports("streamasr.probe", source)] == [
        "__future__", "typing", "sherpa_onnx", "importlib",
    ]
    assert read_module("streamasr.probe", source).dynamic == [
        Import("streamasr.bench", 23, False),
    ]


def test_the_cycle_finder_finds_a_cycle_and_only_cycles() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_package_keeps_every_rule() -> None:
    assert len(source_modules()) > 50  # the whole package was read, not an empty folder
    broken = {what: rule() for what, rule in RULES.items()}
    assert not any(broken.values()), "\n".join(
        f"{what}:\n  " + "\n  ".join(found) for what, found in broken.items() if found
    )


def test_the_layers_in_the_manual_are_the_tests_layers() -> None:
    manual = (PACKAGE.parent / "docs" / "development.md").read_text(encoding="utf-8")
    for name, units in LAYERS:
        line = next((ln for ln in manual.splitlines() if ln.startswith(f"| {name} |")), None)
        assert line is not None, f"docs/development.md has no row for the {name} layer"
        for unit in units:
            assert f"`{unit}`" in line, f"docs/development.md: {unit} missing from {name}"


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
        ("streamasr.commands.options", "build", "preflight"),
        ("streamasr.commands.options", "preflight", "make_plan"),
        ("streamasr.backends.plan", "make_plan", "engine_options"),
        ("streamasr.backends.registry", "engine_options", "value"),
        ("streamasr.backends.options", "EngineOption.value", None),
    ),
    (  # file: the plan loads it; the engine reads its settings and picks the export
        ("streamasr.commands.options", "build", "load"),
        ("streamasr.commands.options", "Prepared.load", "load"),
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
