"""`streamasr serve`: one model behind one port (and Wyoming's), for many clients at once."""

from __future__ import annotations

import dataclasses
import logging
import signal
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import typer
from rich.markup import escape

from streamasr.backends.plan import LoadPlan
from streamasr.commands.common import (
    PunctuateOpt,
    SentenceCaseOpt,
    VerboseOpt,
    cli_errors,
    err_console,
    setup_logging,
)
from streamasr.commands.options import ModelOptions, with_model_options
from streamasr.commands.serve_options import (
    LIMITS,
    AllowOriginOpt,
    CertfileOpt,
    GraceOpt,
    HandshakeTimeoutOpt,
    HostOpt,
    IdleTimeoutOpt,
    KeyfileOpt,
    MaxBatchOpt,
    MaxConnectionsOpt,
    MaxFrameOpt,
    MaxQueuedOpt,
    MaxReadersOpt,
    MaxRoomsOpt,
    MaxSessionOpt,
    MaxUploadOpt,
    MaxViewersOpt,
    MaxWaitOpt,
    PortOpt,
    PublishTokenOpt,
    RoomHistoryOpt,
    RoomsOpt,
    ScheduleOpt,
    SendQueueOpt,
    TokenFileOpt,
    ViewTokenOpt,
    WorkersOpt,
    WyomingOpt,
)
from streamasr.errors import DependencyError, StreamAsrError, UsageError
from streamasr.extras import install_hint
from streamasr.output.finishing import NONE, Finishing, load_finishing
from streamasr.server.limits import ConnectionSlots, Security, ServerLimits
from streamasr.server.reach import Exposure, bracketed, exposure_warning, openable
from streamasr.session.stream import StreamOptions

if TYPE_CHECKING:
    from streamasr.server.app import StreamServer
    from streamasr.server.rooms import RoomOptions
    from streamasr.server.wyoming_listener import WyomingSetup

log = logging.getLogger("streamasr")


def check_server_packages() -> None:
    """The `serve` extra's packages, or a DependencyError naming the install line."""
    import importlib.util

    # found, not imported: with --workers, prometheus_client must first be imported in the
    # workers, after its multiprocess folder is set
    missing = [
        module
        for module in ("fastapi", "uvicorn", "sse_starlette", "multipart", "websockets",
                       "httptools", "prometheus_client")
        if importlib.util.find_spec(module) is None
    ]
    if missing:
        needs = " and ".join(missing)
        raise DependencyError(f"streamasr serve needs {needs}: {install_hint('serve')}")


Ready = Callable[[list[tuple[str, int]]], None]


MAX_WORKERS = 256
#: A server's sessions default to live-caption settings (what sherpa-onnx's server does):
#: each audio message fed as it comes (cut into feed blocks of at most 100 ms) and 0.3 s of
#: tail padding, unless --block-ms / --tail-padding (or the user's config) say otherwise
#: (--block-ms: fixed blocks of that size). A session asks for its own in its config;
#: `streamasr file --server` asks for `file`'s.
LIVE_DEFAULTS = {"block_ms": 100.0, "tail_padding_s": 0.3}
#: --help says the server's defaults, not file's
SERVE_HELP = {
    "block_ms": "Sessions' feed block in ms; default: each message as it comes, cut at 100 ms "
    "(live captions). Given: fixed blocks of that size. A session may ask for its own; "
    "`file --server` asks for file's.",
    "tail_padding_s": "Seconds of silence appended at the end of a session's input; default "
    "0.3 (a session may ask for its own).",
}


def live_defaults(options: ModelOptions) -> ModelOptions:
    """`options` with LIVE_DEFAULTS where the command line and the config left the built-in
    default (which is `file`'s: one chunk, 0.66 s)."""
    import click

    context = click.get_current_context(silent=True)
    built_in = ModelOptions()
    changes: dict[str, Any] = {}
    for name, value in LIVE_DEFAULTS.items():
        source = context.get_parameter_source(name) if context is not None else None
        given = source is not None and source != click.core.ParameterSource.DEFAULT
        if not given and getattr(options, name) == getattr(built_in, name):
            changes[name] = value
    return dataclasses.replace(options, **changes)


