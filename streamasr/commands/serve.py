"""`streamasr serve`: one model behind a WebSocket port, for many clients at once."""

from __future__ import annotations

import dataclasses
import signal
import socket
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape

from streamasr.commands.common import (
    PunctuateOpt,
    SentenceCaseOpt,
    VerboseOpt,
    cli_errors,
    err_console,
    setup_logging,
)
from streamasr.commands.options import ModelOptions, build, with_model_options
from streamasr.errors import DependencyError, StreamAsrError, UsageError
from streamasr.extras import install_hint
from streamasr.finishing import NONE, Finishing, load_finishing
from streamasr.server.reach import Exposure, bracketed, exposure_warning, openable

if TYPE_CHECKING:
    from streamasr.server.app import StreamServer
    from streamasr.server.limits import Security, ServerLimits
    from streamasr.server.rooms import RoomOptions


def check_server_packages() -> None:
    """The `serve` extra's packages, or a DependencyError naming the install line."""
    import importlib.util

    # found, not imported: with --workers, prometheus_client must first be imported in the
    # workers, after its multiprocess folder is set
    missing = [
        module
        for module in ("websockets", "prometheus_client")
        if importlib.util.find_spec(module) is None
    ]
    if missing:
        needs = " and ".join(missing)
        raise DependencyError(f"streamasr serve needs {needs}: {install_hint('serve')}")


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


def load_server(
    model_options: ModelOptions,
    limits: ServerLimits,
    security: Security,
    per_message: bool,
    finishing: Finishing = NONE,
    rooms: RoomOptions | None = None,
) -> StreamServer:
    """Load the model and put a server over it. Once it is loaded, the steps' freed blocks
    are reused instead of mapped anew each step (commands/memory.py)."""
    from streamasr.commands.memory import reuse_freed_blocks
    from streamasr.server.app import StreamServer

    recognizer, options = build(model_options, paced=False)
    reuse_freed_blocks()
    return StreamServer(
        recognizer, options, limits, security, per_message=per_message, finishing=finishing,
        rooms=rooms
    )


def room_options(
    max_viewers: int,
    room_history: int,
    publish_token_file: str | None,
    view_token_file: str | None,
    workers: int,
) -> RoomOptions | None:
    """The rooms' settings, checked; None with --workers (a room lives in one process)."""
    from streamasr.server.limits import load_token
    from streamasr.server.rooms import RoomOptions

    if not 1 <= max_viewers <= 100_000:
        raise UsageError(f"--max-viewers {max_viewers}: use a whole number from 1 to 100000")
    if not 1 <= room_history <= 100_000:
        raise UsageError(f"--room-history {room_history}: use a whole number from 1 to 100000")
    publish = load_token(publish_token_file, "--publish-token-file") if publish_token_file else None
    view = load_token(view_token_file, "--view-token-file") if view_token_file else None
    if workers > 1:
        if publish is not None or view is not None:
            raise UsageError(
                "rooms need one server process: drop --workers, or drop the room token files"
            )
        return None
    return RoomOptions(
        max_viewers=max_viewers, history_finals=room_history, publish_token=publish,
        view_token=view,
    )  # fmt: skip


