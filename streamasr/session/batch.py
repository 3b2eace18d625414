"""Many streams, one engine: the one stepping core (batched encoder steps through the protocol).

Each stream keeps its own StreamSession (onset, endpointing, events); only the encoder step
is shared: the recognizer's `decode_batch` runs one step over every stream that has a chunk
ready, and each stepped session turns that step into events exactly as it would alone. So a
batch never changes a stream's events, unless the engine itself computes differently in a
batch (int8 models with dynamic quantisation do; see docs/performance.md).

A step is two halves, so that a caller may run them on different threads: `engine_step`
(the engine call and its time: the only part that touches the engine) and `after_engine_step`
(each stepped session's share of that time and its events). `step_all` runs both until no
stream has a chunk ready (bench --streams, bench --capacity); `streamasr serve`'s scheduler
runs one of each per round, the first on its engine thread (server/scheduler.py); a stream
decoded alone (the driver: file, mic, sequential bench, the library) is stepped by
`step_alone`, the same way through the stream's own `decode_step`. What each caller keeps is
only its pacing: which sessions are fed what, and when.

Two pacings of live streams share the `StepClock`: `ready` steps a stream as soon as its chunk
is ready (streams at different phases rarely meet in one batch), `aligned` holds a stream
whose chunk became ready until the next tick of one clock of chunk period, so every live
stream steps in the same batch (larger batches cost the engine less per stream); the wait is
below one chunk and is counted (`align_wait_ms`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from streamasr.backends.base import Recognizer, RecognizerStream
from streamasr.session.events import Event

#: The pacing policies of live streams: `aligned` (one shared step clock) or `ready`.
SCHEDULES = ("aligned", "ready")


@dataclass(frozen=True)
class StepClock:
    """One step clock for all live streams: a tick every `period_s` from `origin_s` (seconds
    of the caller's clock). A stream whose chunk became ready waits for the next tick, so at
    most one period, and all streams due by then step in one batch."""

    origin_s: float
    period_s: float

    def next_tick_s(self, now_s: float) -> float:
        """The first tick at or after `now_s` (a tick a hair behind counts as now)."""
        if self.period_s <= 0:
            return now_s
        ticks = math.ceil((now_s - self.origin_s) / self.period_s - 1e-9)
        return self.origin_s + max(0, ticks) * self.period_s


class Stepped(Protocol):
    """What the core steps: a StreamSession (its engine stream, what a step changed)."""

    @property
    def stream(self) -> RecognizerStream: ...

    def after_step(self) -> list[Event]: ...

    def add_compute(self, seconds: float) -> None: ...

    def engine_stopped(self) -> None: ...

    @property
    def stopped(self) -> bool: ...


def engine_step(
    recognizer: Recognizer,
    streams: Sequence[RecognizerStream],
    clock: Callable[[], float],
    checked: bool = False,
) -> tuple[list[bool], float]:
    """One batched engine step: which streams stepped, and its time in seconds (by `clock`).

    `checked`: each stream was just seen ready and fed nothing since (decode_batch says why).
    """
    started = clock()
    stepped = recognizer.decode_batch(streams, checked=checked)
    return stepped, clock() - started


def after_engine_step(
    sessions: Sequence[Stepped | None],
    stepped: Sequence[bool],
    elapsed_s: float,
) -> list[list[Event]]:
    """What one engine step changed, per session in order: the step's time is shared out
    equally among the streams it stepped and added to their compute time, and each stepped
    session's events are made. A None session (one gone meanwhile) is passed over."""
    share = elapsed_s / max(1, sum(stepped))
    events: list[list[Event]] = []
    for session, did_step in zip(sessions, stepped, strict=True):
        if session is None or not did_step:
            events.append([])
            continue
        session.add_compute(share)
        events.append(session.after_step())
    return events


def step_alone(session: Stepped) -> list[Event]:
    """One stream by itself (the driver's way: `StreamSession.feed`): its own `decode_step`
    until it has no chunk ready, each step's events made as in a batch. A stop signal
    inside the engine call leaves the engine mid-step: it is not called again."""
    events: list[Event] = []
    while not session.stopped:
        try:
            if not session.stream.decode_step():
                break
        except KeyboardInterrupt:
            session.engine_stopped()
            raise
        events.extend(session.after_step())
    return events


def step_all(
    recognizer: Recognizer,
    sessions: Sequence[Stepped],
    clock: Callable[[], float],
) -> list[list[Event]]:
    """Step every session until none has a chunk ready; events per session, in order."""
    events: list[list[Event]] = [[] for _ in sessions]
    streams = [session.stream for session in sessions]
    while True:
        try:
            stepped, elapsed = engine_step(recognizer, streams, clock)
        except KeyboardInterrupt:  # the engine is left mid-step: the flush must not call it
            for session in sessions:
                session.engine_stopped()
            raise
        if not any(stepped):
            return events
        for mine, new in zip(events, after_engine_step(sessions, stepped, elapsed), strict=True):
            mine.extend(new)