def warn_open_rooms(host: str, rooms: RoomOptions | None) -> None:
    """A warning when other machines may make and publish to rooms with no token."""
    from streamasr.server.reach import rooms_warning

    warning = rooms and rooms_warning(host, rooms.publish_token is not None)
    if warning:
        err_console.print(f"[red]warning:[/red] {escape(warning)}", highlight=False)


def say_reach(addresses: list[tuple[str, int]], page: str, exposure: Exposure) -> None:
    """After the listening lines: for 0.0.0.0 / ::, the pages a person can open (the
    machine's own addresses), and a warning when other machines can reach an unguarded port."""
    for bound_host, bound_port in addresses:
        hosts = openable(bound_host)
        if hosts != [bound_host]:
            pages = " or ".join(f"{page}://{bracketed(host)}:{bound_port}/" for host in hosts)
            err_console.print(f"streamasr serve: open {escape(pages)}", highlight=False)
    warning = exposure_warning(addresses, exposure)
    if warning is not None:
        err_console.print(f"[red]warning:[/red] {escape(warning)}", highlight=False)


@dataclass(frozen=True)
class ServerSetup:
    """What every server process builds its server from, checked before the model loads:
    the model's loading plan, the sessions' default feed, the limits and guards."""

    plan: LoadPlan
    feed: StreamOptions
    limits: ServerLimits
    security: Security
    per_message: bool  # no feed block given anywhere: each message fed as it comes
    finish_args: tuple[str | None, bool] = (None, False)  # --punctuate, --sentence-case
    rooms: RoomOptions | None = None


def prepare(
    model_options: ModelOptions,
    limits: ServerLimits,
    security: Security,
    rooms: RoomOptions | None,
    finish_args: tuple[str | None, bool],
) -> tuple[ServerSetup, Finishing]:
    """The setup every server process shares, and the finishing (punctuation model loaded
    before the speech model): every model option checked here, once, whatever --workers
    says, and a released model not here yet offered for download."""
    from streamasr.commands.offer import offer_download
    from streamasr.commands.options import (
        backend_and_device,
        chosen_backend,
        load_plan,
        stream_options,
    )

    if model_options.vad_gate:
        raise UsageError(
            "--vad-gate ends and reopens a stream at each gap, which serve's batched "
            "steps cannot; use it with file, mic or bench (--vad and --vad-end work here)"
        )
    # no feed block given anywhere: feed each message as it comes
    per_message = model_options.block_ms is None
    model_options = live_defaults(model_options)
    finishing = load_finishing(*finish_args)
    feed = stream_options(model_options, paced=False)
    backend_and_device(model_options)
    plan = load_plan(model_options, chosen_backend(model_options))
    offer_download(model_options.model)
    setup = ServerSetup(plan, feed, limits, security, per_message, finish_args, rooms)
    return setup, finishing


def load_server(
    setup: ServerSetup, finishing: Finishing = NONE, slots: ConnectionSlots | None = None
) -> StreamServer:
    """Load the model by the plan and put a server over it. Once it is loaded, the steps'
    freed blocks are reused instead of mapped anew each step (commands/memory.py)."""
    from streamasr.commands.memory import reuse_freed_blocks
    from streamasr.server.app import StreamServer

    recognizer = setup.plan.load()
    log.info("model: %s", recognizer.description)
    reuse_freed_blocks()
    return StreamServer(
        recognizer, setup.feed, setup.limits, setup.security,
        per_message=setup.per_message, finishing=finishing, rooms=setup.rooms, slots=slots,
    )  # fmt: skip


