"""The viewers' side of rooms: the page, the WebSocket and Server-Sent Events feeds, and
the transcripts so far.

    GET /rooms/NAME                      the viewer page
    GET /rooms/NAME/ws  (WebSocket)      the room's events, one JSON text message each
    GET /rooms/NAME/events  (SSE)        the same events as `data:` lines, `id:` = room_seq
    GET /rooms/NAME/transcript.txt|srt|vtt   the kept finals as `file --format` writes them

A feed sends the kept finals after `?after=SEQ` (SSE: also the `Last-Event-ID` header a
reconnecting EventSource sends), then a `status` event, then the live events; with
`&talk=ID` (the status's `talk`) from another talk (the server restarted), the status comes
first and then every kept final. The view
token (`--view-token-file`), when set, comes as `Authorization: Bearer` or `?token=`.

A viewer is a bounded queue the room writes to without waiting (`QueuedViewer`); the feed's
request drains it onto its connection (sse-starlette for SSE): the kept finals and the
status as the viewer joins. Once that queue is sent, the room's live events go straight
onto the connection, each encoded once for all readers of a feed (a WebSocket frame, an SSE
chunk: server/web.py's EncodedWriter), so a thousand readers cost one encoding and a
thousand socket writes per event, not a thousand task switches and ASGI messages. Unsent
bytes past the room's `viewer_buffer_bytes` (queued, or in the connection's write buffer)
mean a reader too slow for the room: it is dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections import deque
from collections.abc import AsyncIterator, Callable
from importlib import resources
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import parse_qs

from fastapi import APIRouter, Depends, Request, WebSocket
from fastapi.responses import PlainTextResponse, Response
from fastapi.security import APIKeyQuery, HTTPBearer
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.exceptions import HTTPException as StarletteHTTPException

from streamasr.server import protocol
from streamasr.server.limits import ENCODED_WRITER, TRANSPORT
from streamasr.server.room_broker import BrokerDown, RoomBroker, RoomFull, RoomMissing, Viewer
from streamasr.server.room_transcripts import rendered
from streamasr.server.rooms import (
    CLOSE_FULL,
    CLOSE_TOKEN,
    CLOSE_UNKNOWN,
    KEEPALIVE_S,
    NO_ROOMS,
    presented_token,
    token_matches,
)

if TYPE_CHECKING:
    from streamasr.server.app import StreamServer
    from streamasr.server.web import EncodedWriter

log = logging.getLogger("streamasr")

PREFIX = "/rooms/"
TRANSCRIPTS = {
    "txt": "text/plain; charset=utf-8",
    "srt": "application/x-subrip; charset=utf-8",
    "vtt": "text/vtt; charset=utf-8",
}
STATIC = {"room.js": "text/javascript; charset=utf-8"}
MAX_AFTER = 2**53
#: How long a dropped or closed viewer's feed may take to send what it still holds.
CLOSE_FLUSH_S = 5.0
NO_STORE = {"Cache-Control": "no-store"}
_WRONG_TOKEN = "missing or wrong view token: add ?token=TOKEN to the address"

router = APIRouter(tags=["rooms"])
_BEARER = HTTPBearer(auto_error=False, scheme_name="ViewToken",
                     description="The rooms' view token (serve --view-token-file)")
_QUERY = APIKeyQuery(name="token", auto_error=False, scheme_name="ViewTokenQuery",
                     description="The view token in the address, for browsers")  # fmt: skip


def view_token(
    request: Request, _bearer: object = Depends(_BEARER), _query: object = Depends(_QUERY)
) -> None:
    """The view token (--view-token-file), checked before anything else of a request is
    read (FastAPI's own checks of its path, a format it does not know, would otherwise
    answer a client without the token first); /openapi.json describes it by the two."""
    rooms = _server(request).rooms
    if rooms is not None and not token_matches(rooms.options.view_token, _token(request)):
        raise StarletteHTTPException(401, _WRONG_TOKEN, headers=NO_STORE)


VIEW_TOKEN = [Depends(view_token)]
_ROOM_SEQ = {"type": "integer", "minimum": 0, "maximum": MAX_AFTER}
#: What a feed reads besides its name, as /openapi.json describes it (`_after` reads them).
FEED_PARAMETERS = {"parameters": [
    {"name": "after", "in": "query", "required": False, "schema": _ROOM_SEQ,
     "description": "The last room_seq seen: only the kept finals after it are sent"},
    {"name": "Last-Event-ID", "in": "header", "required": False, "schema": _ROOM_SEQ,
     "description": "What a reconnecting EventSource sends; `after` wins over it"},
    {"name": "talk", "in": "query", "required": False, "schema": {"type": "string"},
     "description": "The talk `after` was counted in (a status event's `talk`)"},
]}  # fmt: skip


class FeedError(Exception):
    """A viewer's request that cannot be served: HTTP status, WebSocket close code, why."""

    def __init__(self, status: int, code: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.code = code
        self.reason = protocol.close_reason(reason)

    def response(self) -> PlainTextResponse:
        return PlainTextResponse(self.reason + "\n", self.status, headers=NO_STORE)


def check_name(name: str) -> str:
    """FeedError for a name that cannot be a room's."""
    if not protocol.ROOM_NAME.fullmatch(name):
        raise FeedError(
            400, protocol.CLOSE_INVALID,
            "a room's name is 1 to 64 letters, digits, '-' or '_'",
        )  # fmt: skip
    return name


def find_broker(rooms: RoomBroker | None, name: str, token: str | None) -> RoomBroker:
    """The rooms' broker, if the viewer may see room `name`; FeedError says why not."""
    check_name(name)
    if rooms is None:
        raise FeedError(404, CLOSE_UNKNOWN, NO_ROOMS)
    if not token_matches(rooms.options.view_token, token):
        raise FeedError(401, CLOSE_TOKEN, _WRONG_TOKEN)
    return rooms


def _unknown(name: str) -> FeedError:
    return FeedError(
        404, CLOSE_UNKNOWN,
        f"no such room yet, check the link: no one has published to room {name} (names are "
        "case-sensitive)",
    )  # fmt: skip


async def join(
    rooms: RoomBroker, name: str, viewer: Viewer, after: int, query: str = ""
) -> Callable[[], None]:
    """The viewer joins the room (history, status, live); FeedError when it cannot.
    `?talk=` in `query`: the talk the viewer's `after` was counted in."""
    talks = parse_qs(query).get("talk")
    try:
        return await rooms.view(name, viewer, after, talks[0][:64] if talks else None)
    except RoomMissing:
        raise _unknown(name) from None
    except RoomFull as exc:
        raise FeedError(503, CLOSE_FULL, str(exc)) from None
    except BrokerDown:
        raise FeedError(
            503, protocol.CLOSE_TRY_LATER, "the rooms' broker is unreachable; try again later"
        ) from None


class Encoding:
    """The bytes of the event being fanned out, made once for every reader of one feed: the
    room writes one line to each of its readers in turn, so the last line seen is the one
    asked for again (compared by identity, not by value)."""

    def __init__(self, payload: Callable[[int | None, str], bytes]) -> None:
        self.payload = payload
        self._line: str | None = None
        self._seq: int | None = None
        self._framing: object = None
        self._data = b""

    def of(self, seq: int | None, line: str, writer: EncodedWriter) -> bytes:
        if line is not self._line or seq != self._seq or writer.frame is not self._framing:
            self._data = writer.frame(self.payload(seq, line))
            self._line, self._seq, self._framing = line, seq, writer.frame
        return self._data


WS_TEXT = Encoding(lambda seq, line: line.encode("utf-8"))
SSE_EVENT = Encoding(
    lambda seq, line: ServerSentEvent(data=line, id=None if seq is None else str(seq)).encode()
)


class QueuedViewer:
    """A viewer whose events wait in a bounded queue for its feed to send them; once the
    queue is sent, written straight onto its connection (the module's docstring)."""

    def __init__(
        self, limit: int, transport: asyncio.BaseTransport | None = None,
        direct: tuple[EncodedWriter, Encoding] | None = None,
    ) -> None:  # fmt: skip
        """`transport`: the connection, aborted when a closed viewer's feed has not sent
        what it holds within CLOSE_FLUSH_S (a reader that stopped reading); `direct`: the
        connection's writer and the feed's encoding, for the live events."""
        self.limit = limit
        self.queue: deque[tuple[int | None, str]] = deque()
        self.queued_bytes = 0
        self.last_seq = 0  # the last room_seq queued: one seen again is not sent again
        self.closing: tuple[int, str] | None = None
        self.transport = transport
        self._direct = None
        if direct is not None and isinstance(transport, asyncio.WriteTransport):
            self._direct = (*direct, transport.get_write_buffer_size)
        self.writing_direct = False  # the queue is sent: events go onto the connection
        self._wake = asyncio.Event()

    def write(self, seq: int | None, line: str) -> bool:
        if self.closing is not None or self.queued_bytes > self.limit:
            return False
        if seq is not None:
            if seq <= self.last_seq:
                return True
            self.last_seq = seq
        if self.writing_direct and self._direct is not None:
            writer, encoding, unsent = self._direct
            if not writer.write(encoding.of(seq, line, writer)):
                return True  # the connection is closing: its feed ends and leaves the room
            return unsent() <= self.limit
        self.queue.append((seq, line))
        self.queued_bytes += len(line)
        self._wake.set()
        return True

    def close(self, code: int, reason: str) -> None:
        if self.closing is None:
            self.closing = (code, protocol.close_reason(reason))
            self._wake.set()
            if self.transport is not None:
                asyncio.get_running_loop().call_later(CLOSE_FLUSH_S, self._abort_if_stuck)

    def _abort_if_stuck(self) -> None:
        """Drop the connection if bytes are still unsent: a close would wait for them."""
        transport = self.transport
        if isinstance(transport, asyncio.WriteTransport) and transport.get_write_buffer_size():
            transport.abort()

    def keepalive(self) -> None:
        """The feeds keep their connections alive themselves (WebSocket pings, SSE
        comments)."""

    async def events(self) -> AsyncIterator[tuple[int | None, str]]:
        """What the room wrote, in order, until the viewer is closed and all is sent."""
        while True:
            while self.queue:
                seq, line = self.queue.popleft()
                self.queued_bytes -= len(line)
                yield seq, line
            if self.closing is not None:
                return
            # what the feed sent of the queue is written (its sends are done): from here on
            # the room's writes go straight onto the connection, after it
            self.writing_direct = self._direct is not None
            self._wake.clear()
            await self._wake.wait()


def _direct(scope: Any, encoding: Encoding) -> tuple[EncodedWriter, Encoding] | None:
    writer = scope.get(ENCODED_WRITER)
    return None if writer is None else (writer, encoding)


def _server(scope_owner: Request | WebSocket) -> StreamServer:
    server: StreamServer = scope_owner.app.state.server
    return server


def _token(scope_owner: Request | WebSocket) -> str | None:
    return presented_token(scope_owner.headers, scope_owner.url.query)


@router.get(
    "/rooms/{name}/events",
    summary="A room's events as Server-Sent Events",
    response_class=EventSourceResponse,
    dependencies=VIEW_TOKEN,
    openapi_extra=FEED_PARAMETERS,
    responses={
        400: {"description": "Not a room's name, or `after` not a whole number"},
        401: {"description": "Missing or wrong view token"},
        404: {"description": "No such room"},
        503: {"description": "The room is full"},
    },
)
async def sse_feed(request: Request, name: str) -> Response:
    try:
        rooms = find_broker(_server(request).rooms, name, _token(request))
        after = _after(request.url.query, request.headers.get("Last-Event-ID"))
        viewer = QueuedViewer(rooms.options.viewer_buffer_bytes, request.scope.get(TRANSPORT),
                              _direct(request.scope, SSE_EVENT))  # fmt: skip
        leave = await join(rooms, name, viewer, after, request.url.query)
    except FeedError as exc:
        return exc.response()

    async def feed() -> AsyncIterator[ServerSentEvent]:
        try:
            yield ServerSentEvent(retry=2000)
            async for seq, line in viewer.events():
                yield ServerSentEvent(data=line, id=None if seq is None else str(seq))
            if viewer.closing is not None:
                code, reason = viewer.closing
                yield ServerSentEvent(data=json.dumps({"type": "close", "code": code,
                                                       "reason": reason}))  # fmt: skip
        finally:
            leave()

    return EventSourceResponse(
        feed(), headers={**NO_STORE, "X-Accel-Buffering": "no"}, sep="\n",
        ping=KEEPALIVE_S, ping_message_factory=lambda: ServerSentEvent(comment="keepalive"),
        send_timeout=CLOSE_FLUSH_S,
    )  # fmt: skip


@router.get(
    "/rooms/{name}/transcript.{fmt}",
    summary="A room's kept finals as text, SRT or WebVTT",
    dependencies=VIEW_TOKEN,
    responses={
        200: {"content": {kind: {} for kind in TRANSCRIPTS.values()}},
        400: {"description": "Not a room's name"},
        401: {"description": "Missing or wrong view token"},
        404: {"description": "No such room"},
    },
)
async def transcript_route(
    request: Request, name: str, fmt: Literal["txt", "srt", "vtt"]
) -> Response:
    try:
        rooms = find_broker(_server(request).rooms, name, _token(request))
        last_seq, finals = await rooms.finals(name)
    except FeedError as exc:
        return exc.response()
    except RoomMissing:
        return _unknown(name).response()
    except BrokerDown:
        return FeedError(503, 0, "the rooms' broker is unreachable; try again later").response()
    body = await rendered(name, last_seq, finals, fmt)
    disposition = f'attachment; filename="{name}.{fmt}"'
    return Response(body, media_type=TRANSCRIPTS[fmt],
                    headers={**NO_STORE, "Content-Disposition": disposition})  # fmt: skip


@router.websocket("/rooms/{name}/ws")
async def ws_feed(websocket: WebSocket, name: str) -> None:
    """One WebSocket viewer, from handshake to close."""
    server = _server(websocket)
    if not server.security.origin_allowed(websocket.headers.get("origin")):
        await websocket.close(1008)  # before the handshake: uvicorn answers 403
        return
    try:
        check_name(name)
    except FeedError as exc:  # before the handshake: an HTTP answer
        await websocket.send_denial_response(exc.response())
        return
    await websocket.accept()
    try:
        if server.stopping:
            raise FeedError(503, protocol.CLOSE_GOING_AWAY, "server shutting down")
        rooms = find_broker(server.rooms, name, _token(websocket))
        after = _after(websocket.url.query, None)
        viewer = QueuedViewer(rooms.options.viewer_buffer_bytes, websocket.scope.get(TRANSPORT),
                              _direct(websocket.scope, WS_TEXT))  # fmt: skip
        leave = await join(rooms, name, viewer, after, websocket.url.query)
    except FeedError as exc:
        await websocket.close(exc.code, exc.reason)
        return

    async def send() -> None:
        async for _, line in viewer.events():
            await websocket.send_text(line)

    sending = asyncio.ensure_future(send())
    receiving = asyncio.ensure_future(websocket.receive())
    try:
        await asyncio.wait({sending, receiving}, return_when=asyncio.FIRST_COMPLETED)
        if receiving.done() and not receiving.cancelled() and receiving.exception() is None:
            if receiving.result()["type"] == "websocket.disconnect":
                return
            viewer.close(
                protocol.CLOSE_UNSUPPORTED,
                "viewers only receive: a room's feed takes no messages (publish on /ws "
                'with {"room": NAME} in the config)',
            )
        if viewer.closing is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(sending), CLOSE_FLUSH_S)
            with contextlib.suppress(Exception):
                await websocket.close(*viewer.closing)
    finally:
        leave()
        for task in (sending, receiving):
            task.cancel()
        await asyncio.gather(sending, receiving, return_exceptions=True)