def serve_workers(
    workers: int,
    host: str,
    port: int,
    model_options: ModelOptions,
    limits: ServerLimits,
    security: Security,
    ready: Callable[[list[tuple[str, int]]], None],
    per_message: bool,
    finish_args: tuple[str | None, bool] = (None, False),
) -> int | None:
    """--workers N: check the options here, then N processes load the model and serve."""
    from streamasr.backends.registry import choose_backend
    from streamasr.commands.options import (
        backend_and_device,
        check_engine_fit,
        engine_options,
        stream_options,
    )
    from streamasr.server.app import run_server
    from streamasr.server.workers import run_workers

    # what build() checks before it loads: a bad option is a usage error here, once
    stream_options(model_options, paced=False)
    engine_options(model_options)
    backend, _ = backend_and_device(model_options)
    check_engine_fit(model_options, choose_backend(model_options.model, backend).name)
    share = dataclasses.replace(
        limits, max_connections=max(1, -(-limits.max_connections // workers))
    )

    def serve_in_worker(sock: socket.socket, worker_ready: Callable[[], None]) -> int | None:
        finishing = load_finishing(*finish_args)  # each process its own punctuation model
        server = load_server(model_options, share, security, per_message, finishing)
        return run_server(server, None, None, lambda _: worker_ready(), sock)

    try:
        return run_workers(workers, host, port, serve_in_worker, ready)
    except RuntimeError as exc:
        raise StreamAsrError(str(exc)) from None


def register(app: typer.Typer) -> None:
    """Add the `serve` command."""
    from streamasr.server.limits import ServerLimits

    d = ServerLimits()

    @app.command("serve")
    @with_model_options(help_for=SERVE_HELP)
    def serve_command(
        model_options: ModelOptions,
        host: Annotated[
            str, typer.Option(help="Address to listen on (0.0.0.0: every interface).")
        ] = "127.0.0.1",
        port: Annotated[
            int, typer.Option(help="TCP port; 0 picks a free one (printed on stderr).")
        ] = 6006,
        max_connections: Annotated[
            int, typer.Option(help="Open WebSocket sessions at most; more are refused (1013).")
        ] = d.max_connections,
        max_session_s: Annotated[
            float, typer.Option(help="Wall-clock seconds one connection may last.")
        ] = d.max_session_s,
        idle_timeout_s: Annotated[
            float, typer.Option(help="A connection that sends nothing this long is closed.")
        ] = d.idle_timeout_s,
        handshake_timeout_s: Annotated[
            float,
            typer.Option(help="Seconds to open the WebSocket and send the first config."),
        ] = d.handshake_timeout_s,
        max_frame_bytes: Annotated[
            int, typer.Option(help="Largest WebSocket message; larger ones close with 1009.")
        ] = d.max_frame_bytes,
        max_queued_audio_s: Annotated[
            float,
            typer.Option(
                help="Audio received but not yet decoded, per connection; past it the "
                "server stops reading that client until the engine catches up."
            ),
        ] = d.max_queued_audio_s,
        send_queue: Annotated[
            int,
            typer.Option(help="Events a client may leave unread before it is closed (1008)."),
        ] = d.send_queue_events,
        max_batch: Annotated[
            int, typer.Option(help="Streams in one batched engine step.")
        ] = d.max_batch,
        max_wait_ms: Annotated[
            float,
            typer.Option(help="How long an engine step waits for more streams to batch."),
        ] = d.max_wait_ms,
        grace_s: Annotated[
            float,
            typer.Option(
                help="After SIGTERM, how long open sessions may go on before their input is "
                "ended and their finals sent."
            ),
        ] = d.grace_s,
        token_file: Annotated[
            str | None,
            typer.Option(
                help="File whose first line is the bearer token clients must send (else "
                "$STREAMASR_TOKEN; neither: no token)."
            ),
        ] = None,
        allow_origin: Annotated[
            list[str] | None,
            typer.Option(
                help="Browser origin allowed to connect (repeat for more), e.g. "
                "https://captions.example; clients that send no Origin are always allowed."
            ),
        ] = None,
        certfile: Annotated[
            str | None, typer.Option(help="TLS certificate (PEM): serve wss:// and https://.")
        ] = None,
        keyfile: Annotated[
            str | None, typer.Option(help="TLS private key (PEM), if not in --certfile.")
        ] = None,
        max_viewers: Annotated[
            int, typer.Option(help="Viewers of one room at most (/rooms/NAME); more are refused.")
        ] = 1000,
        room_history: Annotated[
            int,
            typer.Option(
                help="Finals a room keeps (at most 30 minutes' worth) for viewers who join "
                "late or reconnect."
            ),
        ] = 1000,
        publish_token_file: Annotated[
            str | None,
            typer.Option(
                help="File whose first line is the token a session must send to publish to a "
                "room (it is also let in on /ws); none: any session may publish."
            ),
        ] = None,
        view_token_file: Annotated[
            str | None,
            typer.Option(
                help="File whose first line is the token viewers must send (?token=); none: "
                "viewing is open."
            ),
        ] = None,
        workers: Annotated[
            int,
            typer.Option(
                help="Server processes, each with its own model, sharing the port (one per "
                "core); --max-connections is shared out among them."
            ),
        ] = 1,
        sentence_case: SentenceCaseOpt = False,
        punctuate: PunctuateOpt = None,
        verbose: VerboseOpt = False,
    ) -> None:
        """Serve the model over WebSocket: many clients, one engine, batched steps.

        Sessions default to live captions: each audio message fed as it comes (cut at
        100 ms) and 0.3 s of tail padding. --block-ms (fixed blocks) and --tail-padding
        change that, and each session may ask for its own. --punctuate and --sentence-case
        finish every session's finals unless it asks otherwise.
        """
        setup_logging(verbose)
        # no feed block given anywhere: feed each message as it comes
        per_message = model_options.block_ms is None
        model_options = live_defaults(model_options)
        from streamasr.server.limits import (
            Security,
            ServerLimits,
            check_limits,
            check_tls,
            load_token,
        )

        with cli_errors():
            check_server_packages()
            if not 0 <= port <= 65535:
                raise UsageError(f"--port {port}: use 0-65535 (0 picks a free port)")
            limits = check_limits(
                ServerLimits(
                    max_connections=max_connections,
                    max_session_s=max_session_s,
                    idle_timeout_s=idle_timeout_s,
                    handshake_timeout_s=handshake_timeout_s,
                    max_frame_bytes=max_frame_bytes,
                    max_queued_audio_s=max_queued_audio_s,
                    send_queue_events=send_queue,
                    max_batch=max_batch,
                    max_wait_ms=max_wait_ms,
                    grace_s=grace_s,
                )
            )
            check_tls(certfile, keyfile)
            security = Security(
                token=load_token(token_file),
                origins=tuple(allow_origin or ()),
                certfile=certfile,
                keyfile=keyfile,
            )
            security.ssl_context()  # a bad certificate is a usage error before the model loads
            if not 1 <= workers <= MAX_WORKERS:
                raise UsageError(f"--workers {workers}: use 1 to {MAX_WORKERS}")
            rooms = room_options(
                max_viewers, room_history, publish_token_file, view_token_file, workers
            )
            if model_options.vad_gate:
                raise UsageError(
                    "--vad-gate ends and reopens a stream at each gap, which serve's batched "
                    "steps cannot; use it with file, mic or bench (--vad and --vad-end work here)"
                )
            finishing = load_finishing(punctuate, sentence_case)  # before the speech model
            scheme = "wss" if certfile else "ws"
            page = "https" if certfile else "http"

            def ready(addresses: list[tuple[str, int]]) -> None:
                for bound_host, bound_port in addresses:
                    shown = f"[{bound_host}]" if ":" in bound_host else bound_host
                    err_console.print(
                        f"streamasr serve: listening on {scheme}://{shown}:{bound_port}/ws "
                        f"(page {page}://{shown}:{bound_port}/, metrics /metrics)",
                        highlight=False,
                    )
                say_reach(addresses, page, Exposure(token=security.token is not None,
                                                    tls=certfile is not None))
                err_console.file.flush()

            try:
                if workers == 1:
                    from streamasr.server.app import run_server

                    server = load_server(
                        model_options, limits, security, per_message, finishing, rooms
                    )
                    stopped_by = run_server(server, host, port, ready)
                else:
                    stopped_by = serve_workers(
                        workers, host, port, model_options, limits, security, ready,
                        per_message, (punctuate, sentence_case),
                    )
            except OSError as exc:
                raise StreamAsrError(
                    f"cannot listen on {host}:{port}: {exc.strerror or exc}; pick another "
                    "--port (0: any free one) or stop what holds it"
                ) from None
        if stopped_by == signal.SIGINT:
            err_console.print("interrupted; open sessions were flushed", highlight=False)
            raise typer.Exit(130)
        if stopped_by is not None:
            err_console.print("stopped; open sessions were flushed", highlight=False)
