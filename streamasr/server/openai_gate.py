"""The OpenAI REST API's gate: the token, the content type and the upload's size, checked
before a route reads the body.

Why a gate before the body: FastAPI reads a form before a route's dependencies run, so
the token, the content type and the declared size are checked first (`GatedRoute`), and
the body is counted as it arrives: a 2 GB upload is refused after the limit's bytes, not
written to disk whole. Every error of a gated route is OpenAI's error object.

Why a refused upload is read on after its answer (nginx's lingering close): closed with
the client's unread bytes in its receive buffer, the kernel answers them with a reset, and a
client still sending may lose the 413 or its end. The answer is sent whole first, then the
rest of the body is read and dropped for a bounded time, and only then is the connection
closed (by uvicorn, as the response ends: no code here touches the transport).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import HTTPConnection
from starlette.types import Message, Receive, Scope, Send

from streamasr.server.openai_schemas import ApiError, validation_error
from streamasr.server.rooms import presented_token

if TYPE_CHECKING:
    from streamasr.server.app import StreamServer

TRANSCRIPTIONS = "/v1/audio/transcriptions"
MODELS = "/v1/models"
#: An upload refused before its end: the connection closes, so the client stops sending
#: (kept open, uvicorn would read and discard the rest to reuse it).
CLOSE = {"Connection": "close"}
#: How long, and how much of it, a refused upload is read on after its answer before the
#: connection is closed (sooner when the client closes or its body ends).
LINGER_S = 2.0
LINGER_BYTES = 64 << 20


class _UploadTooLarge(StarletteHTTPException):
    """Raised by the size check and the counting receive; FastAPI lets an HTTPException
    through its form parsing (any other error there becomes a plain 400)."""


class _LingeringClose(JSONResponse):
    """A refused upload's answer: sent whole at once (its Content-Length tells the client
    it is complete), then the rest of the body read and dropped within LINGER_S and
    LINGER_BYTES; the response ends only then, and uvicorn closes the connection."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status_code,
                    "headers": self.raw_headers})  # fmt: skip
        await send({"type": "http.response.body", "body": self.body, "more_body": True})
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(_drop_body(receive), LINGER_S)
        await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _drop_body(receive: Receive) -> None:
    """Read the request body to its end, the client's close or LINGER_BYTES."""
    dropped = 0
    while dropped < LINGER_BYTES:
        message = await receive()
        if message["type"] != "http.request" or not message.get("more_body", False):
            return
        dropped += len(message.get("body", b""))


def presented_key(connection: HTTPConnection) -> str | None:
    """`Authorization: Bearer KEY` (the OpenAI SDK) or `X-API-Key: KEY`."""
    bearer = presented_token(connection.headers, "")
    return bearer if bearer is not None else connection.headers.get("x-api-key")


def server_of(request: Request) -> StreamServer:
    server: StreamServer = request.app.state.server
    return server


def _check_token(request: Request) -> None:
    server = server_of(request)
    if not server.security.allows(presented_key(request)):
        server.metrics.refused.labels("auth").inc()
        raise ApiError(
            401,
            "missing or wrong API key: send the server's token (serve --token-file) as "
            "'Authorization: Bearer TOKEN' or 'X-API-Key: TOKEN'",
            code="invalid_api_key",
        )


def _counted(request: Request) -> Request:
    """The upload's request, refused by type and declared size before its body is read,
    its body counted as it arrives (a chunked body has no Content-Length)."""
    limit = server_of(request).limits.max_upload_bytes
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "multipart/form-data":
        raise ApiError(
            415,
            f"send multipart/form-data (curl -F file=@a.wav); got {kind or 'no content type'}",
            code="unsupported_media_type",
        )
    too_large = (
        f"the upload is larger than this server takes ({limit / 1e6:g} MB, serve "
        "--max-upload-mb); send a shorter or compressed file (flac, opus, mp3)"
    )
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise _UploadTooLarge(413, too_large)
    received = 0
    receive = request.receive

    async def counting() -> Message:
        nonlocal received
        message = await receive()
        received += len(message.get("body", b""))
        if received > limit:
            raise _UploadTooLarge(413, too_large)
        return message

    return Request(request.scope, counting)


class GatedRoute(APIRoute):
    """A /v1 route: the token first, an upload's type and size before its body, and every
    error (FastAPI's own too) as OpenAI's error object."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        upload = self.path == TRANSCRIPTIONS

        async def gated(request: Request) -> Response:
            try:
                _check_token(request)
                return await handler(_counted(request) if upload else request)
            except ApiError as exc:
                return exc.response()
            except RequestValidationError as exc:
                return validation_error(exc).response()
            except _UploadTooLarge as exc:
                error = ApiError(413, str(exc.detail), "file", "file_too_large", CLOSE)
                return _LingeringClose(error.body(), error.status, headers=error.headers)
            except StarletteHTTPException as exc:
                return ApiError(exc.status_code, str(exc.detail)).response()

        return gated
