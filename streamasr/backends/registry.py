"""Which engine runs a model: the backend registry, from which every load plan picks its
backend (backends/plan.py loads by it).

Commands never import an engine. They pass the model as the user typed it (a bundled name,
a catalog name, a path) and the options; the registry asks each backend whether it
recognises the model (file names only, no engine import), or takes `--backend NAME`, and the
chosen backend loads it. Backends outside this package plug in by an import string
`module:ATTRIBUTE` naming a `BackendEntry` (what tests do), or through the `streamasr.backends`
entry-point group of an installed package.

A plugin fails alone. Entry points are imported only when their backend is asked for by name
(or when no built-in backend recognises the model), so a broken one never stops the
built-in engines; asked for, it fails in one line naming the plugin, its package and the
error. What a plugin raises while it decodes becomes one line naming the backend too, after
the streaming loop has flushed what was recognised before it (see `GuardedRecognizer`).
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from streamasr.analysis.latency import LatencyBudget
from streamasr.backends.base import (
    BackendEntry,
    BudgetSettings,
    EngineOptions,
    Released,
)
from streamasr.backends.guarded import PluginError, guarded_entry, said
from streamasr.distribution.catalog import CatalogEntry
from streamasr.distribution.hooks import InstallHooks
from streamasr.distribution.local_models import FolderFacts
from streamasr.errors import DependencyError, UsageError

if TYPE_CHECKING:
    from importlib import metadata

log = logging.getLogger("streamasr")

ENTRY_POINT_GROUP = "streamasr.backends"
BUILTIN_NAMES = ("nemo", "sherpa-onnx")



def _guarded(entry: BackendEntry) -> BackendEntry:
    """A plugin's entry behind the guard (backends/guarded.py); built-in engines as they are."""
    return entry if entry.name in BUILTIN_NAMES else guarded_entry(entry)


def _builtin() -> list[BackendEntry]:
    """The engines that ship with streamasr, most specific first (sherpa-onnx is the default)."""
    from streamasr.backends.nemo import entry as nemo
    from streamasr.backends.sherpa import entry as sherpa

    return [nemo.BACKEND, sherpa.BACKEND]


def _entry_points() -> list[metadata.EntryPoint]:
    """The installed plugins' entry points, not imported (a broken one costs nothing here);
    listing them reads every installed package's metadata, so it is done only when asked."""
    from importlib import metadata

    try:
        points = list(metadata.entry_points(group=ENTRY_POINT_GROUP))
    except Exception as exc:  # a package's unreadable entry_points.txt
        log.warning("backend plugins cannot be listed (%s); only built-in backends are used",
                    said(exc))
        return []
    builtin = set(BUILTIN_NAMES)
    return [p for p in points if p.name not in builtin]


def _package(point: metadata.EntryPoint) -> str:
    dist = getattr(point, "dist", None)
    name = getattr(dist, "name", None) if dist is not None else None
    return str(name) if name else point.module


def _load_point(point: metadata.EntryPoint) -> BackendEntry:
    """Import one plugin's entry point; any failure is one PluginError naming it."""
    package = _package(point)
    where = f"backend plugin {point.name!r} ({point.value}, from package {package})"
    fix = f"fix or uninstall it (pip uninstall {package})"
    try:
        entry = point.load()
    except (Exception, SystemExit) as exc:
        raise PluginError(f"{where} cannot be loaded: {said(exc)}; {fix}") from None
    if not isinstance(entry, BackendEntry):
        raise PluginError(
            f"{where} is a {type(entry).__name__}, not a streamasr BackendEntry; {fix}"
        )
    return entry


def _plugin_named(name: str) -> BackendEntry | None:
    """The installed plugin whose entry point (or loaded entry) is called `name`, imported now."""
    for point in _entry_points():
        if point.name == name:
            return _guarded(_load_point(point))
    return None


def available() -> list[BackendEntry]:
    """Every backend that can be asked for by name and loads (broken plugins are left out
    with a warning; asked for by name, they fail with their error)."""
    entries = _builtin()
    for point in _entry_points():
        try:
            entries.append(_guarded(_load_point(point)))
        except PluginError as exc:
            log.warning("%s", exc)
    return entries


def backend_names() -> list[str]:
    """Names (and aliases) accepted by `--backend`; plugins by their entry point names,
    without importing them."""
    names: list[str] = []
    for entry in _builtin():
        names.extend((entry.name, *entry.aliases))
    names.extend(point.name for point in _entry_points() if point.name not in names)
    return names


def find_backend(name: str) -> BackendEntry:
    """A backend by name or alias, or by import string `module:ATTRIBUTE`."""
    for entry in _builtin():
        if name == entry.name or name in entry.aliases:
            return entry
    plugin = _plugin_named(name)
    if plugin is not None:
        return plugin
    if ":" in name:
        return _guarded(_import_entry(name))
    raise UsageError(
        f"--backend {name!r} is not known; use one of: {', '.join(backend_names())} "
        "(or module:ATTRIBUTE naming a streamasr BackendEntry)"
    )


def _import_entry(spec: str) -> BackendEntry:
    module_name, _, attribute = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise DependencyError(
            f"--backend {spec}: module {module_name!r} cannot be imported ({exc}); "
            "check the name and that it is on PYTHONPATH"
        ) from exc
    except (Exception, SystemExit) as exc:
        raise PluginError(
            f"--backend {spec}: importing {module_name} failed: {said(exc)}; fix the module"
        ) from None
    entry = getattr(module, attribute, None)
    if not isinstance(entry, BackendEntry):
        raise UsageError(f"--backend {spec}: {attribute!r} in {module_name} is not a BackendEntry")
    return entry


