"""Where `serve --wyoming` listens: the option's form, the TCP listener, its close.

Why apart from the adapter: this is the port, not the protocol. Each accepted connection is
a WyomingConnection (server/wyoming_adapter.py), a session of the server like a WebSocket
one: the server admits it, drains it at a stop and ends it at a second signal; the listener
only stops accepting and, once the server has drained, waits for what is still closing.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from streamasr.errors import StreamAsrError, UsageError
from streamasr.server.reach import bracketed
from streamasr.server.wyoming_adapter import WyomingConnection
from streamasr.server.wyoming_frames import LINGER_S, MAX_HEADER_BYTES

if TYPE_CHECKING:
    from streamasr.server.app import StreamServer

log = logging.getLogger("streamasr")

USAGE = "use tcp://HOST:PORT, e.g. tcp://0.0.0.0:10300 (Home Assistant's usual Wyoming port)"


@dataclass(frozen=True)
class WyomingSetup:
    """Where `serve --wyoming` listens, and what to call once it does (the bound addresses:
    with PORT 0, the port picked)."""

    host: str
    port: int
    on_ready: Callable[[list[tuple[str, int]]], None] | None = None


def wyoming_setup(
    uri: str, on_ready: Callable[[list[tuple[str, int]]], None] | None = None
) -> WyomingSetup:
    """`--wyoming tcp://HOST:PORT` read, or a UsageError saying the form."""
    try:
        parts = urlsplit(uri)
        port = parts.port
    except ValueError:
        raise UsageError(f"--wyoming {uri}: {USAGE}, PORT 0-65535") from None
    if (
        parts.scheme != "tcp"
        or not parts.hostname
        or port is None
        or parts.path not in ("", "/")
        or parts.query
        or parts.fragment
        or parts.username is not None
    ):
        raise UsageError(f"--wyoming {uri}: {USAGE}")
    return WyomingSetup(parts.hostname, port, on_ready)


class WyomingListener:
    """The Wyoming TCP listener of one server; its connections are the server's sessions
    (admitted, drained and stopped with the others)."""

    def __init__(self, server: StreamServer) -> None:
        self.server = server
        self._tcp: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[Any]] = set()

    @property
    def addresses(self) -> list[tuple[str, int]]:
        """(host, port) of each bound socket (the port picked where PORT was 0)."""
        if self._tcp is None:
            return []
        return [sock.getsockname()[:2] for sock in self._tcp.sockets]

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            await WyomingConnection(self.server, reader, writer).run()
        except Exception:  # a bug here must not end the listener
            log.exception("wyoming: connection failed")
            writer.close()
        finally:
            if task is not None:
                self._tasks.discard(task)

    def stop(self) -> None:
        """The server stops: no new connections (its drain ends the open ones)."""
        if self._tcp is not None:
            self._tcp.close()

    async def close(self) -> None:
        """Once the server has drained: wait for the connections still closing (a refusal
        lingers up to 2 * LINGER_S), cancel what is left."""
        self.stop()
        if self._tasks:
            _, pending = await asyncio.wait(set(self._tasks), timeout=2 * LINGER_S + 1.0)
            for task in pending:
                task.cancel()


async def start_wyoming(server: StreamServer, setup: WyomingSetup) -> WyomingListener:
    """Listen for Wyoming clients beside the WebSocket ones, over the server's scheduler;
    `setup.on_ready` hears the bound addresses. StreamAsrError where the address cannot be
    had."""
    listener = WyomingListener(server)
    try:
        listener._tcp = await asyncio.start_server(
            listener._accept, setup.host, setup.port, limit=MAX_HEADER_BYTES
        )
    except OSError as exc:
        raise StreamAsrError(
            f"--wyoming: cannot listen on tcp://{bracketed(setup.host)}:{setup.port}: "
            f"{exc.strerror or exc}; pick another port (0: any free one) or stop what holds it"
        ) from None
    log.info("wyoming: listening on %s", listener.addresses)
    if setup.on_ready is not None:
        setup.on_ready(listener.addresses)
    return listener
