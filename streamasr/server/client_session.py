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
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from streamasr.errors import StreamAsrError
from streamasr.server.protocol import SessionConfig
from streamasr.server.rooms import Publishing
from streamasr.server.utterance import Delivered, Utterance
from streamasr.server.wire import WireEncoder

if TYPE_CHECKING:
    from streamasr.server.app import StreamServer
    from streamasr.server.connection import Stop


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
        on_events: Callable[[list[Delivered]], None],
        token: str | None = None,
    ) -> None:
        """`on_events`: called on the event loop with each batch of event objects of the
        open utterance (its StreamSummary last); `token`: what the client presented, for
        a room's publish token."""
        self.server = server
        self.on_events = on_events
        self.token = token
        self.utterance: Utterance | None = None
        self.publishing: Publishing | None = None
        self.failure: str | None = None
        self._failed = asyncio.Event()
        self.stop: Stop | None = None  # the server asked this session to end
        self.stopped = asyncio.Event()

    @classmethod
    @contextlib.asynccontextmanager
    async def admitted(
        cls,
        server: StreamServer,
        on_events: Callable[[list[Delivered]], None],
        token: str | None = None,
    ) -> AsyncIterator[ClientSession]:
        """A session holding one connection slot while open; Refused when none is free
        or the server stops. On leaving, an utterance still open is discarded."""
        refused = server.refusal()
        if refused is not None:
            raise Refused(*refused)
        session = cls(server, on_events, token)
        server.connections.add(session)
        try:
            yield session
        finally:
            session.close()
            server.connections.discard(session)
            server.release()

    # -- what the adapter calls --------------------------------------------------------------

    async def open(self, config: SessionConfig) -> None:
        """Start an utterance with `config` (publishing to its room, if it names one).
        ProtocolError for settings the server cannot serve."""
        if self.utterance is not None:
            await self.finish()
        self._publish(config)
        encoder = WireEncoder(config) if self.publishing is not None else None

        def deliver(items: list[Delivered]) -> None:
            if encoder is not None and self.publishing is not None:
                self.publishing.deliver(encoder.records(items))
            self.on_events(items)

        self.utterance = await self.server.scheduler.open(config, deliver, self._fail)

    @property
    def is_open(self) -> bool:
        return self.utterance is not None

    async def feed(self, samples: np.ndarray) -> None:
        """Queue mono float32 samples at the utterance's rate; waits while more than
        --max-queued-audio-s of audio is not yet decoded (the client's sending slows)."""
        utterance = self._open_utterance()
        scheduler = self.server.scheduler
        limit_s = self.server.limits.max_queued_audio_s
        size = max(1, int(limit_s * utterance.config.sample_rate) // 2)
        for start in range(0, len(samples), size):
            scheduler.add_audio(utterance, samples[start : start + size])
            while utterance.queued_s > limit_s and not utterance.discarded:
                await utterance.drained.wait()
            self._raise_failure()

    async def finish(self) -> None:
        """End the utterance's input; return once its final and summary were delivered."""
        utterance = self.utterance
        if utterance is None:
            return
        failed: asyncio.Future[Any] = asyncio.ensure_future(self._failed.wait())
        waits: set[asyncio.Future[Any]] = {self.server.scheduler.end(utterance), failed}
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
        """The client is gone: forget the open utterance, leave the room."""
        self.discard()
        if self.publishing is not None:
            self.publishing.end()
            self.publishing = None

    # -- what the server calls ---------------------------------------------------------------

    def request_stop(self, stop: Stop) -> None:
        """The server stops (or a limit ends the session): the adapter ends after flushing
        (`stopped` is set; a `finish()` still delivers the open utterance's final)."""
        if self.stop is None:
            self.stop = stop
            self.stopped.set()

    # -- inside ------------------------------------------------------------------------------

    def _open_utterance(self) -> Utterance:
        if self.utterance is None:
            raise RuntimeError("no utterance is open: call open(config) first")
        return self.utterance

    def _publish(self, config: SessionConfig) -> None:
        if self.publishing is None:
            if config.room is None:
                return
            self.publishing = Publishing(self.server.rooms, self.token)
        self.publishing.begin(config.room, config.partials)

    def _fail(self, reason: str) -> None:
        self.failure = reason
        self._failed.set()
        if self.utterance is not None:
            self.utterance.drained.set()

    def _raise_failure(self) -> None:
        if self.failure is not None:
            raise EngineFailed(self.failure)
