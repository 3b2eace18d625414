"""What one `streamasr serve` allows: connections, lengths, sizes, batching, auth, TLS.

Checked once when the server starts (usage errors, exit 2, naming the option); afterwards
the server only reads them.
"""

from __future__ import annotations

import hmac
import multiprocessing
import os
import ssl
from dataclasses import dataclass
from typing import Any

from streamasr.backends.options import Setting
from streamasr.errors import UsageError
from streamasr.session.batch import SCHEDULES
from streamasr.whole_file import read_whole

TOKEN_ENV = "STREAMASR_TOKEN"
#: The scope key under which a request's connection (its asyncio transport) is found, so a
#: route can abort a connection whose reader stopped reading (server/web.py puts it there).
TRANSPORT = "streamasr.transport"
#: The scope key of a connection's `EncodedWriter` (server/web.py): a room writes each event,
#: encoded once for all its readers, straight onto their connections.
ENCODED_WRITER = "streamasr.encoded_writer"


@dataclass(frozen=True)
class ServerLimits:
    """Limits of one server; every one has a command-line option of the same name."""

    max_connections: int = 64
    max_session_s: float = 3600.0  # wall-clock length of one connection
    idle_timeout_s: float = 30.0  # no message for this long ends the connection
    handshake_timeout_s: float = 10.0  # to open the WebSocket and send the first config
    max_frame_bytes: int = 1 << 20  # one WebSocket message
    max_queued_audio_s: float = 10.0  # audio received but not yet decoded, per connection
    send_queue_events: int = 1024  # events not yet read by a client before it is dropped
    max_batch: int = 32  # streams in one batched engine step
    max_wait_ms: float = 5.0  # how long a step waits for more streams to fill its batch
    schedule: str = "ready"  # when a due stream steps: at once (ready) or at the shared tick
    grace_s: float = 30.0  # after SIGTERM, how long open sessions may go on
    max_upload_mb: float = 100.0  # one file upload (the OpenAI REST API), in MB of 10^6 bytes

    @classmethod
    def from_options(cls, **values: Any) -> ServerLimits:
        """The limits given on the command line, checked (--schedule in any case)."""
        return check_limits(cls(**{**values, "schedule": values["schedule"].lower()}))

    @property
    def max_upload_bytes(self) -> int:
        return int(self.max_upload_mb * 1_000_000)


class ConnectionSlots:
    """The open connections counted against --max-connections.

    With --workers the counts live in shared memory made before the fork, one cell per
    worker: a connection is refused only when the whole server is full, whichever worker
    the kernel handed it to (a fixed share per worker refused connections while another
    worker had room). Each worker writes only its own cell, so no lock is shared that a
    killed worker could leave held; the parent empties the cell of a worker that died.
    Two workers admitting at the same instant at the limit may go over it by one each."""

    def __init__(self, limit: int, cells: Any = None, index: int = 0) -> None:
        self.limit = limit
        self._cells = cells if cells is not None else [0]
        self._index = index

    @classmethod
    def shared(cls, limit: int, workers: int) -> ConnectionSlots:
        """Counts for `workers` processes, made before they are forked."""
        return cls(limit, multiprocessing.RawArray("i", workers))

    def worker(self, index: int) -> ConnectionSlots:
        """The same counts, as worker `index` takes and gives back its slots."""
        return ConnectionSlots(self.limit, self._cells, index)

    @property
    def held(self) -> int:
        return sum(self._cells[:])

    @property
    def full(self) -> bool:
        return self.held >= self.limit

    def take(self) -> bool:
        """A slot for one more connection, or False when the server is full."""
        if self.full:
            return False
        self._cells[self._index] += 1
        return True

    def give_back(self) -> None:
        self._cells[self._index] = max(0, self._cells[self._index] - 1)

    def forget_worker(self, index: int) -> None:
        """A worker exited: its connections went with it."""
        self._cells[index] = 0


@dataclass(frozen=True)
class Security:
    """Who may connect: a bearer token, the allowed browser origins, TLS."""

    token: str | None = None
    origins: tuple[str, ...] = ()
    certfile: str | None = None
    keyfile: str | None = None

    def allows(self, presented: str | None) -> bool:
        """True when no token is set, or `presented` equals it (constant-time compare)."""
        if self.token is None:
            return True
        if presented is None:
            return False
        return hmac.compare_digest(presented.encode("utf-8"), self.token.encode("utf-8"))

    def origin_allowed(self, origin: str | None) -> bool:
        """A WebSocket from a browser page: its Origin must be one of --allow-origin (when
        any is given); clients that send no Origin (not browsers) are not asked."""
        return not self.origins or origin is None or origin in self.origins

    @classmethod
    def from_options(
        cls, token_file: str | None, allow_origin: list[str] | None, certfile: str | None,
        keyfile: str | None,
    ) -> Security:  # fmt: skip
        """The token read, the origins and the TLS files; a bad certificate is a usage error
        before the model loads."""
        check_tls(certfile, keyfile)
        security = cls(load_token(token_file), tuple(allow_origin or ()), certfile, keyfile)
        security.ssl_context()
        return security

    def ssl_context(self) -> ssl.SSLContext | None:
        """The TLS context for --certfile/--keyfile, or None for plain ws:// and http://."""
        if self.certfile is None:
            return None
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        try:
            context.load_cert_chain(self.certfile, self.keyfile)
        except (OSError, ssl.SSLError) as exc:
            raise UsageError(
                f"--certfile {self.certfile} / --keyfile {self.keyfile}: cannot load the "
                f"certificate and key ({exc}); give a PEM certificate and its private key"
            ) from None
        return context


