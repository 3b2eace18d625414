"""The one driver: a source of blocks, through a StreamSession, into a sink.

Every way of streaming (`file`, `mic`, bench, the library face, the warm-up) is this same
loop, so they cannot drift apart: feed each block, hand each event to the sink as it
happens, and whatever ends the loop (the end of the input, an unreadable block, Ctrl-C, a
stop signal, a reader that went away) finish the session and hand the sink the last final
and the summary before the exception goes on up.

The seam is deliberately small: a source (any iterable of mono float32 blocks), a session,
a sink (`event`, `end`). Optional pieces: real-time pacing, a block filter applied before
each feed (a voice-activity gate, for example), and a callback after each block (a
progress bar, a level meter). The server does not call `drive`: it steps many sessions
together through one batched encoder step (streamasr/server/scheduler.py says why).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from streamasr.audio import paced
from streamasr.session import interrupts
from streamasr.session.events import Event, StreamSummary
from streamasr.session.stream import StreamSession

#: A block filter: what to feed for one block from the source (an empty array feeds nothing).
BlockFilter = Callable[[np.ndarray], np.ndarray]


class Session(Protocol):
    """What the driver feeds: a StreamSession, or a session decoded by a `streamasr serve`
    (streamasr.server.client.RemoteSession, for `mic --server`)."""

    sample_rate: int

    def run(self, blocks: Iterable[np.ndarray]) -> Iterator[Event]: ...

    def finish(self) -> list[Event]: ...

    def summary(self) -> StreamSummary: ...


class Sink(Protocol):
    """Where a driven stream's events go: a renderer, a collector, a library user's list."""

    def event(self, event: Event) -> None: ...

    def end(self, summary: StreamSummary) -> None: ...


class Renderer(Sink, Protocol):
    """A sink told where each input begins: every output format (output/render.py) is one.
    It is declared here, beside Sink, so the session can be handed one without importing
    the renderers, which import the session's events."""

    def begin(self, source: str) -> None: ...


def _abandoned(session: Session, sink: Sink) -> None:
    """The run is ended while the engine hangs: what a local session recognised in the open
    utterance (a remote one's engine is the server's), then the summary."""
    if isinstance(session, StreamSession):
        for event in session.abandoned():
            sink.event(event)
    sink.end(session.summary())


@dataclass(frozen=True)
class Pacing:
    """Feed at the audio's own speed (`file --realtime`): each block is released no earlier
    than it would have been recorded live. The clock and the sleep come in for tests."""

    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep


@dataclass
class Collected:
    """A sink that keeps every event and the summary (bench, the library's `transcribe`)."""

    events: list[Event] = field(default_factory=list)
    summary: StreamSummary | None = None

    def event(self, event: Event) -> None:
        self.events.append(event)

    def end(self, summary: StreamSummary) -> None:
        self.summary = summary


def stream_events(
    session: Session,
    blocks: Iterable[np.ndarray],
    *,
    pacing: Pacing | None = None,
    block_filter: BlockFilter | None = None,
    after_block: Callable[[np.ndarray], None] | None = None,
) -> Generator[Event, None, None]:
    """The loop as a generator (`StreamSession.run` with the optional pieces): events as
    they happen, then, at the end of the input, the last ones.

    A reader that stops early, or a source that raises, leaves the session unfinished;
    `drive` finishes it for its sink, a library user may call `session.finish()`. Either
    way the source is closed first.
    """
    source: Iterator[np.ndarray] = iter(blocks)
    if pacing is not None:
        source = paced(source, session.sample_rate, pacing.clock, pacing.sleep)
    try:
        yield from session.run(_fed_blocks(source, block_filter, after_block))
    finally:
        close = getattr(source, "close", None)
        if close is not None:  # a generator: no more audio is taken from it
            close()


def _fed_blocks(
    source: Iterator[np.ndarray],
    block_filter: BlockFilter | None,
    after_block: Callable[[np.ndarray], None] | None,
) -> Iterator[np.ndarray]:
    """Each block as it is fed; `after_block` runs once the session has fed it and its
    events have been handed on (a generator resumes only when the next block is wanted)."""
    for block in source:
        fed = block if block_filter is None else block_filter(block)
        yield fed
        if after_block is not None:
            after_block(fed)


def drive(
    session: Session,
    blocks: Iterable[np.ndarray],
    sink: Sink,
    *,
    pacing: Pacing | None = None,
    block_filter: BlockFilter | None = None,
    after_block: Callable[[np.ndarray], None] | None = None,
) -> StreamSummary:
    """Feed every block of `blocks` into `session` and every event into `sink`; return the
    summary that was handed to `sink.end`.

    On every exit path the source is closed first (no more audio is taken), then the
    session is finished (tail padding, the last final) and the sink gets those events and
    the summary; a stop signal during that flush waits until it is done. If the process is
    abandoned while the engine hangs (interrupts.py), the sink still gets the summary of
    what was recognised.
    """
    events = stream_events(
        session, blocks, pacing=pacing, block_filter=block_filter, after_block=after_block
    )
    with interrupts.on_abandon(lambda: _abandoned(session, sink)):
        try:
            for event in events:
                sink.event(event)
        finally:
            events.close()
            with interrupts.deferred():
                for event in session.finish():  # nothing when the input ran to its end
                    sink.event(event)
                summary = session.summary()
                sink.end(summary)
    return summary
