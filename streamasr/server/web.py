"""The web side of `streamasr serve`: every route in one FastAPI application on uvicorn.

uvicorn owns the listening socket, HTTP, WebSocket framing, TLS and keepalive pings; no
code of ours parses HTTP. Each protocol is one adapter module with its own router over the
server's scheduler (ws_adapter: the project's WebSocket protocol; room_feeds: the rooms'
viewers); this module adds the operational routes (`/healthz`, `/readyz`, `/metrics`, the
browser page) and sets uvicorn up with the server's limits. FastAPI serves the OpenAPI
schema of the HTTP routes at `/openapi.json` and a page over it at `/docs`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING, Any

import uvicorn
from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import PlainTextResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from streamasr.server import openai_realtime, openai_rest, room_feeds, ws_adapter
from streamasr.server.limits import ENCODED_WRITER, TRANSPORT, Security, ServerLimits
from streamasr.version import __version__

if TYPE_CHECKING:
    from streamasr.server.app import StreamServer

#: The browser page's files, by address.
PAGES = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/index.html": ("index.html", "text/html; charset=utf-8"),
    "/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/worklet.js": ("worklet.js", "text/javascript; charset=utf-8"),
}
#: Connections the event loop accepts per wake-up. asyncio accepts up to the listen backlog
#: at once; with --workers sharing one socket, the worker that woke first would take a whole
#: burst of arriving clients. A few at a time lets each worker take its turn.
ACCEPT_BATCH = 4
#: The kernel's queue of connections not yet accepted (restored after uvicorn's listen()).
LISTEN_BACKLOG = 1024
#: WebSocket messages read ahead of the route before the socket's reading pauses
READ_AHEAD = 8
READ_AHEAD_BYTES = 64 << 10
NO_STORE = {"Cache-Control": "no-store"}

ops = APIRouter(tags=["operations"])


def _server(request: Request) -> StreamServer:
    server: StreamServer = request.app.state.server
    return server


@ops.get("/healthz", response_class=PlainTextResponse, summary="The process is up")
def healthz() -> PlainTextResponse:
    return PlainTextResponse("ok\n", headers=NO_STORE)


@ops.get(
    "/readyz",
    response_class=PlainTextResponse,
    summary="The server takes new sessions",
    responses={503: {"description": "Shutting down or at --max-connections"}},
)
def readyz(request: Request) -> PlainTextResponse:
    server = _server(request)
    if server.stopping:
        return PlainTextResponse("shutting down\n", 503, headers=NO_STORE)
    if server.slots.full:
        return PlainTextResponse(
            f"at capacity: {server.slots.held} connections\n", 503, headers=NO_STORE
        )
    return PlainTextResponse("ready\n", headers=NO_STORE)


@ops.get("/metrics", response_class=PlainTextResponse, summary="Prometheus metrics")
def metrics(request: Request) -> Response:
    body, content_type = _server(request).metrics.render()
    return Response(body, media_type=content_type, headers=NO_STORE)


@ops.get("/favicon.ico", include_in_schema=False)
def favicon() -> Response:
    return Response(b"", 204, media_type="image/x-icon")


def _page_route(name: str, content_type: str) -> Any:
    def page() -> Response:
        data = resources.files("streamasr.server").joinpath("static").joinpath(name)
        return Response(data.read_bytes(), media_type=content_type, headers=NO_STORE)

    return page


for _path, (_name, _type) in PAGES.items():
    ops.add_api_route(_path, _page_route(_name, _type), include_in_schema=False)


def _not_found(request: Request, exc: Exception) -> Response:
    """Plain text that says where things are; errors of the routes themselves keep theirs."""
    if isinstance(exc, StarletteHTTPException) and exc.status_code != 404:
        return PlainTextResponse(f"{exc.detail}\n", exc.status_code, headers=exc.headers)
    return PlainTextResponse(
        f"not found; WebSocket sessions are at {ws_adapter.WS_PATH}, the API at /docs\n", 404
    )


def build_app(server: StreamServer) -> FastAPI:
    """The application over one server: its routers, its state."""
    app = FastAPI(
        title="streamasr",
        version=__version__,
        summary="Streaming speech recognition: live sessions, uploads, rooms.",
        docs_url="/docs",
        redoc_url=None,
    )
    app.state.server = server
    app.include_router(ops)
    app.include_router(ws_adapter.router)
    app.include_router(room_feeds.router)
    app.include_router(openai_rest.router)
    app.include_router(openai_realtime.router)
    app.add_exception_handler(StarletteHTTPException, _not_found)
    schema = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            _open_where_no_token(schema(), server)
        return app.openapi_schema or {}

    app.openapi = openapi  # type: ignore[method-assign]
    return app


def _open_where_no_token(schema: dict[str, Any], server: StreamServer) -> None:
    """The schema as this server answers: an operation needs a token only where one is set
    (the routes declare theirs; without --token-file or --view-token-file they are open,
    and a schema that claims otherwise describes responses this server never gives)."""
    rooms = server.rooms
    unset = set() if server.security.token is not None else {"HTTPBearer"}
    if rooms is None or rooms.options.view_token is None:
        unset |= {"ViewToken", "ViewTokenQuery"}
    for operations in schema.get("paths", {}).values():
        for operation in operations.values():
            kept = [need for need in operation.get("security", ()) if not set(need) & unset]
            if kept:
                operation["security"] = kept
            else:
                operation.pop("security", None)
    schemes = schema.get("components", {}).get("securitySchemes", {})
    for name in unset:
        schemes.pop(name, None)


def web_server(app: FastAPI, limits: ServerLimits, security: Security) -> uvicorn.Server:
    """uvicorn over `app` with the server's limits; the StreamServer keeps the signals."""
    config = uvicorn.Config(
        app,
        http=_first_request_deadline(limits.handshake_timeout_s),
        ws=_abortable_websockets(),
        ws_max_size=limits.max_frame_bytes,
        ws_per_message_deflate=False,
        lifespan="off",
        log_config=None,
        access_log=False,
        server_header=False,
        backlog=ACCEPT_BATCH,
        timeout_graceful_shutdown=5,
    )
    config.load()
    config.ssl = security.ssl_context()
    return _Server(config)


