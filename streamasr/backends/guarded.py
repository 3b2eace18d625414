"""Plugins fail alone: a third-party engine's entry, recognizer and streams wrapped so that
whatever they raise or return wrong (an exception, a None hypothesis, a NaN chunk, rate 0)
is one line naming the backend, never a traceback.

Built-in engines are trusted as they are; the registry wraps only plugins' entries.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy as np

from streamasr.backends.base import (
    BackendEntry,
    BackendInfo,
    EngineOptions,
    Hypothesis,
    Recognizer,
    RecognizerStream,
)
from streamasr.errors import StreamAsrError
from streamasr.text.printable import printable

log = logging.getLogger("streamasr")

_MESSAGE_CHARS = 300  # a plugin's own error text is cut here: the line stays one line
T = TypeVar("T")


class PluginError(StreamAsrError):
    """A backend plugin cannot be loaded (import failed, wrong object) or failed to decode."""


def said(exc: BaseException) -> str:
    """An exception as one short line: its type and its first words."""
    text = " ".join(str(exc).split())
    if len(text) > _MESSAGE_CHARS:
        text = text[: _MESSAGE_CHARS - 3] + "..."
    kind = type(exc).__name__
    return f"{kind}: {text}" if text else kind


def guarded_entry(entry: BackendEntry) -> BackendEntry:
    """A plugin's entry whose `recognises`, `load` and recognizer turn failures into
    one-line PluginErrors naming the backend (the registry trusts built-in engines as they
    are and never passes them here)."""
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
                f"backend {name!r} failed to load model {model!r}: {said(exc)}"
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
        f"backend {backend!r} failed in {what}: {said(exc)}; the text recognised before "
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
