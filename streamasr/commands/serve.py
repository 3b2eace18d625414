"""`streamasr serve`: one model behind one port (and Wyoming's), for many clients at once."""

from __future__ import annotations

import dataclasses
import logging
import signal
import socket
from collections.abc import Callable
from dataclasses import dataclass
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
    with_settings,
)
from streamasr.commands.options import ModelOptions, Prepared, preflight, with_model_options
from streamasr.errors import DependencyError, StreamAsrError, UsageError
from streamasr.extras import install_hint
from streamasr.output.finishing import NONE, Finishing, load_finishing
from streamasr.server.limits import (
    LIMIT_SETTINGS,
    SECURITY_SETTINGS,
    ConnectionSlots,
    Security,
    ServerLimits,
)
from streamasr.server.reach import Exposure, bracketed, exposure_warning, openable
from streamasr.server.rooms import ROOM_SETTINGS, RoomOptions

if TYPE_CHECKING:
    from streamasr.server.app import StreamServer
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
    the engine choice (its plan and the sessions' default feed), the limits and guards."""

    prepared: Prepared
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
    """The setup every server process shares (`preflight`, with live feed defaults), and the
    finishing (punctuation model loaded before the speech model): every model option checked
    here, once, whatever --workers says, and a released model not here yet offered."""
    if model_options.vad_gate:
        raise UsageError(
            "--vad-gate ends and reopens a stream at each gap, which serve's batched "
            "steps cannot; use it with file, mic or bench (--vad and --vad-end work here)"
        )
    # no feed block given anywhere: feed each message as it comes
    per_message = model_options.block_ms is None
    prepared = preflight(live_defaults(model_options), paced=False)
    finishing = load_finishing(*finish_args)
    prepared.offer()
    setup = ServerSetup(prepared, limits, security, per_message, finish_args, rooms)
    return setup, finishing


def load_server(
    setup: ServerSetup, finishing: Finishing = NONE, slots: ConnectionSlots | None = None
) -> StreamServer:
    """Load the model by the plan and put a server over it. Once it is loaded, the steps'
    freed blocks are reused instead of mapped anew each step (commands/memory.py)."""
    from streamasr.commands.memory import reuse_freed_blocks
    from streamasr.server.app import StreamServer

    recognizer = setup.prepared.plan.load(setup.prepared.entry)
    log.info("model: %s", recognizer.description)
    reuse_freed_blocks()
    return StreamServer(
        recognizer, setup.prepared.feed, setup.limits, setup.security,
        per_message=setup.per_message, finishing=finishing, rooms=setup.rooms, slots=slots,
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


HostOpt = Annotated[str, typer.Option(help="Address to listen on (0.0.0.0: every interface).")]
PortOpt = Annotated[int, typer.Option(help="TCP port; 0 picks a free one (printed on stderr).")]
WorkersOpt = Annotated[int, typer.Option(
    help="Server processes, each with its own model, sharing the port (one per core); "
    "--max-connections is shared out among them.")]
WyomingOpt = Annotated[str | None, typer.Option(
    help="Also serve Wyoming (Home Assistant's voice protocol) at tcp://HOST:PORT, e.g. "
    "tcp://0.0.0.0:10300; no authentication: for a trusted LAN only.")]


def serve_command(
    *,
    model_options: ModelOptions,  # this and the declared groups: spliced in at register
    host: HostOpt = "127.0.0.1",
    port: PortOpt = 6006,
    limits: ServerLimits,
    security: Security,
    rooms: RoomOptions,
    workers: WorkersOpt = 1,
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
        check_port_and_workers(port, workers)
        if workers > 1 and (rooms.publish_token or rooms.view_token):
            raise UsageError(
                "rooms need one server process: drop --workers, or drop the room token files"
            )
        wyoming_setup = wyoming_option(wyoming, workers)
        setup, finishing = prepare(model_options, limits, security,
                                   rooms if workers == 1 else None, (punctuate, sentence_case))
        stopped_by = listen(setup, finishing, host, port, workers, wyoming_setup)
    say_stopped(stopped_by)


def register(app: typer.Typer) -> None:
    """Add the `serve` command: its own options declared by the settings that use them."""
    command = with_settings("limits", LIMIT_SETTINGS, ServerLimits(), ServerLimits.from_options)(
        serve_command)
    command = with_settings("security", SECURITY_SETTINGS, Security(), Security.from_options)(
        command)
    command = with_settings("rooms", ROOM_SETTINGS, RoomOptions(), RoomOptions.from_options)(
        command)
    app.command("serve")(with_model_options(help_for=SERVE_HELP)(command))
