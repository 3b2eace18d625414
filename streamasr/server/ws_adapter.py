"""The project's WebSocket protocol on `/ws`: its route, its socket, its encoding.

The route admits a client (origin, token, capacity) and runs a `Connection`
(server/connection.py: its config, utterances and limits) over a `WebSocketStream`,
Starlette's WebSocket seen as the plain recv/send/close the connection uses; the events go
out as the records of server/wire.py, one JSON text message each.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

from fastapi import APIRouter, WebSocket
from fastapi.responses import PlainTextResponse

from streamasr.server.client_session import Refused
from streamasr.server.connection import Connection, SocketClosed
from streamasr.server.protocol import CLOSE_GOING_AWAY, CLOSE_TRY_LATER
from streamasr.server.rooms import presented_token

if TYPE_CHECKING:
    from streamasr.server.app import StreamServer

WS_PATH = "/ws"
#: what a client that presents no token or a wrong one is told (HTTP 401)
TOKEN_REFUSED = (
    "missing or wrong token: send 'Authorization: Bearer TOKEN' (a browser page: add "
    "?token=TOKEN to the page's address)\n"
)

router = APIRouter()

class WebSocketStream:
    """A Starlette WebSocket as the connection uses it: `recv()` gives the next text or
    bytes message (SocketClosed at the close), `send()` one text message, `close()`."""

    def __init__(self, websocket: WebSocket) -> None:
        self.websocket = websocket
        self.headers = websocket.headers
        self.query = websocket.url.query
        client = websocket.client
        self.remote_address = (client.host, client.port) if client else ("", 0)
        self._receive = websocket.receive

    async def recv(self) -> str | bytes:
        message = await self._receive()
        if message["type"] == "websocket.disconnect":
            raise SocketClosed(int(message.get("code") or 1005))
        text = message.get("text")
        return text if text is not None else bytes(message.get("bytes") or b"")

    async def send(self, line: str) -> None:
        try:
            await self.websocket.send_text(line)
        except Exception as exc:  # the client went away: uvicorn or Starlette says so
            raise SocketClosed(1006) from exc

    async def close(self, code: int, reason: str) -> None:
        with contextlib.suppress(Exception):  # closed already
            await self.websocket.close(code, reason)


async def admit(websocket: WebSocket, server: StreamServer, token: str | None = None) -> bool:
    """The handshake's checks, before it completes: a page from another origin gets 403
    (--allow-origin), a wrong or missing token 401. True: accepted. `token`: what the
    client presented, where its protocol reads it otherwise (default: Bearer, ?token=)."""
    if not server.security.origin_allowed(websocket.headers.get("origin")):
        await websocket.close(1008)  # before the handshake: uvicorn answers 403
        return False
    if token is None:
        token = presented_token(websocket.headers, websocket.url.query)
    if not server.admits(token):
        server.metrics.refused.labels("auth").inc()
        await websocket.send_denial_response(PlainTextResponse(TOKEN_REFUSED, 401))
        return False
    await websocket.accept()
    return True


@router.websocket(WS_PATH)
async def session(websocket: WebSocket) -> None:
    """One client of the WebSocket protocol, from handshake to close."""
    server: StreamServer = websocket.app.state.server
    if not await admit(websocket, server):
        return
    stream = WebSocketStream(websocket)
    connection = Connection(server, stream)
    try:
        async with server.admitted(connection):
            await connection.run()
    except Refused as refused:
        code = CLOSE_GOING_AWAY if refused.kind == "shutting_down" else CLOSE_TRY_LATER
        await stream.close(code, refused.reason)


@router.get(WS_PATH, include_in_schema=False)
def needs_upgrade() -> PlainTextResponse:
    return PlainTextResponse(f"{WS_PATH} takes WebSocket connections\n", 426)