def _first_request_deadline(seconds: float) -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol with a deadline for the first request's headers: a client
    that connects and sends nothing (or drips its headers) is closed, as it was by the
    WebSocket handshake limit (--handshake-timeout-s)."""
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    class FirstRequestDeadline(HttpToolsProtocol):
        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self.loop.call_later(seconds, self._first_request_due)

        def on_message_begin(self) -> None:
            super().on_message_begin()
            scope = self.scope
            scope[TRANSPORT] = self.transport  # type: ignore[literal-required]
            scope[ENCODED_WRITER] = EncodedWriter(  # type: ignore[literal-required]
                http_chunk, lambda data: self._write_chunk(scope, data)
            )

        def _write_chunk(self, scope: Any, data: bytes) -> bool:
            """Write one framed chunk of this request's chunked response body, as the
            response's own sends do; False when that response is not (or no longer) open."""
            cycle = self.cycle
            if (cycle is None or cycle.scope is not scope or not cycle.response_started
                    or not cycle.chunked_encoding or cycle.response_complete
                    or cycle.disconnected or self.transport.is_closing()):  # fmt: skip
                return False
            self.transport.write(data)
            return True

        def _first_request_due(self) -> None:
            transport = self.transport
            if transport.is_closing() or transport.get_protocol() is not self:
                return  # closed, or upgraded to a WebSocket
            if self.cycle is None and not self.pipeline:
                transport.close()

    return FirstRequestDeadline


def _abortable_websockets() -> type[asyncio.Protocol]:
    """uvicorn's WebSocket protocol with the connection's transport in the scope, so a
    route can abort a connection whose reader stopped reading (a close would wait for the
    unsent bytes for ever)."""
    from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
    from websockets.protocol import State

    class Abortable(WebSocketsSansIOProtocol):
        def handle_connect(self, event: Any) -> None:
            super().handle_connect(event)
            if getattr(self, "scope", None) is not None:
                self.scope[TRANSPORT] = self.transport  # type: ignore[literal-required]
                self.scope[ENCODED_WRITER] = EncodedWriter(  # type: ignore[literal-required]
                    ws_text_frame, self._write_frame
                )

        def _write_frame(self, data: bytes) -> bool:
            """Write one whole text frame, as the route's sends do; False once the
            connection is closing (a close sent or received)."""
            if self.close_sent or self.conn.state is not State.OPEN or self.transport.is_closing():
                return False
            self.transport.write(data)
            return True

        def send_receive_event_to_app(self) -> None:
            # uvicorn stops reading after every message and starts again once the route
            # took it: two system calls per audio message. Small messages are read ahead
            # (at most READ_AHEAD of READ_AHEAD_BYTES each wait) before reading stops; it
            # resumes when the route has taken them all, as in uvicorn's own receive().
            size = sum(len(frame) for frame in self.frames)
            if self.read_paused or size > READ_AHEAD_BYTES or self.queue.qsize() + 1 >= READ_AHEAD:
                super().send_receive_event_to_app()
                return
            self.read_paused = True  # so uvicorn's method leaves the reading on
            try:
                super().send_receive_event_to_app()
            finally:
                self.read_paused = False

    return Abortable


@dataclass(frozen=True)
class EncodedWriter:
    """Writes bytes encoded once for many connections of one kind straight onto this one:
    a room's event goes to a thousand readers as one encoding and a thousand writes, without
    a task switch, an ASGI message and a framing per reader. `frame` makes a payload this
    kind of connection's unit on the wire (a pure function: one result serves every
    connection of the kind); `write` sends such a unit, False when the connection no longer
    takes it. Only once the route's own sends are done (nothing of theirs half-written)."""

    frame: Callable[[bytes], bytes]
    write: Callable[[bytes], bool]


def ws_text_frame(payload: bytes) -> bytes:
    """An unmasked, unfragmented WebSocket text frame (a server's; no extension is on:
    --ws-per-message-deflate is off), as the websockets library serializes it."""
    from websockets.frames import Frame, Opcode

    return Frame(Opcode.TEXT, payload).serialize(mask=False, extensions=[])


def http_chunk(payload: bytes) -> bytes:
    """One chunk of a chunked HTTP/1.1 response body, as uvicorn frames it."""
    return b"%x\r\n%b\r\n" % (len(payload), payload)


class _Server(uvicorn.Server):
    """uvicorn's server without its signal handlers: SIGTERM and SIGINT are the
    StreamServer's, which drains the sessions before uvicorn closes the rest. After
    startup the listening socket's queue is set back to LISTEN_BACKLOG (uvicorn's
    listen() used the accept batch)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

    async def startup(self, sockets: Any = None) -> None:
        await super().startup(sockets)
        for sock in sockets or ():
            sock.listen(LISTEN_BACKLOG)
