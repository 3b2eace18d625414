"""`streamasr serve`: one model behind one port (and Wyoming's), for many clients at once.

serve's own options are declared by the settings that use them (ServerLimits, Security,
RoomOptions: `Setting`s spliced in by `with_settings`); the model options are the shared
group, checked by the one `preflight`. Running the server is server/workers.py's.
"""

from __future__ import annotations

import dataclasses
import logging
import signal
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
from streamasr.commands.options import ModelOptions, preflight, with_model_options
from streamasr.commands.serve_rooms import checked_rooms
from streamasr.errors import StreamAsrError, UsageError
from streamasr.extras import require
from streamasr.output.finishing import Finishing, load_finishing
from streamasr.server.limits import LIMIT_SETTINGS, SECURITY_SETTINGS, Security, ServerLimits
from streamasr.server.reach import Exposure, listening_lines, wyoming_lines
from streamasr.server.rooms import ROOM_SETTINGS, RoomOptions

if TYPE_CHECKING:
    from streamasr.server.workers import Ready, ServerSetup
    from streamasr.server.wyoming_listener import WyomingSetup

log = logging.getLogger("streamasr")

#: found, not imported: with --workers, prometheus_client must first be imported in the
#: workers, after its multiprocess folder is set
SERVER_MODULES = ("fastapi", "uvicorn", "sse_starlette", "multipart", "websockets", "httptools",
                  "prometheus_client")  # fmt: skip
MAX_WORKERS = 256
#: A server's sessions default to live-caption settings (what sherpa-onnx's server does):
#: each audio message fed as it comes (cut into feed blocks of at most 100 ms) and 0.3 s of
#: tail padding, unless --block-ms / --tail-padding (or the user's config) say otherwise
#: (--block-ms: fixed blocks of that size). A session asks for its own in its config;
#: `streamasr file --server` asks for `file`'s.
LIVE_DEFAULTS = {"block_ms": 100.0, "tail_padding_s": 0.3}
#: --help says the server's defaults, not file's
SERVE_HELP = {
    "block_ms": "Feed block in ms (default: each message as it comes, cut at 100 ms).",
    "tail_padding_s": "Silence in s appended at the end (default 0.3).",
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


def prepare(
    model_options: ModelOptions,
    limits: ServerLimits,
    security: Security,
    rooms: RoomOptions | None,
    finish_args: tuple[str | None, bool],
) -> tuple[ServerSetup, Finishing]:
    """The setup every server process shares (`preflight`, with the live feed defaults) and
    the finishing (punctuation model loaded before the speech model): every model option
    checked here, once, whatever --workers says, and a released model not here yet offered."""
    from streamasr.server.workers import ServerSetup

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
    setup = ServerSetup(prepared.entry, prepared.plan, prepared.feed, limits, security,
                        per_message, finish_args, rooms)  # fmt: skip
    return setup, finishing


def say(lines: list[tuple[str, bool]]) -> None:
    """serve's lines on stderr, a warning in red."""
    for line, warning in lines:
        lead = "[red]warning:[/red]" if warning else "streamasr serve:"
        err_console.print(f"{lead} {escape(line)}", highlight=False)
    err_console.file.flush()


def wyoming_option(uri: str | None, workers: int) -> WyomingSetup | None:
    """--wyoming checked before the model loads: the form, the package, one process."""
    if uri is None:
        return None
    require(("wyoming",), "--wyoming", "serve")
    from streamasr.server.wyoming_listener import wyoming_setup

    if workers > 1:
        # each worker has its own engine and scheduler; a Wyoming port would need the
        # socket shared among them as --workers does for the WebSocket port
        raise UsageError(
            "--wyoming serves from one process: drop --workers, or run a second "
            "`streamasr serve --wyoming ...` for Home Assistant"
        )
    return wyoming_setup(uri, lambda bound: say(wyoming_lines(bound)))


def listen(
    setup: ServerSetup, finishing: Finishing, host: str, port: int, workers: int,
    wyoming: WyomingSetup | None = None,
) -> int | None:  # fmt: skip
    """Load and serve until stopped (the stop signal's number; None if none came)."""
    from streamasr.server.workers import serve

    security = setup.security
    open_rooms = setup.rooms is not None and setup.rooms.publish_token is None
    exposure = Exposure(token=security.token is not None, tls=security.certfile is not None,
                        open_rooms=open_rooms)
    ready: Ready = lambda bound: say(listening_lines(bound, exposure))  # noqa: E731
    try:
        return serve(setup, finishing, host, port, workers, ready, wyoming)
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


def check_port_and_workers(port: int, workers: int, rooms: RoomOptions) -> None:
    """--port and --workers in range; room tokens across workers only with a shared broker."""
    if not 0 <= port <= 65535:
        raise UsageError(f"--port {port}: use 0-65535 (0 picks a free port)")
    if not 1 <= workers <= MAX_WORKERS:
        raise UsageError(f"--workers {workers}: use 1 to {MAX_WORKERS}")
    if workers > 1 and rooms.url is None and (rooms.publish_token or rooms.view_token):
        raise UsageError(
            "rooms across --workers need --rooms redis://HOST:PORT/DB (a Redis every worker "
            "shares); add it, or drop --workers, or drop the room token files"
        )


HostOpt = Annotated[str, typer.Option(help="Address to listen on (0.0.0.0: every interface).")]
PortOpt = Annotated[int, typer.Option(help="TCP port; 0: any free one.")]
WorkersOpt = Annotated[int, typer.Option(help="Server processes, each with a model.")]
WyomingOpt = Annotated[str | None, typer.Option(
    help="Also serve Wyoming at tcp://HOST:PORT (no authentication: LAN only).")]  # fmt: skip


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
    with --wyoming Home Assistant. The HTTP routes' schema is at /openapi.json. Sessions
    default to live captions; each may ask for its own settings (see docs/serve.md).
    """
    setup_logging(verbose)
    with cli_errors():
        require(SERVER_MODULES, "streamasr serve", "serve")
        check_port_and_workers(port, workers, rooms)
        rooms = checked_rooms(rooms)
        wyoming_setup = wyoming_option(wyoming, workers)
        served = rooms if workers == 1 or rooms.url is not None else None
        setup, finishing = prepare(model_options, limits, security, served,
                                   (punctuate, sentence_case))
        stopped_by = listen(setup, finishing, host, port, workers, wyoming_setup)
    say_stopped(stopped_by)


def register(app: typer.Typer) -> None:
    """Add the `serve` command: its own options declared by the settings that use them."""
    command: Any = serve_command
    for placeholder, settings, defaults in (
        ("limits", LIMIT_SETTINGS, ServerLimits()),
        ("security", SECURITY_SETTINGS, Security()),
        ("rooms", ROOM_SETTINGS, RoomOptions()),
    ):
        command = with_settings(placeholder, settings, defaults, type(defaults).from_options)(
            command)  # fmt: skip
    app.command("serve")(with_model_options(help_for=SERVE_HELP, said_defaults=SERVE_HELP)(
        command))  # fmt: skip