def room_options(
    max_viewers: int,
    room_history: int,
    publish_token_file: str | None,
    view_token_file: str | None,
    workers: int,
    broker: tuple[str | None, int, int] = (None, 256, 4000),
) -> RoomOptions | None:
    """The rooms' settings, checked; `broker`: --rooms, --max-rooms, --max-readers. None
    with --workers and no --rooms (a room in-process lives in one process)."""
    from streamasr.commands.serve_rooms import check_rooms_url, readers_limit
    from streamasr.server.limits import load_token
    from streamasr.server.room_broker import rooms_url
    from streamasr.server.rooms import RoomOptions

    url, max_rooms, max_readers = rooms_url(broker[0]), broker[1], broker[2]
    if not 1 <= max_viewers <= 100_000:
        raise UsageError(f"--max-viewers {max_viewers}: use a whole number from 1 to 100000")
    if not 1 <= room_history <= 100_000:
        raise UsageError(f"--room-history {room_history}: use a whole number from 1 to 100000")
    if not 1 <= max_rooms <= 1_000_000:
        raise UsageError(f"--max-rooms {max_rooms}: use a whole number from 1 to 1000000")
    if not 1 <= max_readers <= 1_000_000:
        raise UsageError(f"--max-readers {max_readers}: use a whole number from 1 to 1000000")
    publish = load_token(publish_token_file, "--publish-token-file") if publish_token_file else None
    view = load_token(view_token_file, "--view-token-file") if view_token_file else None
    if url is not None:
        check_rooms_url(url)
    elif workers > 1:
        if publish is not None or view is not None:
            raise UsageError(
                "rooms across --workers need --rooms redis://HOST:PORT/DB (a Redis every "
                "worker shares); add it, or drop --workers, or drop the room token files"
            )
        return None
    return RoomOptions(
        max_viewers=max_viewers, history_finals=room_history, publish_token=publish,
        view_token=view, max_rooms=max_rooms, max_readers=readers_limit(max_readers),
        url=url,
    )  # fmt: skip


def serve_workers(
    workers: int, host: str, port: int, setup: ServerSetup, ready: Ready
) -> int | None:
    """--workers N: N processes load the model by the plan and serve."""
    from streamasr.server.app import run_server
    from streamasr.server.workers import run_workers

    slots = ConnectionSlots.shared(setup.limits.max_connections, workers)

    def serve_in_worker(
        sock: socket.socket, worker_ready: Callable[[], None], index: int
    ) -> int | None:
        finishing = load_finishing(*setup.finish_args)  # each process its own punctuation model
        server = load_server(setup, finishing, slots.worker(index))
        return run_server(server, None, None, lambda _: worker_ready(), sock)

    try:
        return run_workers(workers, host, port, serve_in_worker, ready, slots.forget_worker)
    except RuntimeError as exc:
        raise StreamAsrError(str(exc)) from None


def server_limits(
    max_connections: int, max_session_s: float, idle_timeout_s: float,
    handshake_timeout_s: float, max_frame_bytes: int, max_queued_audio_s: float,
    send_queue: int, max_batch: int, max_wait_ms: float, grace_s: float, schedule: str,
    max_upload_mb: float = LIMITS.max_upload_mb,
) -> ServerLimits:  # fmt: skip
    """The limits given, range-checked."""
    from streamasr.server.limits import check_limits

    return check_limits(
        ServerLimits(
            max_connections=max_connections, max_session_s=max_session_s,
            idle_timeout_s=idle_timeout_s, handshake_timeout_s=handshake_timeout_s,
            max_frame_bytes=max_frame_bytes, max_queued_audio_s=max_queued_audio_s,
            send_queue_events=send_queue, max_batch=max_batch, max_wait_ms=max_wait_ms,
            grace_s=grace_s, schedule=schedule.lower(), max_upload_mb=max_upload_mb,
        )
    )  # fmt: skip


