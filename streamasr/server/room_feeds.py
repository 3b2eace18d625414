"""The viewers' side of rooms over HTTP: the page, the WebSocket and Server-Sent Events
feeds, and the transcripts so far.

    GET /rooms/NAME                      the viewer page
    GET /rooms/NAME/ws  (WebSocket)      the room's events, one JSON text message each
    GET /rooms/NAME/events  (SSE)        the same events as `data:` lines, `id:` = room_seq
    GET /rooms/NAME/transcript.txt|srt|vtt   the kept finals as `file --format` writes them

A feed sends the kept finals after `?after=SEQ` (SSE: also the `Last-Event-ID` header a
reconnecting EventSource sends), then a `status` event, then the live events. The view
token (`--view-token-file`), when set, comes as `Authorization: Bearer` or `?token=`.

The server is the `websockets` one, which answers plain HTTP only with whole responses; an
SSE feed is an endless response, so its TCP connection is taken over from websockets (the
transport given a protocol of ours, websockets left a stand-in that closes at once) and
written to directly, like a WebSocket viewer, with no task per viewer.
"""

from __future__ import annotations

import asyncio
import dataclasses
import io
import json
import logging
from importlib import resources
from typing import Any
from urllib.parse import parse_qs

from streamasr.server import protocol
from streamasr.server.rooms import (
    CLOSE_FULL,
    CLOSE_TOKEN,
    CLOSE_UNKNOWN,
    Room,
    Rooms,
    token_matches,
)

log = logging.getLogger("streamasr")

PREFIX = "/rooms/"
TRANSCRIPTS = {
    "transcript.txt": "text/plain; charset=utf-8",
    "transcript.srt": "application/x-subrip; charset=utf-8",
    "transcript.vtt": "text/vtt; charset=utf-8",
}
STATIC = {"room.js": "text/javascript; charset=utf-8"}
MAX_AFTER = 2**53


