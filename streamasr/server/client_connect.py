"""Opening the client's connection to a `streamasr serve`, and what a failure says: one line
that names the fix (the scheme, the path, the token variable, the CA certificate) instead
of the TLS or HTTP library's text.

Why: the mistakes people make first (wss:// to a plain server, ws:// to a TLS one, a
self-signed certificate, no token, a path other than /ws) all surface as errors of
ssl or websockets that do not say what to change.
"""

from __future__ import annotations

import logging
import ssl
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from streamasr.errors import StreamAsrError
from streamasr.server.client_records import ServerError
from streamasr.whole_file import MIB, read_whole

#: Where a URL without a path goes: the server's WebSocket route.
WS_PATH = "/ws"
#: The largest message the client takes: far above any event or summary the server sends
#: (a summary's text of hours of speech is well under 1 MiB), far below what hurts.
MAX_MESSAGE_BYTES = 16 * 1024 * 1024
#: The websockets library's own logger for our connections, silenced: its reading thread logs
#: a traceback ("unexpected internal error") when a server ends the stream mid-read, as a
#: TLS server refusing a token does, beside the one-line error this client then reports.
QUIET_LIBRARY_LOG = logging.getLogger("streamasr.client.websockets")
QUIET_LIBRARY_LOG.disabled = True
#: The variable the token comes from on the command line.
TOKEN_VARIABLE = "STREAMASR_TOKEN"
#: A CA bundle is a few hundred kB (the system's, certifi's); a file far larger is not one.
MAX_CAFILE_BYTES = 16 * MIB
#: What to give --cafile (or `cafile=`), said by each of its errors.
CAFILE_FIX = "give the server's own certificate (serve --certfile) or its CA's, PEM or DER"


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
        tls["ssl"] = trusting(cafile)
    try:
        connection = ws_connect(target, additional_headers=headers, open_timeout=open_timeout_s,
                                compression=None, max_size=MAX_MESSAGE_BYTES,
                                logger=QUIET_LIBRARY_LOG, **tls)  # fmt: skip
        # entered as a context manager (closed in close()): what websockets >= 16 asks
        return connection.__enter__()
    except InvalidURI:
        raise ServerError(
            f"{url!r} is not a WebSocket URL; give ws://HOST:PORT{WS_PATH} (or wss://)"
        ) from None
    except (OSError, TimeoutError, InvalidHandshake) as exc:
        why = connect_failure(target, exc, token, cafile)
        raise ServerError(f"cannot connect to {url}: {why}") from None


def trusting(
    cafile: str, what: str = "cafile", error: type[StreamAsrError] = ServerError
) -> ssl.SSLContext:
    """A client TLS context that trusts the certificates in `cafile` (a CA's, or a
    self-signed server's own; PEM, or one DER certificate) in place of the system's, as
    curl's --cacert does; else `error`, one line naming `what` and the fix. Why: a folder, a
    key file or an empty file given here otherwise surfaces as an OSError or a server that
    "is not trusted", which says nothing of the file."""
    data = read_whole(cafile, what, MAX_CAFILE_BYTES, CAFILE_FIX, error)
    pem = b"-----BEGIN" in data
    context = None
    if data.strip():  # empty cadata would load the system's CAs instead
        try:
            context = ssl.create_default_context(cadata=data.decode("latin-1") if pem else data)
        except (ssl.SSLError, ValueError):
            pass
    if context is None or not context.cert_store_stats()["x509"]:
        raise error(f"{what} {cafile} holds no certificate; {CAFILE_FIX}")
    return context


def connect_failure(
    url: str, exc: BaseException, token: str | None, cafile: str | None = None
) -> str:
    """What went wrong opening `url`, and what to change."""
    from websockets.exceptions import InvalidMessage, InvalidStatus

    parts = urlsplit(url)
    place = f"{parts.hostname}:{parts.port or (443 if parts.scheme == 'wss' else 80)}"
    if isinstance(exc, ssl.SSLCertVerificationError):
        if cafile is not None:
            return (f"the server's TLS certificate is not signed by {cafile} "
                    f"({exc.verify_message}); {CAFILE_FIX}")  # fmt: skip
        return (f"the server's TLS certificate is not trusted ({exc.verify_message}); if "
                "it is self-signed, trust it: --cafile CERT.pem (or SSL_CERT_FILE=CERT.pem)")
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
