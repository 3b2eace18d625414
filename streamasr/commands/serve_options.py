"""`streamasr serve`'s own options, declared once: the listener, the limits, security, rooms,
workers and Wyoming (the model options are the shared ones, commands/options.py).

The defaults come from the dataclasses that hold them (ServerLimits), so the help and the
server cannot disagree.
"""

from __future__ import annotations

from typing import Annotated

import typer

from streamasr.server.limits import ServerLimits

LIMITS = ServerLimits()  # the defaults every limit option shows

HostOpt = Annotated[str, typer.Option(help="Address to listen on (0.0.0.0: every interface).")]
PortOpt = Annotated[int, typer.Option(help="TCP port; 0 picks a free one (printed on stderr).")]
MaxConnectionsOpt = Annotated[
    int, typer.Option(help="Open WebSocket sessions at most; more are refused (1013).")
]
MaxSessionOpt = Annotated[float, typer.Option(help="Wall-clock seconds one connection may last.")]
IdleTimeoutOpt = Annotated[
    float, typer.Option(help="A connection that sends nothing this long is closed.")
]
HandshakeTimeoutOpt = Annotated[
    float, typer.Option(help="Seconds to open the WebSocket and send the first config.")
]
MaxFrameOpt = Annotated[
    int, typer.Option(help="Largest WebSocket message; larger ones close with 1009.")
]
MaxQueuedOpt = Annotated[
    float,
    typer.Option(
        help="Audio received but not yet decoded, per connection; past it the "
        "server stops reading that client until the engine catches up."
    ),
]
SendQueueOpt = Annotated[
    int, typer.Option(help="Events a client may leave unread before it is closed (1008).")
]
MaxBatchOpt = Annotated[int, typer.Option(help="Streams in one batched engine step.")]
MaxWaitOpt = Annotated[
    float,
    typer.Option(help="--schedule ready: how long an engine step waits for more streams to batch."),
]
ScheduleOpt = Annotated[
    str,
    typer.Option(
        help="When a stream with a chunk ready steps: aligned (at the next tick of one clock "
        "of chunk period, with every other stream due: larger batches, a wait below one "
        "chunk) or ready (at once, batched with whoever is ready then).",
        case_sensitive=False,
    ),
]
GraceOpt = Annotated[
    float,
    typer.Option(
        help="After SIGTERM, how long open sessions may go on before their input is "
        "ended and their finals sent."
    ),
]
MaxUploadOpt = Annotated[
    float,
    typer.Option(
        help="Largest audio file one upload may send (/v1/audio/transcriptions), in MB; "
        "larger ones are refused (413) before they are read."
    ),
]
TokenFileOpt = Annotated[
    str | None,
    typer.Option(
        help="File whose first line is the bearer token clients must send (else "
        "$STREAMASR_TOKEN; neither: no token)."
    ),
]
AllowOriginOpt = Annotated[
    list[str] | None,
    typer.Option(
        help="Browser origin allowed to connect (repeat for more), e.g. "
        "https://captions.example; clients that send no Origin are always allowed."
    ),
]
CertfileOpt = Annotated[
    str | None, typer.Option(help="TLS certificate (PEM): serve wss:// and https://.")
]
KeyfileOpt = Annotated[
    str | None, typer.Option(help="TLS private key (PEM), if not in --certfile.")
]
MaxViewersOpt = Annotated[
    int, typer.Option(help="Viewers of one room at most (/rooms/NAME); more are refused.")
]
RoomHistoryOpt = Annotated[
    int,
    typer.Option(
        help="Finals a room keeps (at most 30 minutes' worth) for viewers who join "
        "late or reconnect."
    ),
]
PublishTokenOpt = Annotated[
    str | None,
    typer.Option(
        help="File whose first line is the token a session must send to publish to a "
        "room (it is also let in on /ws); none: any session may publish."
    ),
]
ViewTokenOpt = Annotated[
    str | None,
    typer.Option(
        help="File whose first line is the token viewers must send (?token=); none: "
        "viewing is open."
    ),
]
WorkersOpt = Annotated[
    int,
    typer.Option(
        help="Server processes, each with its own model, sharing the port (one per "
        "core); --max-connections is shared out among them."
    ),
]
WyomingOpt = Annotated[
    str | None,
    typer.Option(
        help="Also serve Wyoming (Home Assistant's voice protocol) at tcp://HOST:PORT, e.g. "
        "tcp://0.0.0.0:10300; no authentication: for a trusted LAN only."
    ),
]
RoomsOpt = Annotated[
    str | None,
    typer.Option(
        "--rooms",
        help="Where rooms live: redis://HOST:PORT/DB puts every room in Redis, so every "
        "worker (--workers) and every server using it serves every room (else "
        "$STREAMASR_ROOMS_URL; neither: in this process).",
    ),
]
MaxRoomsOpt = Annotated[
    int,
    typer.Option(
        help="Rooms at most (with --rooms redis://: in that Redis); a new room past it is "
        "refused (1013). An idle room is let go after 30 minutes."
    ),
]
MaxReadersOpt = Annotated[
    int,
    typer.Option(
        help="Viewers of all rooms together, per server process; more are refused (4429, "
        "HTTP 503), so sessions and /readyz keep their file handles."
    ),
]
