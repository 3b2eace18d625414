"""A test backend whose engine step hangs in C, the way a wedged native engine would.

It is the energy backend (one token per burst) until the stream has decoded
`STREAMASR_TEST_HANG_AT_S` seconds of audio (default 4); the next step locks a pthread mutex
it already holds. That call never returns, releases the GIL like a real engine's compute
call, and no Python signal handler can run in the thread that made it, so only the stop
watcher (streamasr/session/interrupts.py) can end the process. When `STREAMASR_TEST_HANG_MARKER`
names a file, the step writes it just before hanging, so a test knows when to send its signal.

Loaded as `--backend hang_backend:BACKEND` with this folder on PYTHONPATH, model `hang`.

Model `hang-at-end` hangs in C only in the steps after the end of the input: the steps that
flush the open utterance after a stop signal.

Model `sleep` hangs the same step in Python instead (a step waiting on something that never
comes, in short sleeps, as a Python engine polling a queue or a socket would): the signal
handler runs inside it, so the stop signal interrupts the step itself.

Model `crash` is the other way an engine goes: once a stream has decoded
`STREAMASR_TEST_CRASH_AT_S` seconds, the process dies by SIGKILL, as on a segfault or the
out-of-memory killer. Only utterances at least that long kill their worker.
"""

from __future__ import annotations

import ctypes
import os
import signal
import time
from pathlib import Path

from energy_backend import FRAME_S, EnergyRecognizer, EnergyStream

from streamasr.backends.base import BackendEntry, EngineOptions

NAME = "hang"


def hang_in_c() -> None:
    """Lock a default (non-recursive) mutex twice: blocks forever, outside the interpreter."""
    libc = ctypes.CDLL(None)
    mutex = ctypes.create_string_buffer(64)  # zero bytes: PTHREAD_MUTEX_INITIALIZER on glibc
    libc.pthread_mutex_lock(mutex)
    libc.pthread_mutex_lock(mutex)


class HangStream(EnergyStream):
    """Steps like the energy stream, then hangs once `hang_at_s` of audio are decoded (or,
    `at_end`, at the first step after the input ended)."""

    def __init__(self, hang_at_s: float, at_end: bool = False) -> None:
        super().__init__()
        self._hang_at_s = hang_at_s
        self._at_end = at_end

    def decode_step(self) -> bool:
        due = self._finished if self._at_end else self._frames_done * FRAME_S >= self._hang_at_s
        if self.ready() and due:
            marker = os.environ.get("STREAMASR_TEST_HANG_MARKER")
            if marker:
                Path(marker).write_text(f"{os.getpid()}\n", encoding="utf-8")
            hang_in_c()
        return super().decode_step()


class SleepStream(EnergyStream):
    """Steps like the energy stream, then waits in Python forever at `hang_at_s` of audio."""

    def __init__(self, hang_at_s: float) -> None:
        super().__init__()
        self._hang_at_s = hang_at_s

    def decode_step(self) -> bool:
        if self.ready() and self._frames_done * FRAME_S >= self._hang_at_s:
            marker = os.environ.get("STREAMASR_TEST_HANG_MARKER")
            if marker:
                Path(marker).write_text(f"{os.getpid()}\n", encoding="utf-8")
            while True:
                time.sleep(0.05)
        return super().decode_step()


class CrashStream(EnergyStream):
    """Steps like the energy stream, then kills its own process at `crash_at_s` of audio."""

    def __init__(self, crash_at_s: float) -> None:
        super().__init__()
        self._crash_at_s = crash_at_s

    def decode_step(self) -> bool:
        if self.ready() and self._frames_done * FRAME_S >= self._crash_at_s:
            os.kill(os.getpid(), signal.SIGKILL)
        return super().decode_step()


class HangRecognizer(EnergyRecognizer):
    def __init__(self, options: EngineOptions, model: str | None) -> None:
        super().__init__(options)
        self.model = model

    def create_stream(self) -> EnergyStream:
        if self.model == "crash":
            return CrashStream(float(os.environ.get("STREAMASR_TEST_CRASH_AT_S", "4")))
        hang_at_s = float(os.environ.get("STREAMASR_TEST_HANG_AT_S", "4"))
        if self.model == "sleep":
            return SleepStream(hang_at_s)
        return HangStream(hang_at_s, at_end=self.model == "hang-at-end")


def _recognises(model: str | None) -> bool:
    return model in (NAME, "crash", "sleep", "hang-at-end")


def _load(model: str | None, options: EngineOptions) -> HangRecognizer:
    return HangRecognizer(options, model)


BACKEND = BackendEntry(
    name=NAME,
    summary="test backend: an engine step that never returns, or kills its process",
    recognises=_recognises,
    load=_load,
)