#: Each limit on the command line (`streamasr serve`), with its range; the default shown is
#: ServerLimits'.
LIMIT_SETTINGS = (
    Setting("max_connections", "--max-connections",
            "Open WebSocket sessions at most; more are refused (1013).", (1, 100_000)),
    Setting("max_session_s", "--max-session-s", "Wall-clock seconds one connection may last.",
            (1.0, 7 * 86400.0)),
    Setting("idle_timeout_s", "--idle-timeout-s",
            "A connection that sends nothing this long is closed.", (0.1, 86400.0)),
    Setting("handshake_timeout_s", "--handshake-timeout-s",
            "Seconds to open and send the first config.", (0.1, 3600.0)),
    Setting("max_frame_bytes", "--max-frame-bytes",
            "Largest WebSocket message; larger ones close with 1009.", (64, 64 << 20)),
    Setting("max_queued_audio_s", "--max-queued-audio-s",
            "Undecoded audio per connection before the server stops reading it.", (0.1, 3600.0)),
    Setting("send_queue_events", "--send-queue",
            "Events a client may leave unread before it is closed (1008).", (16, 1_000_000)),
    Setting("max_batch", "--max-batch", "Streams in one batched engine step.", (1, 1024)),
    Setting("max_wait_ms", "--max-wait-ms",
            "--schedule ready: how long a step waits to batch more.", (0.0, 1000.0)),
    Setting("schedule", "--schedule",
            "When a ready chunk steps: ready (at once) or aligned (on a shared clock)."),
    Setting("grace_s", "--grace-s",
            "Seconds sessions get after SIGTERM.", (0.0, 3600.0)),
    Setting("max_upload_mb", "--max-upload-mb",
            "Largest upload to /v1/audio/transcriptions in MB (else 413).", (0.01, 100_000.0)),
)  # fmt: skip

#: Who may connect, on the command line; `Security.from_options` reads what they name.
SECURITY_SETTINGS = (
    Setting("token_file", "--token-file",
            "Bearer token file (else $STREAMASR_TOKEN).", type=str | None),
    Setting("allow_origin", "--allow-origin",
            "Browser origin allowed to connect (repeatable).",
            type=list[str] | None),
    Setting("certfile", "--certfile", "TLS certificate (PEM) for wss:// and https://.",
            type=str | None),
    Setting("keyfile", "--keyfile", "TLS private key (PEM), if not in --certfile.",
            type=str | None),
)  # fmt: skip


def check_limits(limits: ServerLimits) -> ServerLimits:
    """Refuse a limit that cannot work, naming its option (UsageError, exit 2)."""
    for setting in LIMIT_SETTINGS:
        if setting.range is not None:
            setting.check(getattr(limits, setting.field))
    if limits.schedule not in SCHEDULES:
        raise UsageError(f"--schedule {limits.schedule!r}: use {' or '.join(SCHEDULES)}")
    return limits


MAX_TOKEN_FILE_BYTES = 64 << 10  # a bearer token is tens of bytes


def load_token(token_file: str | None, option: str = "--token-file") -> str | None:
    """The bearer token: --token-file's first line, else $STREAMASR_TOKEN, else none."""
    if token_file is not None:
        data = read_whole(token_file, option, MAX_TOKEN_FILE_BYTES,
                          "put the token on line 1 of a file", UsageError)  # fmt: skip
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise UsageError(f"{option} {token_file}: cannot read it ({exc})") from None
        token = text.strip().splitlines()[0].strip() if text.strip() else ""
        if not token:
            raise UsageError(f"{option} {token_file} is empty; put the token on line 1")
        return token
    token = os.environ.get(TOKEN_ENV, "").strip()
    return token or None


def check_tls(certfile: str | None, keyfile: str | None) -> None:
    """--certfile and --keyfile come together (a key may be inside the certificate file)."""
    if keyfile is not None and certfile is None:
        raise UsageError("--keyfile needs --certfile (the certificate the key belongs to)")