class FeedError(Exception):
    """A viewer's request that cannot be served: HTTP status, WebSocket close code, why."""

    def __init__(self, status: int, code: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.code = code
        self.reason = protocol.close_reason(reason)


def split(path: str) -> tuple[str, str]:
    """`/rooms/NAME/rest` as (NAME, rest); FeedError for a name that cannot be a room's."""
    name, _, rest = path[len(PREFIX) :].partition("/")
    if not protocol.ROOM_NAME.fullmatch(name):
        raise FeedError(
            400, protocol.CLOSE_INVALID,
            "a room's name is 1 to 64 letters, digits, '-' or '_'",
        )  # fmt: skip
    return name, rest


class RoomFeeds:
    """Routes /rooms/... of one server over its rooms."""

    def __init__(self, rooms: Rooms | None) -> None:
        self.rooms = rooms

    # -- HTTP -------------------------------------------------------------------------------

    def http(self, connection: Any, request: Any, token: str | None) -> Any:
        """A response for an HTTP request under /rooms/, or None to let a WebSocket
        handshake on /rooms/NAME/ws go on (the handler checks it then)."""
        path, _, query = request.path.partition("?")
        tail = path[len(PREFIX) :]
        if tail in STATIC:
            return _response(200, _static(tail), STATIC[tail])
        try:
            name, rest = split(path)
            if rest in STATIC:  # the page's address ended in a slash
                return _response(200, _static(rest), STATIC[rest])
            if rest == "ws":
                if request.headers.get("Upgrade", "").lower() != "websocket":
                    raise FeedError(426, 0, f"{path} takes WebSocket connections")
                return None
            if rest == "":
                return _response(200, _static("room.html"), "text/html; charset=utf-8")
            if rest == "events":
                return self._sse(connection, request, name, query, token)
            if rest in TRANSCRIPTS:
                room = self._room(name, token)
                body = transcript(room, rest.rsplit(".", 1)[1]).encode("utf-8")
                disposition = f'attachment; filename="{name}.{rest.rsplit(".", 1)[1]}"'
                return _response(200, body, TRANSCRIPTS[rest], disposition)
            raise FeedError(404, 0, "not found; a room has /ws, /events and /transcript.txt")
        except FeedError as exc:
            return _response(exc.status, (exc.reason + "\n").encode("utf-8"), "text/plain")

    def _room(self, name: str, token: str | None) -> Room:
        if self.rooms is None:
            raise FeedError(
                404, CLOSE_UNKNOWN, "this server has no rooms (started with --workers N)"
            )
        if not token_matches(self.rooms.options.view_token, token):
            raise FeedError(
                401, CLOSE_TOKEN,
                "missing or wrong view token: add ?token=TOKEN to the address",
            )  # fmt: skip
        room = self.rooms.get(name)
        if room is None:
            raise FeedError(
                404, CLOSE_UNKNOWN,
                f"room {name} is unknown: no one has published to it yet",
            )  # fmt: skip
        return room

    def _sse(self, connection: Any, request: Any, name: str, query: str, token: str | None) -> Any:
        room = self._room(name, token)
        after = _after(query, request.headers.get("Last-Event-ID"))
        if len(room.viewers) >= room.options.max_viewers:
            raise FeedError(503, CLOSE_FULL, f"room {name} is full; try again later")
        transport = connection.transport
        connection.transport = _Detached(connection, transport)
        viewer = SseViewer(transport, room, room.options.viewer_buffer_bytes)
        transport.set_protocol(viewer)
        transport.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream; charset=utf-8\r\n"
            b"Cache-Control: no-store\r\nX-Accel-Buffering: no\r\n\r\n"
            b"retry: 2000\n\n"
        )
        room.join(viewer, after)
        # websockets writes this to the stand-in, which drops it and closes
        return connection.respond(200, "")

    # -- WebSocket --------------------------------------------------------------------------

    async def view(self, ws: Any, token: str | None) -> None:
        """One WebSocket viewer, from handshake to close."""
        path, _, query = ws.request.path.partition("?")
        try:
            name, _ = split(path)
            room = self._room(name, token)
            after = _after(query, None)
        except FeedError as exc:
            await ws.close(exc.code, exc.reason)
            return
        viewer = WsViewer(ws, room.options.viewer_buffer_bytes)
        room.join(viewer, after)
        receiving = asyncio.ensure_future(ws.recv())
        closing = asyncio.ensure_future(viewer.closed.wait())
        try:
            await asyncio.wait({receiving, closing}, return_when=asyncio.FIRST_COMPLETED)
            if receiving.done() and receiving.exception() is None:
                viewer.close(
                    protocol.CLOSE_UNSUPPORTED,
                    "viewers only receive: a room's feed takes no messages (publish on /ws "
                    'with {"room": NAME} in the config)',
                )
            if viewer.closing is not None:
                await ws.close(*viewer.closing)
        finally:
            room.leave(viewer)
            for task in (receiving, closing):
                task.cancel()
            await asyncio.gather(receiving, closing, return_exceptions=True)


class WsViewer:
    """A WebSocket viewer: each event written at once (websockets' broadcast); unsent bytes
    past `limit` mean a reader too slow for the room."""

    def __init__(self, ws: Any, limit: int) -> None:
        self.ws = ws
        self.limit = limit
        self.closed = asyncio.Event()
        self.closing: tuple[int, str] | None = None

    def write(self, seq: int | None, line: str) -> bool:
        from websockets.asyncio.server import broadcast

        if self.closing is not None:
            return False
        if self.ws.transport.get_write_buffer_size() > self.limit:
            return False
        broadcast([self.ws], line)
        return True

    def close(self, code: int, reason: str) -> None:
        if self.closing is None:
            self.closing = (code, protocol.close_reason(reason))
            self.closed.set()

    def keepalive(self) -> None:
        """websockets pings the connection itself."""