def server_security(
    token_file: str | None, allow_origin: list[str] | None, certfile: str | None,
    keyfile: str | None,
) -> Security:  # fmt: skip
    """The token, allowed origins and TLS files; a bad certificate is a usage error before
    the model loads."""
    from streamasr.server.limits import check_tls, load_token

    check_tls(certfile, keyfile)
    security = Security(
        token=load_token(token_file), origins=tuple(allow_origin or ()), certfile=certfile,
        keyfile=keyfile,
    )  # fmt: skip
    security.ssl_context()
    return security


def ready_lines(security: Security) -> Ready:
    """What is said once the port is open: each address listened on, then its reach."""
    tls = security.certfile is not None
    scheme, page = ("wss", "https") if tls else ("ws", "http")

    def ready(addresses: list[tuple[str, int]]) -> None:
        for bound_host, bound_port in addresses:
            shown = f"[{bound_host}]" if ":" in bound_host else bound_host
            err_console.print(
                f"streamasr serve: listening on {scheme}://{shown}:{bound_port}/ws "
                f"(page {page}://{shown}:{bound_port}/, metrics /metrics)",
                highlight=False,
            )
        say_reach(addresses, page, Exposure(token=security.token is not None, tls=tls))
        err_console.file.flush()

    return ready


def wyoming_option(uri: str | None, workers: int) -> WyomingSetup | None:
    """--wyoming checked before the model loads: the form, the package, one process."""
    if uri is None:
        return None
    import importlib.util

    from streamasr.server.reach import bracketed, is_local

    if importlib.util.find_spec("wyoming") is None:
        raise DependencyError(f"--wyoming needs the wyoming package: {install_hint('serve')}")
    from streamasr.server.wyoming_listener import wyoming_setup

    if workers > 1:
        # each worker has its own engine and scheduler; a Wyoming port would need the
        # socket shared among them as --workers does for the WebSocket port
        raise UsageError(
            "--wyoming serves from one process: drop --workers, or run a second "
            "`streamasr serve --wyoming ...` for Home Assistant"
        )

    def ready(addresses: list[tuple[str, int]]) -> None:
        for bound_host, bound_port in addresses:
            err_console.print(
                f"streamasr serve: wyoming on tcp://{bracketed(bound_host)}:{bound_port}",
                highlight=False,
            )
            if not is_local(bound_host):
                err_console.print(
                    "[red]warning:[/red] Wyoming has no authentication: anyone who can reach "
                    f"port {bound_port} can use this server; keep it on a trusted LAN",
                    highlight=False,
                )
        err_console.file.flush()

    return wyoming_setup(uri, ready)


def listen(
    setup: ServerSetup, finishing: Finishing, host: str, port: int, workers: int,
    wyoming: WyomingSetup | None = None,
) -> int | None:  # fmt: skip
    """Load and serve until stopped (the stop signal's number; None if none came)."""
    ready = ready_lines(setup.security)
    try:
        if workers == 1:
            from streamasr.server.app import run_server

            server = load_server(setup, finishing)
            server.wyoming = wyoming  # serve --wyoming (server/wyoming_listener.py)
            return run_server(server, host, port, ready)
        return serve_workers(workers, host, port, setup, ready)
    except OSError as exc:
        raise StreamAsrError(
            f"cannot listen on {host}:{port}: {exc.strerror or exc}; pick another "
            "--port (0: any free one) or stop what holds it"
        ) from None


def say_stopped(stopped_by: int | None) -> None:
    """One line when a signal stopped the server; Ctrl-C exits 130."""
    if stopped_by == signal.SIGINT:
        err_console.print("interrupted; open sessions were flushed", highlight=False)
        raise typer.Exit(130)
    if stopped_by is not None:
        err_console.print("stopped; open sessions were flushed", highlight=False)


def check_port_and_workers(port: int, workers: int | None = None) -> None:
    """--port and --workers in range."""
    if not 0 <= port <= 65535:
        raise UsageError(f"--port {port}: use 0-65535 (0 picks a free port)")
    if workers is not None and not 1 <= workers <= MAX_WORKERS:
        raise UsageError(f"--workers {workers}: use 1 to {MAX_WORKERS}")


