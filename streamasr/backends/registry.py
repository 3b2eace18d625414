"""Which engine runs a model: the backend registry and the one loader every command uses.

Commands never import an engine. They pass the model as the user typed it (a bundled name,
a catalog name, a path) and the options; the registry asks each backend whether it
recognises the model (file names only, no engine import), or takes `--backend NAME`, and the
chosen backend loads it. Backends outside this package plug in by an import string
`module:ATTRIBUTE` naming a `BackendEntry` (what tests do), or through the `streamasr.backends`
entry-point group of an installed package.
"""

from __future__ import annotations

import importlib
from importlib import metadata

from streamasr.backends.base import BackendEntry, EngineOptions, Recognizer
from streamasr.errors import DependencyError, UsageError

ENTRY_POINT_GROUP = "streamasr.backends"


def _builtin() -> list[BackendEntry]:
    """The engines that ship with streamasr, most specific first (sherpa-onnx is the default)."""
    from streamasr.backends import nemo, sherpa

    return [nemo.BACKEND, sherpa.BACKEND]


def _plugins() -> list[BackendEntry]:
    found = []
    for point in metadata.entry_points(group=ENTRY_POINT_GROUP):
        entry = point.load()
        if isinstance(entry, BackendEntry):
            found.append(entry)
    return found


def available() -> list[BackendEntry]:
    """Every backend that can be asked for by name."""
    return _builtin() + _plugins()


def backend_names() -> list[str]:
    """Names (and aliases) accepted by `--backend`."""
    names: list[str] = []
    for entry in available():
        names.extend((entry.name, *entry.aliases))
    return names


def find_backend(name: str) -> BackendEntry:
    """A backend by name or alias, or by import string `module:ATTRIBUTE`."""
    for entry in available():
        if name == entry.name or name in entry.aliases:
            return entry
    if ":" in name:
        return _import_entry(name)
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
    entry = getattr(module, attribute, None)
    if not isinstance(entry, BackendEntry):
        raise UsageError(f"--backend {spec}: {attribute!r} in {module_name} is not a BackendEntry")
    return entry


def choose_backend(model: str | None, name: str | None = None) -> BackendEntry:
    """The backend asked for, else the first that recognises the model, else sherpa-onnx."""
    if name:
        return find_backend(name)
    from streamasr import catalog

    released = catalog.find(model) if model else None
    if released is not None:
        return find_backend(released.engine)
    entries = available()
    for entry in entries:
        if entry.recognises(model):
            return entry
    return next(e for e in entries if e.name == "sherpa-onnx")


def load_recognizer(
    model: str | None, options: EngineOptions, backend: str | None = None
) -> Recognizer:
    """Load `model` with the backend that fits it: the only way commands open an engine."""
    return choose_backend(model, backend).load(model, options)
