"""Stop signals that always work: SIGINT, SIGTERM and SIGHUP end a run like Ctrl-C, in any state.

A Python signal handler runs only in the main thread, between bytecodes. While the main
thread is inside a C call that does not return (a hung engine step, a sound server that
never answers), the handler never runs and the process would ignore the signal. So, beside
the handler, a watcher thread learns of every stop signal at the C level (through
`signal.set_wakeup_fd`), and:

- the first stop signal raises KeyboardInterrupt in the main thread (once: later ones never
  cut a flush short), so the commands flush what was recognised and exit 128 + N;
- if the main thread has not run the handler within `STUCK_GRACE_S`, it is stuck in C: the
  watcher runs the flushes registered with `on_abandon`, flushes stdout, has the caller say
  in one line what did not return (an engine step is named as such) and ends the process
  with 128 + N;
- if the flush that follows steps the engine and that step has not returned within
  `STUCK_GRACE_S` (the same call, seen by the watcher), the engine hung in the flush: the run
  ends the same way, without waiting for the flush limit;
- a second stop signal, or a flush still running `FLUSH_LIMIT_S` after the first, ends it
  the same way: the user insisted, or the flush itself hung.

Core, not a command: nothing here writes to a terminal; the caller of `install` passes the
`say` that does. It needs an engine that releases the GIL while it computes (sherpa-onnx,
onnxruntime and torch do); an engine stuck while holding the GIL stops every thread.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import select
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType

log = logging.getLogger("streamasr")

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
#: The main thread must react to a stop signal this soon, or it is stuck in a C call.
STUCK_GRACE_S = 1.0
#: Flushing what was recognised after a stop signal must end this soon.
FLUSH_LIMIT_S = 10.0
#: The last writes of an abandoned run (stdout, the message) get this long.
LAST_WRITES_S = 1.0
#: How often the watcher looks at the flush for an engine step that does not return.
ENGINE_POLL_S = 0.2

# what an engine's step is called in the Recognizer protocol (streamasr/backends/base.py)
_ENGINE_STEPS = ("decode_step", "decode_batch")

Say = Callable[[str], None]


class _State:
    """One run's stop signals, shared by the handler (main thread) and the watcher."""

    def __init__(self) -> None:
        # reentrant: the handler runs in the main thread, possibly inside a block holding it
        self.lock = threading.RLock()
        self.received: list[int] = []
        self.handled = threading.Event()  # the main thread ran the handler
        self.done = threading.Event()  # the run is over; the watcher stands down
        self.deferring = 0
        self.pending = False
        self.say: Say = lambda text: log.error("%s", text)
        self.abandon_flushes: list[Callable[[], None]] = []


_state = _State()
_watcher: threading.Thread | None = None
_wakeup_read = -1
_wakeup_write = -1