def serve_command(
    model_options: ModelOptions,
    host: HostOpt = "127.0.0.1",
    port: PortOpt = 6006,
    max_connections: MaxConnectionsOpt = LIMITS.max_connections,
    max_session_s: MaxSessionOpt = LIMITS.max_session_s,
    idle_timeout_s: IdleTimeoutOpt = LIMITS.idle_timeout_s,
    handshake_timeout_s: HandshakeTimeoutOpt = LIMITS.handshake_timeout_s,
    max_frame_bytes: MaxFrameOpt = LIMITS.max_frame_bytes,
    max_queued_audio_s: MaxQueuedOpt = LIMITS.max_queued_audio_s,
    send_queue: SendQueueOpt = LIMITS.send_queue_events,
    max_batch: MaxBatchOpt = LIMITS.max_batch,
    max_wait_ms: MaxWaitOpt = LIMITS.max_wait_ms,
    schedule: ScheduleOpt = LIMITS.schedule,
    grace_s: GraceOpt = LIMITS.grace_s,
    max_upload_mb: MaxUploadOpt = LIMITS.max_upload_mb,
    token_file: TokenFileOpt = None,
    allow_origin: AllowOriginOpt = None,
    certfile: CertfileOpt = None,
    keyfile: KeyfileOpt = None,
    max_viewers: MaxViewersOpt = 1000,
    room_history: RoomHistoryOpt = 1000,
    publish_token_file: PublishTokenOpt = None,
    view_token_file: ViewTokenOpt = None,
    workers: WorkersOpt = 1,
    rooms_at: RoomsOpt = None,
    max_rooms: MaxRoomsOpt = 256,
    max_readers: MaxReadersOpt = 4000,
    wyoming: WyomingOpt = None,
    sentence_case: SentenceCaseOpt = False,
    punctuate: PunctuateOpt = None,
    verbose: VerboseOpt = False,
) -> None:
    """Serve the model to many clients: WebSocket, OpenAI REST/Realtime, Wyoming; one engine.

    One engine and one batching scheduler behind every protocol: the WebSocket protocol
    (/ws), OpenAI's transcription API (/v1/audio/transcriptions, /v1/realtime), rooms, and
    with --wyoming Home Assistant. The HTTP routes' schema is at /openapi.json.

    Sessions default to live captions: each audio message fed as it comes (cut at
    100 ms) and 0.3 s of tail padding. --block-ms (fixed blocks) and --tail-padding
    change that, and each session may ask for its own. --punctuate and --sentence-case
    finish every session's finals unless it asks otherwise. --wyoming also serves Home
    Assistant's voice protocol on a second port, over the same engine.
    """
    setup_logging(verbose)
    with cli_errors():
        check_server_packages()
        check_port_and_workers(port)
        limits = server_limits(
            max_connections, max_session_s, idle_timeout_s, handshake_timeout_s,
            max_frame_bytes, max_queued_audio_s, send_queue, max_batch, max_wait_ms, grace_s,
            schedule, max_upload_mb,
        )  # fmt: skip
        security = server_security(token_file, allow_origin, certfile, keyfile)
        check_port_and_workers(port, workers)
        rooms = room_options(max_viewers, room_history, publish_token_file, view_token_file,
                             workers, (rooms_at, max_rooms, max_readers))
        warn_open_rooms(host, rooms)
        wyoming_setup = wyoming_option(wyoming, workers)
        setup, finishing = prepare(model_options, limits, security, rooms,
                                   (punctuate, sentence_case))
        stopped_by = listen(setup, finishing, host, port, workers, wyoming_setup)
    say_stopped(stopped_by)


def register(app: typer.Typer) -> None:
    """Add the `serve` command."""
    app.command("serve")(with_model_options(help_for=SERVE_HELP)(serve_command))