class SseViewer(asyncio.Protocol):
    """A Server-Sent Events viewer on a transport taken over from websockets."""

    def __init__(self, transport: asyncio.Transport, room: Room, limit: int) -> None:
        self.transport = transport
        self.room = room
        self.limit = limit
        self.done = False

    def write(self, seq: int | None, line: str) -> bool:
        if self.done or self.transport.is_closing():
            return False
        if self.transport.get_write_buffer_size() > self.limit:
            return False
        head = f"id: {seq}\n" if seq is not None else ""
        self.transport.write(f"{head}data: {line}\n\n".encode())
        return True

    def close(self, code: int, reason: str) -> None:
        """A last `close` event saying why, then the end of the response."""
        if self.done or self.transport.is_closing():
            return
        self.done = True
        record = json.dumps({"type": "close", "code": code, "reason": reason})
        self.transport.write(f"data: {record}\n\n".encode())
        self.transport.close()

    def keepalive(self) -> None:
        if not self.done and self.transport.get_write_buffer_size() <= self.limit:
            self.transport.write(b": keepalive\n\n")

    def data_received(self, data: bytes) -> None:
        """An SSE feed takes nothing after its request."""
        self.room.leave(self)
        self.close(protocol.CLOSE_UNSUPPORTED, "viewers only receive: the feed takes no data")

    def connection_lost(self, exc: Exception | None) -> None:
        self.done = True
        self.room.leave(self)


class _Detached:
    """What websockets keeps in place of a transport taken over for SSE: its response
    and writes go nowhere, and closing it ends websockets' side of the connection."""

    def __init__(self, connection: Any, real: asyncio.BaseTransport) -> None:
        self._connection = connection
        self._real = real
        self._closed = False

    def write(self, data: bytes) -> None:
        pass

    def writelines(self, data: Any) -> None:
        pass

    def is_closing(self) -> bool:
        return self._closed

    def can_write_eof(self) -> bool:
        return False

    def write_eof(self) -> None:
        self.close()

    def get_write_buffer_size(self) -> int:
        return 0

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._real.get_extra_info(name, default)

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            asyncio.get_running_loop().call_soon(self._connection.connection_lost, None)

    def abort(self) -> None:
        self.close()


def _after(query: str, last_event_id: str | None) -> int:
    """The last room_seq a viewer saw: ?after=SEQ, else Last-Event-ID, else 0 (none)."""
    values = parse_qs(query).get("after")
    raw = values[0] if values else last_event_id
    if raw is None or raw == "":
        return 0
    if not raw.isdigit() or int(raw) > MAX_AFTER:
        raise FeedError(
            400, protocol.CLOSE_INVALID,
            "after must be the last room_seq seen (a whole number)",
        )  # fmt: skip
    return int(raw)


def transcript(room: Room, fmt: str) -> str:
    """The room's kept finals as `streamasr file --format FMT` writes them (same cue rules)."""
    from rich.console import Console

    from streamasr.output.render import SubtitleRenderer, TextRenderer
    from streamasr.server.client import event_from_record
    from streamasr.session.events import Final
    from streamasr.text.captions import Word

    out = io.StringIO()
    quiet = Console(file=io.StringIO())
    renderer: TextRenderer | SubtitleRenderer
    if fmt == "txt":
        renderer = TextRenderer(out, quiet, realtime=False, quiet=True)
    else:
        renderer = SubtitleRenderer(out, quiet, realtime=False, vtt=fmt == "vtt", quiet=True)
    renderer.begin("")
    for record in room.finals():
        words = tuple(Word(**word) for word in record.get("words", ()))
        final = event_from_record({**record, "words": []})
        if words and isinstance(final, Final):
            final = dataclasses.replace(final, words=words)
        renderer.event(final)
    if fmt == "vtt" and not out.getvalue():
        return "WEBVTT\n\n"
    return out.getvalue()


def _static(name: str) -> bytes:
    return resources.files("streamasr.server").joinpath("static").joinpath(name).read_bytes()


def _response(status: int, body: bytes, content_type: str, disposition: str = "") -> Any:
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
    if disposition:
        headers["Content-Disposition"] = disposition
    return Response(status, "OK" if status == 200 else "Error", headers, body)
