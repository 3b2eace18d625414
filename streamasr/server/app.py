"""The server: one engine, one scheduler, every protocol's routes on one port.

The routes are a FastAPI application served by uvicorn (server/web.py builds it): uvicorn
owns the sockets, HTTP, WebSocket framing, TLS and keepalive pings; each protocol is one
adapter module over the scheduler. This module keeps what is the server's own: admission,
the stop (drain the open sessions within the grace period, then let uvicorn close the
rest) and the wedged-engine exit.
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
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, NoReturn, Protocol

from streamasr.backends.base import Recognizer
from streamasr.output.finishing import NONE, Finishing
from streamasr.server import protocol
from streamasr.server.client_session import Refused, Stop
from streamasr.server.limits import ConnectionSlots, Security, ServerLimits
from streamasr.server.metrics import Metrics
from streamasr.server.room_broker import RoomBroker
from streamasr.server.rooms import RoomOptions, Rooms, token_matches
from streamasr.server.scheduler import Scheduler
from streamasr.session.stream import StreamOptions

if TYPE_CHECKING:
    from streamasr.server.wyoming_listener import WyomingSetup

log = logging.getLogger("streamasr")

#: Stop signals this close to the first are copies of it, not a second stop.
DUPLICATE_SIGNAL_S = 1.0
#: an engine step running this long at a stop is wedged: the server ends without it
ENGINE_WEDGED_S = 5.0
#: The GIL switch interval while serving (Python's default is 5 ms). The engine thread lets
#: go of the GIL in every engine call and must take it back after each; while the event loop
#: runs Python that costs up to one interval per call, which on busy cores kept steps, and
#: so first tokens and finals, late.
SWITCH_INTERVAL_S = 0.0005


def make_broker(options: RoomOptions, registry: object = None) -> RoomBroker:
    """The rooms' broker `options.url` names: in this process (None) or Redis."""
    if options.url is None:
        return Rooms(options, registry)
    from streamasr.server.room_redis import RedisRooms

    return RedisRooms(options, registry)


class Stoppable(Protocol):
    """An open session of any protocol, as the server's stop sees it."""

    def request_stop(self, stop: Stop) -> None: ...


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
        self.rooms = make_broker(rooms, self.metrics.registry) if rooms is not None else None
        # every open session, whatever its protocol: each is asked to stop at shutdown
        self.connections: set[Stoppable] = set()
        self.slots = slots or ConnectionSlots(limits.max_connections)
        self.stopping = False
        self.stop_signal: int | None = None
        self._stop = asyncio.Event()
        self._stop_at = 0.0
        self.wyoming: WyomingSetup | None = None  # serve --wyoming (server/wyoming_listener.py)

    def admits(self, token: str | None) -> bool:
        """/ws takes the server's token, or the rooms' publish token when one is set."""
        if self.security.allows(token):
            return True
        publish = self.rooms.options.publish_token if self.rooms is not None else None
        return publish is not None and token_matches(publish, token)

    # -- sessions -------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def admitted(self, session: Stoppable) -> AsyncIterator[None]:
        """Hold one connection slot for `session` while open, and ask it to stop when the
        server stops; Refused (nothing held) while the server stops or is full."""
        if self.stopping:
            self.metrics.refused.labels("shutting_down").inc()
            raise Refused("shutting_down", "server shutting down")
        if not self.slots.take():
            self.metrics.refused.labels("capacity").inc()
            raise Refused(
                "capacity",
                f"server at capacity ({self.limits.max_connections} connections, "
                "--max-connections); try again later",
            )
        self.metrics.connections.inc()
        self.metrics.active_sessions.inc()
        self.connections.add(session)
        try:
            yield
        finally:
            self.connections.discard(session)
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
        sock: socket.socket,
        on_ready: Callable[[list[tuple[str, int]]], None],
    ) -> None:
        """Serve on the listening `sock` until SIGTERM/SIGINT; then drain within the grace
        period and return."""
        from streamasr.server.web import build_app, web_server

        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, self.request_stop, signum)
        scheduler_task = asyncio.create_task(self.scheduler.run())
        web = web_server(build_app(self), self.limits, self.security)
        switch_interval = sys.getswitchinterval()
        sys.setswitchinterval(SWITCH_INTERVAL_S)
        # The model, the imports and the rest of startup stay for the process's life: out of
        # the garbage collector's sight, a full collection no longer walks them (~30 ms on
        # the event loop each time, which showed as late finals), only the sessions' objects.
        gc.freeze()
        serving = asyncio.create_task(web.serve([sock]))
        wyoming = None
        try:
            # -- Wyoming (server/wyoming_listener.py): a second listener; its connections
            # are sessions like the WebSocket ones (admitted, drained and stopped with them)
            if self.wyoming is not None:
                from streamasr.server.wyoming_listener import start_wyoming

                wyoming = await start_wyoming(self, self.wyoming)
            while not web.started:
                if serving.done():
                    serving.result()
                    raise RuntimeError("the web server stopped while starting")
                await asyncio.sleep(0.01)
            on_ready([sock.getsockname()[:2]])
            await self._stop.wait()
            self.stopping = True
            if wyoming is not None:
                wyoming.stop()
            if self.rooms is not None:  # viewers go once the publishers' finals are out
                self._rooms_closer = asyncio.ensure_future(
                    self.rooms.close_when(lambda: not self.connections)
                )
            log.info("stopping: no new connections; %d open", len(self.connections))
            for listener in web.servers:
                listener.close()
            await self._drain()
            web.should_exit = True
            await serving
        finally:
            if wyoming is not None:
                await wyoming.close()
            if not serving.done():
                web.force_exit = web.should_exit = True
                with contextlib.suppress(Exception):
                    await serving
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

    async def _drain(self) -> None:
        """Let the open sessions finish within the grace period, then close them (each
        still flushes its last final); a wedged engine ends the process."""

        async def sessions_done() -> None:
            while self.connections:
                await asyncio.sleep(0.05)

        waiting = asyncio.ensure_future(sessions_done())
        wedged = asyncio.ensure_future(self._engine_wedged())
        first = asyncio.FIRST_COMPLETED
        done, _ = await asyncio.wait({waiting, wedged}, timeout=self.limits.grace_s,
                                     return_when=first)  # fmt: skip
        if waiting not in done:
            if wedged not in done:
                self._close_sessions()
                done, _ = await asyncio.wait({waiting, wedged}, return_when=first)
            if wedged in done:
                self._abandon_wedged_engine()
        for task in (waiting, wedged):
            task.cancel()