def choose_backend(model: str | None, name: str | None = None) -> BackendEntry:
    """The backend asked for, else the first that recognises the model, else sherpa-onnx.

    Plugins are imported only when no built-in backend recognises the model.
    """
    if name:
        return find_backend(name)
    from streamasr.distribution import catalog

    release = catalog.find(model) if model else None
    if release is not None:
        return find_backend(release.engine)
    builtin = _builtin()
    for entry in builtin:
        if entry.name != "sherpa-onnx" and entry.recognises(model):
            return entry
    default = next(e for e in builtin if e.name == "sherpa-onnx")
    if default.recognises(model):
        return default
    for entry in available()[len(builtin):]:
        if entry.recognises(model):
            return entry
    return default


def settings_budget(settings: BudgetSettings) -> LatencyBudget | None:
    """The latency budget of settings alone (no model read), by the built-in engine whose
    settings they are; None when no engine claims them."""
    for entry in _builtin():
        if entry.arithmetic is not None:
            budget = entry.arithmetic(settings)
            if budget is not None:
                return budget
    return None


def install_hooks() -> InstallHooks:
    """What the built-in engines do to a model the store installs (`models pull`, a Ray
    node's pull): each engine's check of a single-file model, and its preparation of a folder."""
    entries = _builtin()

    def check_file(path: Path) -> None:
        for entry in entries:
            if entry.check_file is not None:
                entry.check_file(path)

    def prepare_folder(directory: Path) -> None:
        for entry in entries:
            if entry.prepare_folder is not None:
                entry.prepare_folder(directory)

    return InstallHooks(check_file=check_file, prepare_folder=prepare_folder)


def released(release: CatalogEntry) -> Released:
    """A catalog model as the engine that runs it reads the catalog's record of it."""
    entry = find_backend(release.engine)
    if entry.released is None:
        raise UsageError(f"the {entry.name} backend reads no released models ({release.name})")
    return entry.released(release)


def describe_folder(directory: Path) -> FolderFacts:
    """Engine, kind, token type and chunks of a local model folder, by the engine whose
    folder it is; unknown facts when none says."""
    for entry in _builtin():
        if entry.describe is not None:
            facts = entry.describe(directory)
            if facts is not None:
                return facts
    return FolderFacts()


def installed(plugins: bool = True) -> list[BackendEntry]:
    """The built-in backends and every installed plugin that loads, quietly: for building
    the command line's options (a broken plugin says what is wrong when it is asked for).
    `plugins=False`: the built-in ones only, no plugin listed or imported."""
    entries = _builtin()
    if not plugins:
        return entries
    for point in _entry_points():
        try:
            entries.append(_load_point(point))
        except PluginError as exc:
            log.debug("%s", exc)
    return entries


def engine_options(
    entry: BackendEntry,
    given: Mapping[str, object] | None = None,
    *,
    threads: int | None = None,
    device: str = "cpu",
    known: Sequence[BackendEntry] = (),
    sweep: bool = False,
) -> EngineOptions:
    """The EngineOptions `entry` runs with: `given` (option name -> text or value) parsed by
    the entry's own declarations. An option it does not declare, or a device it cannot use,
    is a UsageError naming who owns the option (looked up in `known` and the installed
    backends) and, where the entry has one, its equivalent. With `sweep`, an option the entry
    sweeps holds the tuple of its values (`16,32` -> (16, 32)), and `swept` names it."""
    from streamasr.backends.base import DEFAULT_THREADS

    given = {name: value for name, value in (given or {}).items() if value is not None}
    own: dict[str, object] = {}
    swept = None
    for name, value in given.items():
        option = entry.option(name)
        if option is None:
            raise UsageError(refusal(entry, name, [*known, *installed()]))
        if sweep and option.sweep:
            swept, own[name] = name, tuple(option.sweep_values(str(value)))
        else:
            own[name] = option.value(value)
    options = EngineOptions(
        threads=DEFAULT_THREADS if threads is None else threads, device=device, own=own,
        swept=swept,
    )
    if device != "cpu" and "cuda" not in entry.devices:
        raise UsageError(
            f"--device {device}: {entry.title} models run on the CPU only (the {entry.name} "
            f"backend cannot use CUDA); drop --device, or use a backend that can: "
            f"{', '.join(_cuda_backends()) or 'none installed'}"
        )
    return options


def _cuda_backends() -> list[str]:
    return [e.name for e in _builtin() if "cuda" in e.devices]


def refusal(entry: BackendEntry, name: str, known: Sequence[BackendEntry]) -> str:
    """One line: `name` is not an option of `entry`; whose it is, and what to use instead."""
    owners = [e for e in known if e.option(name) is not None and e.name != entry.name]
    unique = list({e.name: e for e in owners}.values())
    declared = next((e.option(name) for e in unique), None)
    flag = "--" + name.replace("_", "-")
    owned = " or ".join(e.name for e in unique) or "no installed"
    where = f"{flag} belongs to the {owned} backend"
    if declared is None:
        return f"{where}; the {entry.name} backend has no option {flag}; drop it"
    about = f"{flag} {declared.about}" if declared.about else where
    kind = declared.kind
    equivalent = next((o for o in entry.options if kind and o.kind == kind), None)
    if equivalent is not None:
        said = f"{equivalent.flag} {equivalent.example}".rstrip()
        return f"{about}; for this {entry.title} model the equivalent is {said} ({where})"
    if kind in entry.lacks:
        return f"{entry.lacks[kind]}; drop {flag} ({where})"
    article = "an" if entry.title[:1].lower() in "aeiou" else "a"
    lacking = f"this is {article} {entry.title} model with no {declared.label or name} setting"
    return f"{about}; {lacking}: the {entry.name} backend has none ({where})"
