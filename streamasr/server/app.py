"""The server: WebSocket sessions and HTTP routes on one port, over one scheduler.

Built on the `websockets` asyncio server: its `process_request` hook answers the few HTTP
routes (`/`, the page's files, `/healthz`, `/readyz`, `/metrics`) before a WebSocket
handshake would start, so one small dependency serves both, with its own limits on frame
size, handshake time and keepalive pings.

Every connection is a `Connection` (server/connection.py) over the one scheduler
(server/scheduler.py); this module routes, admits, stops and drains.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Callable
from importlib import resources
from typing import TYPE_CHECKING, Any, NoReturn
from urllib.parse import parse_qs

from streamasr.backends.base import Recognizer
from streamasr.output.finishing import NONE, Finishing
from streamasr.server import protocol
from streamasr.server.connection import Connection, Stop
from streamasr.server.limits import ConnectionSlots, Security, ServerLimits
from streamasr.server.metrics import Metrics
from streamasr.server.room_feeds import PREFIX as ROOMS_PREFIX
from streamasr.server.room_feeds import RoomFeeds
from streamasr.server.rooms import RoomOptions, Rooms, token_matches
from streamasr.server.scheduler import Scheduler
from streamasr.session.stream import StreamOptions

if TYPE_CHECKING:
    from streamasr.server.wyoming_adapter import WyomingSetup

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
#: an engine step running this long at a stop is wedged: the server ends without it
ENGINE_WEDGED_S = 5.0
#: The GIL switch interval while serving (Python's default is 5 ms). The engine thread lets
#: go of the GIL in every engine call and must take it back after each; while the event loop
#: runs Python that costs up to one interval per call, which on busy cores kept steps, and
#: so first tokens and finals, late.
SWITCH_INTERVAL_S = 0.0005


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
        finishing: Finishing = NONE,
        rooms: RoomOptions | None = None,
        slots: ConnectionSlots | None = None,
    ) -> None:
        """`per_message`: sessions that do not say their own feed block are fed each audio
        message as it comes (cut at `options.block_s`), not in fixed blocks; `finishing`:
        the sessions' default punctuation or casing (each may ask otherwise). `rooms`: None,
        a server without rooms (--workers: one room must live in one process). `slots`:
        the connection counts, shared by the workers with --workers."""
        self.recognizer = recognizer
        self.options = options
        self.limits = limits
        self.security = security
        self.metrics = metrics or Metrics()
        self.scheduler = Scheduler(
            recognizer, options, self.metrics, limits.max_batch, limits.max_wait_ms / 1000,
            per_message=per_message, finishing=finishing, schedule=limits.schedule,
        )
        self.rooms = Rooms(rooms, self.metrics.registry) if rooms is not None else None
        self.room_feeds = RoomFeeds(self.rooms)
        self.connections: set[Connection] = set()
        self.slots = slots or ConnectionSlots(limits.max_connections)
        self.stopping = False
        self.stop_signal: int | None = None
        self._stop = asyncio.Event()
        self._stop_at = 0.0
        self.wyoming: WyomingSetup | None = None  # serve --wyoming (server/wyoming_adapter.py)

    # -- HTTP -------------------------------------------------------------------------------

    def process_request(self, connection: Any, request: Any) -> Any:
        """HTTP routes; None lets a WebSocket handshake on /ws go on."""
        path, _, query = request.path.partition("?")
        upgrade = request.headers.get("Upgrade", "").lower() == "websocket"
        if path == WS_PATH:
            if not upgrade:
                return connection.respond(426, f"{WS_PATH} takes WebSocket connections\n")
            if not self._admits(_token(request.headers, query)):
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
            if self.slots.full:
                return connection.respond(503, f"at capacity: {self.slots.held} connections\n")
            return connection.respond(200, "ready\n")
        if path == "/metrics":
            body, content_type = self.metrics.render()
            return _response(200, body, content_type)
        if path == "/favicon.ico":
            return _response(204, b"", "image/x-icon")
        if path.startswith(ROOMS_PREFIX):
            return self.room_feeds.http(connection, request, _token(request.headers, query))
        if path in STATIC:
            name, content_type = STATIC[path]
            folder = resources.files("streamasr.server").joinpath("static")
            data = folder.joinpath(name).read_bytes()
            return _response(200, data, content_type)
        return connection.respond(404, f"not found; WebSocket sessions are at {WS_PATH}\n")

    def _admits(self, token: str | None) -> bool:
        """/ws takes the server's token, or the rooms' publish token when one is set."""
        if self.security.allows(token):
            return True
        publish = self.rooms.options.publish_token if self.rooms is not None else None
        return publish is not None and token_matches(publish, token)

    # -- WebSocket --------------------------------------------------------------------------

    async def handle(self, ws: Any) -> None:
        """One WebSocket connection, from handshake to close."""
        path, _, query = ws.request.path.partition("?")
        if path.startswith(ROOMS_PREFIX):  # a room's viewer (server/room_feeds.py)
            if self.stopping:
                await ws.close(protocol.CLOSE_GOING_AWAY, "server shutting down")
                return
            await self.room_feeds.view(ws, _token(ws.request.headers, query))
            return
        if self.stopping:
            self.metrics.refused.labels("shutting_down").inc()
            await ws.close(protocol.CLOSE_GOING_AWAY, "server shutting down")
            return
        if not self.slots.take():
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
            self.slots.give_back()

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

    async def _engine_wedged(self) -> None:
        """Returns once the engine step in flight has run ENGINE_WEDGED_S: no drain can end
        then (its sessions wait for that step, and so does each flush)."""
        while self.scheduler.engine_step_running_s() < ENGINE_WEDGED_S:
            await asyncio.sleep(0.25)

    def _abandon_wedged_engine(self) -> NoReturn:
        """End the process now: a thread stuck in an engine call cannot be stopped, and the
        interpreter would wait for it at exit. The sessions not held by that step have had
        their finals; the ones it holds get none."""
        seconds = self.scheduler.engine_step_running_s()
        sys.stderr.write(
            f"streamasr serve: an engine step has not returned for {seconds:.0f} s; stopping "
            "without it (the sessions in that step get no final)\n"
        )
        sys.stderr.flush()
        os._exit(128 + (self.stop_signal or signal.SIGTERM))

    def _close_sessions(self) -> None:
        if self.rooms is not None:
            self.rooms.close()
        for connection in list(self.connections):
            connection.request_stop(
                Stop(protocol.CLOSE_GOING_AWAY, "server shutting down", "shutdown", flush=True)
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
        wyoming = None
        try:
            # -- Wyoming (server/wyoming_adapter.py): a second listener over this scheduler;
            # it stops with the WebSocket side and is drained before the scheduler ends
            if self.wyoming is not None:
                from streamasr.server.wyoming_adapter import start_wyoming

                wyoming = await start_wyoming(self, self.wyoming)
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
                if wyoming is not None:
                    wyoming.stop()  # Wyoming
                if self.rooms is not None:  # viewers go once the publishers' finals are out
                    self._rooms_closer = asyncio.ensure_future(
                        self.rooms.close_when(lambda: not self.connections)
                    )
                log.info("stopping: no new connections; %d open", len(self.connections))
                server.close(close_connections=False)
                waiting = asyncio.ensure_future(server.wait_closed())
                wedged = asyncio.ensure_future(self._engine_wedged())
                first = asyncio.FIRST_COMPLETED
                done, _ = await asyncio.wait({waiting, wedged}, timeout=limits.grace_s,
                                             return_when=first)  # fmt: skip
                if waiting not in done:
                    if wedged not in done:
                        self._close_sessions()
                        done, _ = await asyncio.wait({waiting, wedged}, return_when=first)
                    if wedged in done:
                        self._abandon_wedged_engine()
                wedged.cancel()
        finally:
            if wyoming is not None:
                await wyoming.close()  # Wyoming: its open utterances' transcripts sent
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