@router.get("/rooms/{rest:path}", include_in_schema=False)
def pages(rest: str) -> Response:
    """The viewer page and its script; what else is asked for under /rooms/ is not there."""
    if rest in STATIC:
        return Response(_static(rest), media_type=STATIC[rest], headers=NO_STORE)
    name, _, page = rest.partition("/")
    try:
        check_name(name)
    except FeedError as exc:
        return exc.response()
    if page in STATIC:  # the page's address ended in a slash
        return Response(_static(page), media_type=STATIC[page], headers=NO_STORE)
    if page == "ws":
        return PlainTextResponse(f"{PREFIX}{rest} takes WebSocket connections\n", 426)
    if page == "":
        return Response(_static("room.html"), media_type="text/html; charset=utf-8",
                        headers=NO_STORE)  # fmt: skip
    return FeedError(404, 0, "not found; a room has /ws, /events and /transcript.txt").response()


def _after(query: str, last_event_id: str | None) -> int:
    """The last room_seq a viewer saw: ?after=SEQ, else Last-Event-ID, else 0 (none)."""
    values = parse_qs(query).get("after")
    raw = values[0] if values else last_event_id
    if raw is None or raw == "":
        return 0
    if not (raw.isascii() and raw.isdigit()) or len(raw) > 16 or int(raw) > MAX_AFTER:
        raise FeedError(
            400, protocol.CLOSE_INVALID,
            "after must be the last room_seq seen (a whole number)",
        )  # fmt: skip
    return int(raw)


def _static(name: str) -> bytes:
    return resources.files("streamasr.server").joinpath("static").joinpath(name).read_bytes()
