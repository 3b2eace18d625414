"""One client's session, whatever the wire: the seam every protocol adapter stands on.

A protocol adapter (the project's WebSocket, OpenAI's REST and Realtime APIs, Wyoming)
maps its messages to a `ClientSession` and the session's events to its messages; the
session knows nothing of the wire. It holds what every protocol shares: admission (a
connection slot, refused while the server stops or is full), utterance after utterance on
the one scheduler (config in, mono float32 audio in with back-pressure, event objects out),
publishing to a room, and the server's stop (the open utterance is flushed: its final comes
out before the adapter closes).

    async with ClientSession.admitted(server, on_events, token) as session:
        await session.open(config)
        await session.feed(samples)
        await session.finish()   # returns once the final and the summary were delivered
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from streamasr.errors import StreamAsrError
from streamasr.server import protocol
from streamasr.server.protocol import ProtocolError, SessionConfig
from streamasr.server.room_broker import CLOCK_FIELD, PublishingSeam
from streamasr.server.rooms import NO_ROOMS
from streamasr.server.utterance import Delivered, Utterance
from streamasr.server.wire import Record, WireEncoder

if TYPE_CHECKING:
    from streamasr.server.app import StreamServer


T = TypeVar("T")


class Stop(Exception):
    """The server ends a session (a limit, shutdown, a slow client, an engine failure):
    `code` is the WebSocket close code (other protocols map it), `kind` the metrics label,
    `flush` whether the open utterance is finished and its final sent first."""

    def __init__(self, code: int, reason: str, kind: str, flush: bool) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = protocol.close_reason(reason)
        self.kind = kind
        self.flush = flush


class Refused(StreamAsrError):
    """The server takes no new session now: `kind` is "shutting_down" or "capacity"."""

    def __init__(self, kind: str, reason: str) -> None:
        super().__init__(reason)
        self.kind = kind
        self.reason = reason


class EngineFailed(StreamAsrError):
    """The engine failed this session's utterance (the reason is the server's)."""


class ClientSession:
    """Utterances of one client on the server's scheduler; see the module's docstring."""

    def __init__(
        self,
        server: StreamServer,
        on_events: Callable[[list[Delivered]], None] | None = None,
        token: str | None = None,
        on_records: Callable[[list[Record]], None] | None = None,
        on_stop: Callable[[Stop], None] | None = None,
    ) -> None:
        """`on_events`: called on the event loop with each batch of event objects of the
        open utterance (its StreamSummary last); or `on_records`, with them as wire records
        (server/wire.py; made once for the client and the room); `token`: what the client
        presented, for a room's publish token; `on_stop`: told when the server asks the
        session to end."""
        self.server = server
        self.on_events = on_events
        self.on_records = on_records
        self.on_stop = on_stop
        self.token = token
        self.utterance: Utterance | None = None
        self.publishing: PublishingSeam | None = None
        self.failure: str | None = None
        self._failed = asyncio.Event()
        self.stop: Stop | None = None  # the server asked this session to end
        self.stopped = asyncio.Event()

    @classmethod
    @contextlib.asynccontextmanager
    async def admitted(
        cls,
        server: StreamServer,
        on_events: Callable[[list[Delivered]], None] | None = None,
        token: str | None = None,
        on_records: Callable[[list[Record]], None] | None = None,
        on_stop: Callable[[Stop], None] | None = None,
    ) -> AsyncIterator[ClientSession]:
        """A session holding one connection slot while open; Refused when none is free
        or the server stops. On leaving, an utterance still open is discarded."""
        session = cls(server, on_events, token, on_records, on_stop)
        async with server.admitted(session):
            try:
                yield session
            finally:
                session.close()

    # -- what the adapter calls --------------------------------------------------------------

    async def open(self, config: SessionConfig) -> None:
        """Start an utterance with `config` (publishing to its room, if it names one).
        ProtocolError for settings the server cannot serve."""
        if self.utterance is not None:
            await self.finish()
        await self._publish(config)
        publishing, on_events, on_records = self.publishing, self.on_events, self.on_records
        encoder = WireEncoder(config) if publishing is not None or on_records else None
        room = None if config.room_source else config.room  # None: `source` as sent
        rooms = self.server.rooms
        stamped = publishing is not None and rooms is not None and rooms.options.clock_stamps

        def deliver(items: list[Delivered]) -> None:
            left_s = time.monotonic() if stamped else None
            if encoder is None:
                if on_events is not None:
                    on_events(items)
                return
            records = encoder.records(items)
            if publishing is not None:
                publishing.deliver(for_readers(records, room, left_s))
            if on_records is not None:
                on_records(records)
            if on_events is not None:
                on_events(items)

        self.utterance = await self.server.scheduler.open(config, deliver, self._fail)

    @property
    def is_open(self) -> bool:
        return self.utterance is not None

    def add_audio(self, samples: np.ndarray) -> bool:
        """Queue mono float32 samples at the utterance's rate without waiting; True when
        more than --max-queued-audio-s is not yet decoded: await `drained()` before more."""
        utterance = self._open_utterance()
        self.server.scheduler.add_audio(utterance, samples)
        return utterance.queued_s > self.server.limits.max_queued_audio_s

    async def drained(self) -> None:
        """Until the audio queued so far is decoded (or the utterance is gone)."""
        utterance = self.utterance
        while utterance is not None and not utterance.drained.is_set():
            await utterance.drained.wait()

    async def feed(self, samples: np.ndarray) -> None:
        """Queue mono float32 samples at the utterance's rate; waits while more than
        --max-queued-audio-s of audio is not yet decoded (the client's sending slows)."""
        utterance = self._open_utterance()
        size = max(1, int(self.server.limits.max_queued_audio_s * utterance.config.sample_rate))
        for start in range(0, len(samples), size // 2):
            if self.add_audio(samples[start : start + size // 2]):
                await self.drained()
            self._raise_failure()

    def end_input(self) -> asyncio.Future[None]:
        """End the open utterance's input: the scheduler's future, done once its final and
        summary were delivered (awaiting it again after a stop is fine: it is not ours to
        cancel)."""
        return self.server.scheduler.end(self._open_utterance())

    async def finish(self) -> None:
        """End the utterance's input; return once its final and summary were delivered."""
        if self.utterance is None:
            return
        failed: asyncio.Future[Any] = asyncio.ensure_future(self._failed.wait())
        waits: set[asyncio.Future[Any]] = {self.end_input(), failed}
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            failed.cancel()
        self.utterance = None
        self._raise_failure()

    def discard(self) -> None:
        """Drop the open utterance unfinished: its audio and any text not yet final."""
        if self.utterance is not None:
            self.server.scheduler.discard(self.utterance)
            self.utterance = None

    def close(self) -> None:
        """The client is gone: forget the open utterance, leave the room, and let go of the
        adapter's callbacks (they point back at the adapter: without this each closed
        session waited in a reference cycle for a full collection, ~13 kB a session in the
        soak's memory growth)."""
        self.discard()
        if self.publishing is not None:
            self.publishing.end()
            self.publishing = None
        self.on_events = self.on_records = self.on_stop = None

    async def unless_stopped(self, awaitable: Awaitable[T], timeout_s: float | None = None) -> T:
        """Await `awaitable`, unless the server stops the session first (its Stop is raised)
        or `timeout_s` passes (TimeoutError). A future passed in is not cancelled then (an
        utterance's end: the stop's flush awaits it again); a coroutine's task is."""
        task = asyncio.ensure_future(awaitable)
        stopped = asyncio.ensure_future(self.stopped.wait())
        try:
            await asyncio.wait({task, stopped}, timeout=timeout_s,
                               return_when=asyncio.FIRST_COMPLETED)  # fmt: skip
        finally:
            stopped.cancel()
        if task.done():
            return task.result()
        if task is not awaitable:  # what it had half done does not matter any more
            task.cancel()
            task.add_done_callback(lambda done: done.cancelled() or done.exception())
        if self.stop is not None:
            raise self.stop
        raise asyncio.TimeoutError

    # -- what the server calls ---------------------------------------------------------------

    def request_stop(self, stop: Stop) -> None:
        """The server stops (or a limit ends the session): the adapter ends after flushing
        (`stopped` is set; a `finish()` still delivers the open utterance's final)."""
        if self.stop is None:
            self.stop = stop
            self.stopped.set()
            if self.on_stop is not None:
                self.on_stop(stop)

    # -- inside ------------------------------------------------------------------------------

    def _open_utterance(self) -> Utterance:
        if self.utterance is None:
            raise RuntimeError("no utterance is open: call open(config) first")
        return self.utterance

    async def _publish(self, config: SessionConfig) -> None:
        if self.publishing is None:
            if config.room is None:
                return
            if self.server.rooms is None:
                raise ProtocolError(protocol.CLOSE_POLICY, NO_ROOMS)
            self.publishing = self.server.rooms.publishing(self.token, self._displaced)
        await self.publishing.begin(config.room, config.partials)

    def _displaced(self, room: str) -> None:
        """Another speaker took over the room: its last final sent, this session ends."""
        self.request_stop(Stop(
            protocol.CLOSE_TAKEN_OVER,
            f"room {room}: another speaker took over; your captions no longer reach its readers",
            "room_taken_over", flush=True,
        ))  # fmt: skip

    def _fail(self, reason: str) -> None:
        self.failure = reason
        self._failed.set()
        self.request_stop(Stop(protocol.CLOSE_INTERNAL, reason, "engine_error", flush=False))
        if self.utterance is not None:
            self.utterance.drained.set()

    def _raise_failure(self) -> None:
        if self.failure is not None:
            raise EngineFailed(self.failure)


def for_readers(
    records: list[dict[str, Any]], room: str | None, left_s: float | None = None
) -> list[dict[str, Any]]:
    """The records as a room's readers get them: `source` (the speaker's file path or
    microphone, local names) is the room's name, unless the config says `room_source`
    (`room` None). `left_s`: the server's monotonic clock when the engine's step handed
    them over, as `server_monotonic_s` (only with $STREAMASR_ROOM_CLOCK=1: load runs on one
    machine measure readers' lag from it)."""
    extra: dict[str, Any] = {} if left_s is None else {CLOCK_FIELD: round(left_s, 6)}
    if room is None and not extra:
        return records
    return [{**record, **({"source": room} if room is not None and "source" in record else {}),
             **extra} for record in records]  # fmt: skip
