"""Which engine runs a model: the backend registry and the one loader every command uses.

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

import dataclasses
import importlib
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from streamasr.backends.base import (
    BackendEntry,
    BackendInfo,
    EngineOptions,
    Hypothesis,
    Recognizer,
    RecognizerStream,
)
from streamasr.errors import DependencyError, StreamAsrError, UsageError
from streamasr.printable import printable

if TYPE_CHECKING:
    from importlib import metadata

log = logging.getLogger("streamasr")

ENTRY_POINT_GROUP = "streamasr.backends"
BUILTIN_NAMES = ("nemo", "sherpa-onnx")
_MESSAGE_CHARS = 300  # a plugin's own error text is cut here: the line stays one line

T = TypeVar("T")


class PluginError(StreamAsrError):
    """A backend plugin cannot be loaded (import failed, wrong object) or failed to decode."""


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
                    _said(exc))
        return []
    builtin = set(BUILTIN_NAMES)
    return [p for p in points if p.name not in builtin]


def _said(exc: BaseException) -> str:
    """An exception as one short line: its type and its first words."""
    text = " ".join(str(exc).split())
    if len(text) > _MESSAGE_CHARS:
        text = text[: _MESSAGE_CHARS - 3] + "..."
    kind = type(exc).__name__
    return f"{kind}: {text}" if text else kind


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
        raise PluginError(f"{where} cannot be loaded: {_said(exc)}; {fix}") from None
    if not isinstance(entry, BackendEntry):
        raise PluginError(
            f"{where} is a {type(entry).__name__}, not a streamasr BackendEntry; {fix}"
        )
    return entry


def _plugin_named(name: str) -> BackendEntry | None:
    """The installed plugin whose entry point (or loaded entry) is called `name`, imported now."""
    for point in _entry_points():
        if point.name == name:
            return _guarded_entry(_load_point(point))
    return None


def available() -> list[BackendEntry]:
    """Every backend that can be asked for by name and loads (broken plugins are left out
    with a warning; asked for by name, they fail with their error)."""
    entries = _builtin()
    for point in _entry_points():
        try:
            entries.append(_guarded_entry(_load_point(point)))
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
        return _guarded_entry(_import_entry(name))
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
            f"--backend {spec}: importing {module_name} failed: {_said(exc)}; fix the module"
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

    released = catalog.find(model) if model else None
    if released is not None:
        return find_backend(released.engine)
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


def load_recognizer(
    model: str | None,
    options: EngineOptions,
    backend: str | None = None,
    entry: BackendEntry | None = None,
) -> Recognizer:
    """Load `model` with the backend that fits it: the only way commands open an engine.
    `entry`: the backend already chosen for the options (so it is not chosen twice)."""
    return (entry or choose_backend(model, backend)).load(model, options)


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
) -> EngineOptions:
    """The EngineOptions `entry` runs with: `given` (option name -> text or value) parsed by
    the entry's own declarations. An option it does not declare, or a device it cannot use,
    is a UsageError naming who owns the option (looked up in `known` and the installed
    backends) and, where the entry has one, its equivalent."""
    from streamasr.backends.base import DEFAULT_THREADS

    given = {name: value for name, value in (given or {}).items() if value is not None}
    own: dict[str, object] = {}
    for name, value in given.items():
        option = entry.option(name)
        if option is None:
            raise UsageError(refusal(entry, name, [*known, *installed()]))
        own[name] = option.value(value)
    options = EngineOptions(
        threads=DEFAULT_THREADS if threads is None else threads, device=device, own=own
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


# --- plugins fail alone ------------------------------------------------------------------


def _guarded_entry(entry: BackendEntry) -> BackendEntry:
    """A plugin's entry whose `recognises`, `load` and recognizer turn failures into
    one-line PluginErrors naming the backend (built-in engines are trusted as they are)."""
    if entry.name in BUILTIN_NAMES:
        return entry
    name = entry.name

    def recognises(model: str | None) -> bool:
        try:
            return bool(entry.recognises(model))
        except Exception as exc:
            log.debug("backend %s could not tell whether it reads %s: %s", name, model, exc)
            return False

    def load(model: str | None, options: EngineOptions) -> Recognizer:
        try:
            recognizer = entry.load(model, options)
        except StreamAsrError:
            raise
        except Exception as exc:
            raise PluginError(
                f"backend {name!r} failed to load model {model!r}: {_said(exc)}"
            ) from None
        return GuardedRecognizer(name, recognizer, checked_info(name, recognizer))

    return dataclasses.replace(entry, recognises=recognises, load=load)


_BUG = "this is a bug in the backend (report it to the backend's authors)"
_MAX_RATE_HZ = 768_000  # the widest rate an audio input may have (audio/inputs.py)


def checked_info(backend: str, recognizer: Recognizer) -> BackendInfo:
    """The recognizer's BackendInfo, once, if its sizes are numbers the core can compute with
    (a NaN chunk or a sample rate of 0 would fail deep inside the loop as a traceback)."""

    def bad(what: str) -> PluginError:
        return PluginError(f"backend {backend!r} reports {what}; {_BUG}")

    def read(what: str, get: Callable[[], T]) -> T:
        try:
            return get()
        except Exception as exc:
            raise _failure(backend, what, exc) from None

    info = read("info", lambda: recognizer.info)
    if not isinstance(info, BackendInfo):
        raise bad(f"info of type {type(info).__name__}, not a BackendInfo")
    rate = info.sample_rate_hz
    if isinstance(rate, bool) or not isinstance(rate, int) or not 0 < rate <= _MAX_RATE_HZ:
        raise bad(f"sample_rate_hz = {rate!r} (must be a whole number of Hz, 1-{_MAX_RATE_HZ})")
    sizes: dict[str, object] = {
        "chunk_s": info.chunk_s,
        "output_frame_s": info.output_frame_s,
        "recognizer chunk_s": read("chunk_s", lambda: recognizer.chunk_s),
    }
    if info.first_step_s is not None:
        sizes["first_step_s"] = info.first_step_s
    for what, value in sizes.items():
        if not _seconds(value) or value <= 0:  # type: ignore[operator]
            raise bad(f"{what} = {value!r} (must be a finite number of seconds > 0)")
    if not _seconds(info.lookahead_s) or info.lookahead_s < 0:
        raise bad(f"lookahead_s = {info.lookahead_s!r} (must be a finite number of seconds >= 0)")
    names = {"backend": info.backend, "model_name": info.model_name, "language": info.language}
    for what, value in names.items():
        if not isinstance(value, str):
            raise bad(f"{what} of type {type(value).__name__}, not str")
    # shown in summaries, tables and logs: no control characters reach a terminal from them
    return dataclasses.replace(
        info,
        backend=printable(info.backend),
        model_name=printable(info.model_name),
        language=printable(info.language),
    )


def _seconds(value: object) -> bool:
    """A finite int or float that is not a bool."""
    return (
        not isinstance(value, bool)
        and isinstance(value, (int, float))
        and math.isfinite(value)
    )


def _failure(backend: str, what: str, exc: Exception) -> PluginError:
    return PluginError(
        f"backend {backend!r} failed in {what}: {_said(exc)}; the text recognised before "
        "it is kept. Report it to the backend's authors"
    )


class GuardedStream:
    """A plugin's stream: the first exception becomes a PluginError naming the backend.

    After that the stream is spent: it takes no more audio, steps no more and keeps
    answering its last good hypothesis, so the streaming loop's flush (Ctrl-C's path)
    still emits what was recognised before the failure.
    """

    def __init__(self, backend: str, inner: RecognizerStream) -> None:
        self.backend = backend
        self.inner = inner
        self.failed = False
        self._last = Hypothesis(text="")

    def _call(self, what: str, call: Callable[[], T], spent: T) -> T:
        if self.failed:
            return spent
        try:
            return call()
        except StreamAsrError:
            self.failed = True
            raise
        except Exception as exc:
            self.failed = True
            raise _failure(self.backend, what, exc) from None

    def accept(self, sample_rate: int, samples: np.ndarray) -> None:
        self._call("accept", lambda: self.inner.accept(sample_rate, samples), None)

    def decode_step(self) -> bool:
        return bool(self._call("decode_step", self.inner.decode_step, False))

    def hypothesis(self) -> Hypothesis:
        hyp = self._call("hypothesis", self.inner.hypothesis, self._last)
        if not isinstance(hyp, Hypothesis):
            self.failed = True
            raise PluginError(
                f"backend {self.backend!r} returned {type(hyp).__name__} from hypothesis(), "
                f"not a Hypothesis; the text recognised before it is kept; {_BUG}"
            )
        self._last = hyp
        return hyp

    def reset(self) -> None:
        self._call("reset", self.inner.reset, None)
        if not self.failed:
            self._last = Hypothesis(text="")

    def input_finished(self) -> None:
        self._call("input_finished", self.inner.input_finished, None)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class GuardedRecognizer:
    """A plugin's recognizer, whose streams are `GuardedStream`s; its info and chunk size are
    the ones checked at load (`checked_info`), everything else passes."""

    def __init__(self, backend: str, inner: Recognizer, info: BackendInfo) -> None:
        self.backend = backend
        self.inner = inner
        self._info = info
        self._chunk_s = float(inner.chunk_s)

    @property
    def info(self) -> BackendInfo:
        return self._info

    @property
    def description(self) -> str:
        return self.inner.description

    @property
    def chunk_s(self) -> float:
        return self._chunk_s

    def create_stream(self) -> GuardedStream:
        try:
            stream = self.inner.create_stream()
        except StreamAsrError:
            raise
        except Exception as exc:
            raise _failure(self.backend, "create_stream", exc) from None
        return GuardedStream(self.backend, stream)

    def decode_batch(
        self, streams: Sequence[RecognizerStream], *, checked: bool = False
    ) -> list[bool]:
        """The plugin's batch step; `checked` is not passed on (a plugin asks its own)."""
        guarded = [s for s in streams if isinstance(s, GuardedStream)]
        live = [s for s in guarded if not s.failed]
        if len(guarded) != len(streams):  # not ours: pass them through unguarded
            return self.inner.decode_batch(streams)
        try:
            stepped = list(self.inner.decode_batch([s.inner for s in live]))
        except StreamAsrError:
            for stream in live:
                stream.failed = True
            raise
        except Exception as exc:
            for stream in live:
                stream.failed = True
            raise _failure(self.backend, "decode_batch", exc) from None
        done = iter(stepped)
        return [False if s.failed else bool(next(done, False)) for s in guarded]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)
