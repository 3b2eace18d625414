"""One WebSocket client of `streamasr serve`: its config, its audio, its events.

A `Connection` reads the config and the audio of utterance after utterance, hands the audio
to the scheduler and sends the events the scheduler delivers (event objects, encoded as the
wire records of server/wire.py) through a bounded queue, so a client that reads
slowly only ever delays itself (and is closed once its queue is full). A message costs one
plain `await` of the WebSocket: one timer per connection holds the handshake, idle and
session limits, and a stop cancels the pending receive.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import TYPE_CHECKING, Any

from streamasr.output.render import jsonl_line
from streamasr.server import protocol
from streamasr.server.client_session import ClientSession, Stop
from streamasr.server.protocol import ProtocolError
from streamasr.server.rooms import presented_token
from streamasr.server.utterance import Utterance
from streamasr.server.wire import Record

if TYPE_CHECKING:
    from streamasr.server.app import StreamServer

log = logging.getLogger("streamasr")

#: How long the last final and summary may take to reach a client before the close.
FLUSH_TIMEOUT_S = 10.0


class SocketClosed(Exception):
    """The WebSocket is closed (by the client, or by uvicorn on a protocol error: `code`)."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


class Gone(Exception):
    """The client closed the connection."""


class Connection:
    """One WebSocket client: utterance after utterance, until it closes or is closed."""

    def __init__(self, server: StreamServer, ws: Any) -> None:
        self.server = server
        self.ws = ws
        self.limits = server.limits
        self.started = time.monotonic()
        self.outbox: asyncio.Queue[str] = asyncio.Queue(self.limits.send_queue_events)
        self.stop_requested: Stop | None = None
        self._stop_event = asyncio.Event()
        # _receive: the handler task while it waits for a message, that wait's deadline (loop
        # time) and one timer per connection that is only moved when it fires
        self._receiving: asyncio.Task[Any] | None = None
        self._interrupted = False  # that wait was cancelled by a stop or its deadline
        self._deadline = 0.0
        self._timer: asyncio.Handle | None = None
        # when that timer fires: kept here, as uvloop hands out a plain Handle (no when())
        # for a time that is due at once
        self._timer_at = 0.0
        # the event loop, looked up once: asyncio.get_running_loop() is a getpid() system
        # call each time, and _receive runs once per audio message
        self._loop: asyncio.AbstractEventLoop | None = None
        # the wire-free part: utterances, room publishing (server/client_session.py)
        self.session = ClientSession(
            server, on_records=self.deliver_records, on_stop=self.request_stop
        )

    @property
    def utterance(self) -> Utterance | None:
        return self.session.utterance

    @utterance.setter
    def utterance(self, value: Utterance | None) -> None:
        self.session.utterance = value

    def request_stop(self, stop: Stop) -> None:
        """Ask the handler to end (from elsewhere on the loop: shutdown, a full queue)."""
        if self.stop_requested is None:
            self.stop_requested = stop
            self._stop_event.set()
            self._interrupt()

    def _interrupt(self) -> None:
        """Cancel the handler out of its wait for a message, once; _receive then raises the
        stop or the limit. Cancelling websockets' `recv` loses no message."""
        if self._receiving is not None and not self._interrupted:
            self._interrupted = True
            self._receiving.cancel()

    def _on_deadline(self) -> None:
        """The receive timer: a wait past its deadline is interrupted; a later deadline (a
        message came since the timer was set) moves the timer there."""
        timer, self._timer = self._timer, None
        if self._receiving is None:
            return  # not waiting for a message: the next _receive sets the timer
        if timer is not None and self._deadline > self._timer_at:
            self._arm(self._deadline)
        else:
            self._interrupt()

    def _arm(self, deadline: float) -> None:
        self._timer_at = deadline
        self._timer = self._running_loop().call_at(deadline, self._on_deadline)

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        return loop

    def deliver_records(self, records: list[Record]) -> None:
        """The open utterance's wire records (its room has them too): a line each."""
        self.deliver([jsonl_line(record) for record in records])

    def deliver(self, lines: list[str]) -> None:
        """Queue lines to send; a client whose queue is full is closed."""
        for line in lines:
            try:
                self.outbox.put_nowait(line)
            except asyncio.QueueFull:
                self.request_stop(
                    Stop(
                        protocol.CLOSE_POLICY,
                        f"client too slow: {self.limits.send_queue_events} events not read; "
                        "read events as they come",
                        "slow_client",
                        flush=False,
                    )
                )
                return

    async def run(self) -> None:
        sender = asyncio.create_task(self._send_loop())
        try:
            await self._serve()
        except Gone:
            pass
        except ProtocolError as exc:
            self.server.metrics.dropped.labels(_kind(exc.code)).inc()
            log.info("closing %s: %s", self.ws.remote_address, exc.reason)
            await self.ws.close(exc.code, exc.reason)
        except Stop as stop:
            await self._stop(stop)
        finally:
            self.session.close()
            if self._timer is not None:
                self._timer.cancel()
            sender.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sender
            # a raised stop's traceback holds this handler's frames, which hold the
            # connection: let go, so the closed connection is freed now, not at a collection
            self.stop_requested = None
            self._timer = self._receiving = None

    async def _stop(self, stop: Stop) -> None:
        if stop.kind not in ("shutdown", "room_taken_over"):
            self.server.metrics.dropped.labels(stop.kind).inc()
        utterance, self.utterance = self.utterance, None
        if stop.flush and utterance is not None:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._flush(utterance), FLUSH_TIMEOUT_S)
            self.server.scheduler.discard(utterance)
        log.info("closing %s: %s", self.ws.remote_address, stop.reason)
        await self.ws.close(stop.code, stop.reason)

    async def _serve(self) -> None:
        server = self.server
        first = True
        while True:
            timeout = self.limits.handshake_timeout_s if first else self.limits.idle_timeout_s
            message = await self._receive(timeout, "config" if first else "idle")
            if first:  # the token a room may ask for (its publish token)
                self.session.token = presented_token(self.ws.headers, self.ws.query)
            first = False
            config = protocol.parse_config(
                message, server.options.endpoint, self.limits.max_queued_audio_s * 500
            )
            await self.session.open(config)
            while True:
                message = await self._receive(self.limits.idle_timeout_s, "idle")
                if isinstance(message, str):
                    if protocol.is_end(message):
                        break
                    continue
                if self.session.add_audio(protocol.decode_frame(message, config)):
                    # back-pressure: stop reading (the client's sends block) until decoded
                    await self._wait(self.session.drained())
            await self._finish_utterance()

    async def _finish_utterance(self) -> None:
        """End the open utterance's input; return once its final and summary are sent."""
        if self.utterance is None:
            return
        await self._wait(self.session.end_input())
        self.utterance = None
        await self._wait(self.outbox.join())

    async def _flush(self, utterance: Utterance) -> None:
        """Stopping: end the input and send the final and summary, whatever was requested."""
        await self.server.scheduler.end(utterance)
        await self.outbox.join()

    async def _wait(self, awaitable: Any) -> None:
        """Await `awaitable`, unless a stop is requested first (then raise it).

        A future passed in is not cancelled then: it is the scheduler's (an utterance's end),
        and the stop's flush awaits it again for the last final."""
        task = asyncio.ensure_future(awaitable)
        stop = asyncio.ensure_future(self._stop_event.wait())
        try:
            await asyncio.wait({task, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
        if not task.done():
            if task is not awaitable:
                task.cancel()
            if self.stop_requested is not None:
                raise self.stop_requested
        task.result()

    async def _receive(self, timeout_s: float, waiting_for: str) -> str | bytes:
        """The next message; Gone when the client closed, Stop on a limit or a stop.

        One plain await per message, as it is the server's most frequent step: no helper
        tasks and no timer per message. The time limit is a deadline the connection's timer
        checks when it fires; it and request_stop end the wait by cancelling this task."""
        loop = self._running_loop()
        session_left = self.limits.max_session_s - (time.monotonic() - self.started)
        wait_s = max(0.0, min(timeout_s, session_left))
        if self.stop_requested is not None:
            wait_s = 0.0  # stopping: a message already here is still read, none waited for
        self._deadline = deadline = loop.time() + wait_s
        if self._timer is None or self._timer_at > deadline:
            if self._timer is not None:
                self._timer.cancel()
            self._arm(deadline)
        task = asyncio.current_task(loop)
        self._receiving = task
        try:
            return await self.ws.recv()
        except asyncio.CancelledError:
            if not self._interrupted:
                raise
            # ours; one from outside as well (counted since Python 3.11) goes on
            uncancel = getattr(task, "uncancel", None)
            if uncancel is not None and uncancel() > 0:
                raise
        except SocketClosed as closed:
            if closed.code == protocol.CLOSE_TOO_BIG:  # uvicorn refused a message too big
                self.server.metrics.dropped.labels("frame_too_big").inc()
            raise Gone() from None
        finally:
            self._receiving = None
            self._interrupted = False
        if self.stop_requested is not None:
            raise self.stop_requested
        if session_left <= timeout_s:
            raise Stop(
                protocol.CLOSE_POLICY,
                f"session reached --max-session-s {self.limits.max_session_s:g} s",
                "session_limit",
                flush=True,
            )
        if waiting_for == "config":
            raise Stop(
                protocol.CLOSE_POLICY,
                f"no config within {timeout_s:g} s of connecting; send the JSON config first",
                "handshake_timeout",
                flush=False,
            )
        raise Stop(
            protocol.CLOSE_GOING_AWAY,
            f"idle: no message for {timeout_s:g} s (--idle-timeout-s)",
            "idle",
            flush=True,
        )

    async def _send_loop(self) -> None:
        while True:
            line = await self.outbox.get()
            try:
                await self.ws.send(line)
            except SocketClosed:
                pass
            finally:
                self.outbox.task_done()


def _kind(code: int) -> str:
    return {
        protocol.CLOSE_UNSUPPORTED: "unexpected_message",
        protocol.CLOSE_INVALID: "invalid_input",
    }.get(code, "protocol")
