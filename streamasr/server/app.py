"""The server: WebSocket sessions and HTTP routes on one port, over one scheduler.

Built on the `websockets` asyncio server: its `process_request` hook answers the few HTTP
routes (`/`, the page's files, `/healthz`, `/readyz`, `/metrics`) before a WebSocket
handshake would start, so one small dependency serves both, with its own limits on frame
size, handshake time and keepalive pings.

Every connection is a `Connection`: it reads the config and the audio, hands the audio to
the scheduler and sends the events the scheduler delivers through a bounded queue, so a
client that reads slowly only ever delays itself (and is closed once its queue is full).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
import socket
import sys
import time
from collections.abc import Callable
from importlib import resources
from typing import Any
from urllib.parse import parse_qs

from streamasr.backends.base import Recognizer
from streamasr.server import protocol
from streamasr.server.limits import Security, ServerLimits
from streamasr.server.metrics import Metrics
from streamasr.server.protocol import ProtocolError
from streamasr.server.scheduler import Scheduler, Utterance
from streamasr.stream import StreamOptions

log = logging.getLogger("streamasr")

WS_PATH = "/ws"
STATIC = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/index.html": ("index.html", "text/html; charset=utf-8"),
    "/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/worklet.js": ("worklet.js", "text/javascript; charset=utf-8"),
}
#: Stop signals this close to the first are copies of it, not a second stop.
DUPLICATE_SIGNAL_S = 1.0
#: How long the last final and summary may take to reach a client before the close.
FLUSH_TIMEOUT_S = 10.0
#: The GIL switch interval while serving (Python's default is 5 ms). The engine thread lets
#: go of the GIL in every engine call and must take it back after each; while the event loop
#: runs Python that costs up to one interval per call, which on busy cores kept steps, and
#: so first tokens and finals, late.
SWITCH_INTERVAL_S = 0.0005


class _Stop(Exception):
    """The server ends this connection (a limit, shutdown, a slow client); close with this."""

    def __init__(self, code: int, reason: str, kind: str, flush: bool) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = protocol.close_reason(reason)
        self.kind = kind  # metrics label
        self.flush = flush  # finish the open utterance and send its final first


class _Gone(Exception):
    """The client closed the connection."""


class Connection:
    """One WebSocket client: utterance after utterance, until it closes or is closed."""

    def __init__(self, server: StreamServer, ws: Any) -> None:
        self.server = server
        self.ws = ws
        self.limits = server.limits
        self.started = time.monotonic()
        self.outbox: asyncio.Queue[str] = asyncio.Queue(self.limits.send_queue_events)
        self.stop_requested: _Stop | None = None
        self._stop_event = asyncio.Event()
        # _receive: the handler task while it waits for a message, that wait's deadline (loop
        # time) and one timer per connection that is only moved when it fires
        self._receiving: asyncio.Task[Any] | None = None
        self._interrupted = False  # that wait was cancelled by a stop or its deadline
        self._deadline = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self.utterance: Utterance | None = None

    def request_stop(self, stop: _Stop) -> None:
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
        if timer is not None and self._deadline > timer.when():
            self._timer = asyncio.get_running_loop().call_at(self._deadline, self._on_deadline)
        else:
            self._interrupt()

    def deliver(self, lines: list[str]) -> None:
        """Queue events to send; a client whose queue is full is closed."""
        for line in lines:
            try:
                self.outbox.put_nowait(line)
            except asyncio.QueueFull:
                self.request_stop(
                    _Stop(
                        protocol.CLOSE_POLICY,
                        f"client too slow: {self.limits.send_queue_events} events not read; "
                        "read events as they come",
                        "slow_client",
                        flush=False,
                    )
                )
                return

    def fail(self, reason: str) -> None:
        self.request_stop(_Stop(protocol.CLOSE_INTERNAL, reason, "engine_error", flush=False))

    async def run(self) -> None:
        sender = asyncio.create_task(self._send_loop())
        try:
            await self._serve()
        except _Gone:
            pass
        except ProtocolError as exc:
            self.server.metrics.dropped.labels(_kind(exc.code)).inc()
            log.info("closing %s: %s", self.ws.remote_address, exc.reason)
            await self.ws.close(exc.code, exc.reason)
        except _Stop as stop:
            await self._stop(stop)
        finally:
            if self.utterance is not None:
                self.server.scheduler.discard(self.utterance)
            if self._timer is not None:
                self._timer.cancel()
            sender.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sender

    async def _stop(self, stop: _Stop) -> None:
        if stop.kind not in ("shutdown",):
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
            first = False
            config = protocol.parse_config(
                message, server.options.endpoint, self.limits.max_queued_audio_s * 500
            )
            self.utterance = await server.scheduler.open(config, self.deliver, self.fail)
            while True:
                message = await self._receive(self.limits.idle_timeout_s, "idle")
                if isinstance(message, str):
                    if protocol.is_end(message):
                        break
                    continue
                samples = protocol.decode_frame(message, config)
                server.scheduler.add_audio(self.utterance, samples)
                if self.utterance.queued_s > self.limits.max_queued_audio_s:
                    # back-pressure: stop reading (the client's sends block) until decoded
                    await self._wait(self.utterance.drained.wait())
            await self._finish_utterance()

    async def _finish_utterance(self) -> None:
        """End the open utterance's input; return once its final and summary are sent."""
        utterance = self.utterance
        if utterance is None:
            return
        await self._wait(self.server.scheduler.end(utterance))
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
        """The next message; _Gone when the client closed, _Stop on a limit or a stop.

        One plain await per message, as it is the server's most frequent step: no helper
        tasks and no timer per message. The time limit is a deadline the connection's timer
        checks when it fires; it and request_stop end the wait by cancelling this task."""
        loop = asyncio.get_running_loop()
        session_left = self.limits.max_session_s - (time.monotonic() - self.started)
        wait_s = max(0.0, min(timeout_s, session_left))
        if self.stop_requested is not None:
            wait_s = 0.0  # stopping: a message already here is still read, none waited for
        self._deadline = deadline = loop.time() + wait_s
        if self._timer is None or self._timer.when() > deadline:
            if self._timer is not None:
                self._timer.cancel()
            self._timer = loop.call_at(deadline, self._on_deadline)
        task = asyncio.current_task()
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
        except Exception as exc:
            from websockets.exceptions import ConnectionClosed  # here: ~4 us per import

            if not isinstance(exc, ConnectionClosed):
                raise
            if self.ws.close_code == protocol.CLOSE_TOO_BIG:
                self.server.metrics.dropped.labels("frame_too_big").inc()
            raise _Gone() from None
        finally:
            self._receiving = None
            self._interrupted = False
        if self.stop_requested is not None:
            raise self.stop_requested
        if session_left <= timeout_s:
            raise _Stop(
                protocol.CLOSE_POLICY,
                f"session reached --max-session-s {self.limits.max_session_s:g} s",
                "session_limit",
                flush=True,
            )
        if waiting_for == "config":
            raise _Stop(
                protocol.CLOSE_POLICY,
                f"no config within {timeout_s:g} s of connecting; send the JSON config first",
                "handshake_timeout",
                flush=False,
            )
        raise _Stop(
            protocol.CLOSE_GOING_AWAY,
            f"idle: no message for {timeout_s:g} s (--idle-timeout-s)",
            "idle",
            flush=True,
        )

    async def _send_loop(self) -> None:
        from websockets.exceptions import ConnectionClosed

        while True:
            line = await self.outbox.get()
            try:
                await self.ws.send(line)
            except ConnectionClosed:
                pass
            finally:
                self.outbox.task_done()


