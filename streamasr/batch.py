"""Many streams, one engine: batched encoder steps in the core, through the protocol.

Each stream keeps its own StreamSession (onset, endpointing, events); only the encoder step
is shared: the recognizer's `decode_batch` runs one step over every stream that has a chunk
ready, and each stepped session turns that step into events exactly as it would alone. So a
batch never changes a stream's events, unless the engine itself computes differently in a
batch (int8 models with dynamic quantisation do; see docs/performance.md).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from streamasr.backends.base import Recognizer
from streamasr.events import Event
from streamasr.stream import StreamSession


def step_all(
    recognizer: Recognizer,
    sessions: Sequence[StreamSession],
    clock: Callable[[], float],
) -> list[list[Event]]:
    """Step every session until none has a chunk ready; events per session, in order.

    The time of each batched step is shared out equally among the streams it stepped and
    added to their compute time.
    """
    events: list[list[Event]] = [[] for _ in sessions]
    streams = [session.stream for session in sessions]
    while True:
        started = clock()
        try:
            stepped = recognizer.decode_batch(streams)
        except KeyboardInterrupt:  # the engine is left mid-step: the flush must not call it
            for session in sessions:
                session.engine_stopped()
            raise
        elapsed = clock() - started
        count = sum(stepped)
        if not count:
            return events
        share = elapsed / count
        for index, did_step in enumerate(stepped):
            if did_step:
                session = sessions[index]
                session.add_compute(share)
                events[index].extend(session.after_step())