def signal_name(signum: int) -> str:
    """'SIGTERM' for 15."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def install(say: Say) -> None:
    """Handle the stop signals for one run (main thread only); `say` prints one line."""
    global _state, _watcher, _wakeup_read, _wakeup_write
    _state.done.set()
    _state = _State()
    _state.say = say
    for signum in STOP_SIGNALS:
        signal.signal(signum, _on_signal)
    if _watcher is None:
        _wakeup_read, _wakeup_write = (_above_stdio(fd) for fd in os.pipe())
        os.set_blocking(_wakeup_write, False)
        _watcher = threading.Thread(target=_watch, name="streamasr-stop-watcher", daemon=True)
        _watcher.start()
    # every run: an event loop (streamasr serve) may have taken the wakeup fd and cleared it
    signal.set_wakeup_fd(_wakeup_write, warn_on_full_buffer=False)


def _above_stdio(fd: int) -> int:
    """The same pipe end on a descriptor above 2: started with stdin, stdout or stderr
    closed, os.pipe() hands out those numbers, and the CLI later points them at /dev/null."""
    if fd > 2:
        return fd
    moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
    os.close(fd)
    return moved


def finished() -> None:
    """The run is over (its results are written): no later signal abandons it."""
    _state.done.set()


def stopped_by() -> int | None:
    """The first stop signal of this run, if one came."""
    with _state.lock:
        return _state.received[0] if _state.received else None


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """Stop signals inside are recorded, not raised; KeyboardInterrupt comes at the end.

    For flushes that must not be cut in half (the last final, a summary, closing files);
    the watcher still ends the process if the flush hangs.
    """
    with _state.lock:
        _state.deferring += 1
    try:
        yield
    finally:
        with _state.lock:
            _state.deferring -= 1
            raise_now = _state.pending and not _state.deferring
            if raise_now:
                _state.pending = False
        if raise_now and sys.exc_info()[0] is None:
            raise KeyboardInterrupt


@contextlib.contextmanager
def on_abandon(flush: Callable[[], None]) -> Iterator[None]:
    """Run `flush` (on the watcher thread) if the run is abandoned while inside this block.

    For what a stuck main thread cannot do itself: a summary, the closing line of a file.
    It must not need the engine.
    """
    state = _state
    state.abandon_flushes.append(flush)
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):
            state.abandon_flushes.remove(flush)


def _on_signal(signum: int, frame: FrameType | None) -> None:
    state = _state
    with state.lock:
        first = not state.received
        state.received.append(signum)
        state.handled.set()
        if state.deferring:
            state.pending = state.pending or first
            return
    if first:
        raise KeyboardInterrupt


def _watch() -> None:
    """The watcher thread: reads signal numbers from the wakeup pipe and enforces the limits."""
    current: _State | None = None
    seen = 0
    first_seen = 0.0
    first_signal = int(signal.SIGTERM)
    step: object = None  # the engine step the flush was last seen in, and since when
    step_since = 0.0
    while True:
        state = _state
        if state is not current:
            current, seen, step = state, 0, None
        timeout = None
        if seen and not state.done.is_set():
            limit = FLUSH_LIMIT_S if state.handled.is_set() else STUCK_GRACE_S
            timeout = max(0.02, first_seen + limit - time.monotonic())
            if state.handled.is_set():
                timeout = min(timeout, ENGINE_POLL_S)
        ready, _, _ = select.select([_wakeup_read], [], [], timeout)
        if ready:
            data = os.read(_wakeup_read, 512)
            stops = [signum for signum in data if signum in STOP_SIGNALS]
            if not stops or state.done.is_set() or state is not _state:
                continue
            if not seen:
                first_seen, first_signal = time.monotonic(), stops[0]
            seen += len(stops)
            if seen >= 2:
                first = state.received[0] if state.received else first_signal
                _abandon(state, first, f"a second stop signal ({signal_name(stops[-1])}) came")
            continue
        if not seen or state.done.is_set() or state is not _state:
            continue
        first = state.received[0] if state.received else first_signal
        now = time.monotonic()
        if not state.handled.is_set():
            _abandon(state, first, None)
        elif now - first_seen >= FLUSH_LIMIT_S:
            _abandon(state, first, f"flushing took longer than {FLUSH_LIMIT_S:.0f} s")
        else:
            in_step = _engine_step_frame()
            if in_step is None or in_step is not step:
                step, step_since = in_step, now
            elif now - step_since >= STUCK_GRACE_S:
                _abandon(state, first, None)


def _abandon(state: _State, signum: int, why: str | None) -> None:
    """Flush what can be flushed without the main thread, say why in one line, exit 128+N."""
    if state.done.is_set():
        return
    if not state.received:  # the Python handler never ran: the C one still counted it
        state.received.append(signum)
    stuck = _stuck_where()
    name = signal_name(signum)
    if why is None:
        message = f"{stuck} did not return within {STUCK_GRACE_S:.0f} s of {name}"
    else:
        message = f"{why} while {stuck} was running"
    message += "; stopped without waiting for it"
    if stuck == "the engine step":
        message += " (what was recognised before it is flushed)"

    def last_writes() -> None:
        for flush in reversed(list(state.abandon_flushes)):  # inner blocks first
            try:
                flush()
            except Exception as exc:  # one failed flush must not stop the others
                log.debug("flush while abandoning the run: %s", exc)
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        with contextlib.suppress(Exception):
            state.say(message)
        with contextlib.suppress(Exception):
            sys.stderr.flush()

    writer = threading.Thread(target=last_writes, name="streamasr-last-writes", daemon=True)
    writer.start()
    writer.join(LAST_WRITES_S)  # stdout may be a pipe nobody reads
    os._exit(128 + signum)


def _engine_step_frame() -> object:
    """The frame of the engine step the main thread is in now, if it is in one."""
    frame = sys._current_frames().get(threading.main_thread().ident or 0)
    while frame is not None:
        if frame.f_code.co_name in _ENGINE_STEPS:
            return frame
        frame = frame.f_back
    return None


def _stuck_where() -> str:
    """What the main thread is inside: 'the engine step', or the Python function it called."""
    frame = sys._current_frames().get(threading.main_thread().ident or 0)
    innermost = frame
    while frame is not None:
        if frame.f_code.co_name in _ENGINE_STEPS:
            return "the engine step"
        frame = frame.f_back
    if innermost is None:
        return "the main thread"
    code = innermost.f_code
    return f"{code.co_name} ({os.path.basename(code.co_filename)}:{innermost.f_lineno})"
