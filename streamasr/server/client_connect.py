"""Opening the client's connection to a `streamasr serve`, and what a failure says: one line
that names the fix (the scheme, the path, the token variable, the CA certificate) instead
of the TLS or HTTP library's text.

Why: the mistakes people make first (wss:// to a plain server, ws:// to a TLS one, a
self-signed certificate, no token, a path other than /ws) all surface as errors of
ssl or websockets that do not say what to change.
"""

from __future__ import annotations

import ssl
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from streamasr.server.client_records import ServerError

#: Where a URL without a path goes: the server's WebSocket route.
WS_PATH = "/ws"
#: The largest message the client takes: far above any event or summary the server sends
#: (a summary's text of hours of speech is well under 1 MiB), far below what hurts.
MAX_MESSAGE_BYTES = 16 * 1024 * 1024
#: The variable the token comes from on the command line.
TOKEN_VARIABLE = "STREAMASR_TOKEN"


def with_ws_path(url: str) -> str:
    """`url` with the server's WebSocket path when it names none (ws://HOST:PORT -> /ws)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return url  # the WebSocket client says what is wrong with it
    if parts.scheme in ("ws", "wss") and parts.path in ("", "/"):
        return urlunsplit(parts._replace(path=WS_PATH))
    return url


def open_connection(
    url: str, token: str | None, open_timeout_s: float, cafile: str | None = None
) -> Any:
    """The open, entered websockets connection to `url`; a ServerError naming the fix."""
    from websockets.exceptions import InvalidHandshake, InvalidURI
    from websockets.sync.client import connect as ws_connect

    target = with_ws_path(url)
    headers = {"Authorization": f"Bearer {token}"} if token else None
    tls: dict[str, Any] = {}
    if cafile is not None and target.startswith("wss:"):
        tls["ssl"] = _context(cafile)
    try:
        connection = ws_connect(target, additional_headers=headers, open_timeout=open_timeout_s,
                                compression=None, max_size=MAX_MESSAGE_BYTES, **tls)  # fmt: skip
        # entered as a context manager (closed in close()): what websockets >= 16 asks
        return connection.__enter__()
    except InvalidURI:
        raise ServerError(
            f"{url!r} is not a WebSocket URL; give ws://HOST:PORT{WS_PATH} (or wss://)"
        ) from None
    except (OSError, TimeoutError, InvalidHandshake) as exc:
        why = connect_failure(target, exc, token)
        raise ServerError(f"cannot connect to {url}: {why}") from None


def _context(cafile: str) -> ssl.SSLContext:
    try:
        return ssl.create_default_context(cafile=cafile)
    except (OSError, ssl.SSLError) as exc:
        why = f"cannot load it as PEM certificates ({exc})"
        raise ServerError(f"cafile {cafile}: {why}") from None


def connect_failure(url: str, exc: BaseException, token: str | None) -> str:
    """What went wrong opening `url`, and what to change."""
    from websockets.exceptions import InvalidMessage, InvalidStatus

    parts = urlsplit(url)
    place = f"{parts.hostname}:{parts.port or (443 if parts.scheme == 'wss' else 80)}"
    if isinstance(exc, ssl.SSLCertVerificationError):
        return (f"the server's TLS certificate is not trusted ({exc.verify_message}); if "
                "it is self-signed, trust it: SSL_CERT_FILE=CERT.pem streamasr ...")
    if isinstance(exc, ssl.SSLError) or (parts.scheme == "wss" and _eof(exc)):
        return f"{place} does not speak TLS; use ws:// instead of wss://"
    if isinstance(exc, InvalidStatus):
        return _refused(exc.response.status_code, parts.path, token)
    if isinstance(exc, InvalidMessage):
        if parts.scheme == "ws":
            return (f"{place} did not answer in HTTP; if it serves TLS (serve --certfile), "
                    "use wss:// instead of ws://")  # fmt: skip
        return f"{place} did not answer as a WebSocket server ({exc})"
    if isinstance(exc, ConnectionRefusedError):
        return f"nothing listens at {place}; is `streamasr serve` running there?"
    if isinstance(exc, TimeoutError):
        return f"{place} did not answer in time"
    return str(exc)


def _eof(exc: BaseException) -> bool:
    return isinstance(exc, ConnectionResetError | EOFError) or "EOF" in str(exc)


def _refused(status: int, path: str, token: str | None) -> str:
    if status == 401:
        if token:
            return f"the server refused the token (HTTP 401); check ${TOKEN_VARIABLE}"
        return f"the server wants a token (HTTP 401); set {TOKEN_VARIABLE} to it"
    if status in (403, 404) and path != WS_PATH:  # a route it does not have
        return f"no WebSocket at {path or '/'} (HTTP {status}); the path is {WS_PATH}"
    if status == 403:
        return f"the server refused this client (HTTP 403); check ${TOKEN_VARIABLE}"
    if status == 503:
        return "the server is full or stopping (HTTP 503); try again later"
    return f"the server refused the connection (HTTP {status})"