def _kind(code: int) -> str:
    return {
        protocol.CLOSE_UNSUPPORTED: "unexpected_message",
        protocol.CLOSE_INVALID: "invalid_input",
    }.get(code, "protocol")


class StreamServer:
    """One engine behind one port: WebSocket sessions, HTTP routes, a graceful stop."""

    def __init__(
        self,
        recognizer: Recognizer,
        options: StreamOptions,
        limits: ServerLimits,
        security: Security,
        metrics: Metrics | None = None,
        per_message: bool = False,
    ) -> None:
        """`per_message`: sessions that do not say their own feed block are fed each audio
        message as it comes (cut at `options.block_s`), not in fixed blocks."""
        self.recognizer = recognizer
        self.options = options
        self.limits = limits
        self.security = security
        self.metrics = metrics or Metrics()
        self.scheduler = Scheduler(
            recognizer, options, self.metrics, limits.max_batch, limits.max_wait_ms / 1000,
            per_message=per_message,
        )
        self.connections: set[Connection] = set()
        self.stopping = False
        self.stop_signal: int | None = None
        self._stop = asyncio.Event()
        self._stop_at = 0.0

    # -- HTTP -------------------------------------------------------------------------------

    def process_request(self, connection: Any, request: Any) -> Any:
        """HTTP routes; None lets a WebSocket handshake on /ws go on."""
        path, _, query = request.path.partition("?")
        upgrade = request.headers.get("Upgrade", "").lower() == "websocket"
        if path == WS_PATH:
            if not upgrade:
                return connection.respond(426, f"{WS_PATH} takes WebSocket connections\n")
            if not self.security.allows(_token(request.headers, query)):
                self.metrics.refused.labels("auth").inc()
                return connection.respond(
                    401,
                    "missing or wrong token: send 'Authorization: Bearer TOKEN' (a browser "
                    "page: add ?token=TOKEN to the page's address)\n",
                )
            return None
        if path == "/healthz":
            return connection.respond(200, "ok\n")
        if path == "/readyz":
            if self.stopping:
                return connection.respond(503, "shutting down\n")
            if len(self.connections) >= self.limits.max_connections:
                return connection.respond(
                    503, f"at capacity: {len(self.connections)} connections\n"
                )
            return connection.respond(200, "ready\n")
        if path == "/metrics":
            body, content_type = self.metrics.render()
            return _response(200, body, content_type)
        if path == "/favicon.ico":
            return _response(204, b"", "image/x-icon")
        if path in STATIC:
            name, content_type = STATIC[path]
            folder = resources.files("streamasr.server").joinpath("static")
            data = folder.joinpath(name).read_bytes()
            return _response(200, data, content_type)
        return connection.respond(404, f"not found; WebSocket sessions are at {WS_PATH}\n")

    # -- WebSocket --------------------------------------------------------------------------

    async def handle(self, ws: Any) -> None:
        """One WebSocket connection, from handshake to close."""
        if self.stopping:
            self.metrics.refused.labels("shutting_down").inc()
            await ws.close(protocol.CLOSE_GOING_AWAY, "server shutting down")
            return
        if len(self.connections) >= self.limits.max_connections:
            self.metrics.refused.labels("capacity").inc()
            await ws.close(
                protocol.CLOSE_TRY_LATER,
                f"server at capacity ({self.limits.max_connections} connections, "
                "--max-connections); try again later",
            )
            return
        connection = Connection(self, ws)
        self.connections.add(connection)
        self.metrics.connections.inc()
        self.metrics.active_sessions.inc()
        try:
            await connection.run()
        finally:
            self.connections.discard(connection)
            self.metrics.active_sessions.dec()

    # -- serving ----------------------------------------------------------------------------

    def request_stop(self, signum: int) -> None:
        """SIGTERM/SIGINT: stop accepting and let open sessions finish; a second signal
        ends the grace period at once.

        Copies of one stop that arrive together (Ctrl-C reaches a whole process group,
        systemd signals a whole cgroup, and a --workers parent passes its own on) count
        once: a signal within DUPLICATE_SIGNAL_S of the first is not a second one.
        """
        now = time.monotonic()
        if self._stop.is_set():
            if now - self._stop_at < DUPLICATE_SIGNAL_S:
                return
            log.warning("second stop signal: closing open sessions now")
            self._close_sessions()
            return
        self.stop_signal = signum
        self._stop_at = now
        self._stop.set()

    def _close_sessions(self) -> None:
        for connection in list(self.connections):
            connection.request_stop(
                _Stop(protocol.CLOSE_GOING_AWAY, "server shutting down", "shutdown", flush=True)
            )

    async def serve(
        self,
        host: str | None,
        port: int | None,
        on_ready: Callable[[list[tuple[str, int]]], None],
        sock: socket.socket | None = None,
    ) -> None:
        """Serve until SIGTERM/SIGINT; then drain within the grace period and return.

        `sock`: a listening socket to serve on instead of `host` and `port` (--workers)."""
        from websockets.asyncio.server import serve

        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, self.request_stop, signum)
        origins: list[str | None] | None = None
        if self.security.origins:
            origins = [*self.security.origins, None]  # None: clients that send no Origin
        scheduler_task = asyncio.create_task(self.scheduler.run())
        limits = self.limits
        switch_interval = sys.getswitchinterval()
        sys.setswitchinterval(SWITCH_INTERVAL_S)
        # The model, the imports and the rest of startup stay for the process's life: out of
        # the garbage collector's sight, a full collection no longer walks them (~30 ms on
        # the event loop each time, which showed as late finals), only the sessions' objects.
        gc.freeze()
        try:
            async with serve(
                self.handle,
                host,
                port,
                process_request=self.process_request,
                origins=origins,  # type: ignore[arg-type]
                ssl=self.security.ssl_context(),
                compression=None,
                open_timeout=limits.handshake_timeout_s,
                close_timeout=5,
                max_size=limits.max_frame_bytes,
                server_header=None,
                sock=sock,
            ) as server:
                on_ready([sock.getsockname()[:2] for sock in server.sockets])
                await self._stop.wait()
                self.stopping = True
                log.info("stopping: no new connections; %d open", len(self.connections))
                server.close(close_connections=False)
                waiting = asyncio.ensure_future(server.wait_closed())
                done, _ = await asyncio.wait({waiting}, timeout=limits.grace_s)
                if not done:
                    self._close_sessions()
                    await waiting
        finally:
            scheduler_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await scheduler_task
            await loop.run_in_executor(None, self.scheduler.close)
            sys.setswitchinterval(switch_interval)
            gc.unfreeze()
            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(signum)
                # drained: a stop signal from here to the exit (a copy of the first, or the
                # supervisor's own while the process winds down) must not kill it with the
                # signal's default action (exit status -15 instead of 0)
                signal.signal(signum, signal.SIG_IGN)


def _token(headers: Any, query: str) -> str | None:
    auth = headers.get("Authorization", "")
    if auth.lower().startswith("bearer "):
        return str(auth[7:].strip())
    values = parse_qs(query).get("token")
    return values[0] if values else None


def _response(status: int, body: bytes, content_type: str) -> Any:
    from websockets.datastructures import Headers
    from websockets.http11 import Response

    headers = Headers(
        [
            ("Content-Type", content_type),
            ("Content-Length", str(len(body))),
            ("Cache-Control", "no-store"),
            ("Connection", "close"),
        ]
    )
    return Response(status, "OK" if status == 200 else "Error", headers, body)


def run_server(
    server: StreamServer,
    host: str | None,
    port: int | None,
    on_ready: Callable[[list[tuple[str, int]]], None],
    sock: socket.socket | None = None,
) -> int | None:
    """Run until stopped; the stop signal's number (None if none came)."""
    asyncio.run(server.serve(host, port, on_ready, sock))
    return server.stop_signal
