"""`streamasr file --server URL`: the same output, decoded by a `streamasr serve` elsewhere.

The audio is read here (any file, stdin, --raw PCM) and sent as f32le; the server decodes
it with its model and settings; the events come back as the same event objects and go
through the same finishing chain (--punctuate, --sentence-case) and renderers (every
--format, -o DIR), so what is printed is what `streamasr file` prints locally with the
server's model (the clocks aside). The feed block and the tail padding (given or `file`'s
defaults) always travel as the session's own settings, so the output does not depend on the
server's defaults; so do the endpoint rules, when given. The other model options are the
server's and are refused here. The token, if the server wants one, comes from
$STREAMASR_TOKEN; a wss:// server's certificate is trusted by the system's CAs, or by
--cafile's.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Annotated

import typer

from streamasr.audio import AudioSource, RawFormat, check_path_name, next_input, open_source
from streamasr.commands.common import (
    cli_errors,
    decode_each,
    report_error,
)
from streamasr.commands.options import ModelOptions
from streamasr.errors import UsageError
from streamasr.session.driver import Pacing, drive

if TYPE_CHECKING:
    from streamasr.output.finishing import Finishing
    from streamasr.output.render import Renderer
    from streamasr.server.client import RemoteModel

ServerOpt = Annotated[
    str | None,
    typer.Option(
        "--server",
        help="Decode on a `streamasr serve` at ws://HOST:PORT/ws (its token: "
        "$STREAMASR_TOKEN).",
    ),
]
RoomOpt = Annotated[
    str | None,
    typer.Option(
        "--room",
        help="With --server: also publish to this room (docs/serve.md).",
    ),
]
CafileOpt = Annotated[
    str | None,
    typer.Option(
        "--cafile",
        metavar="PATH",
        help="Trust this CA or self-signed cert for wss://.",
    ),
]

#: The options that travel to the server as the session's own settings.
SESSION_FIELDS = ("endpoint", "rule1_s", "rule2_s", "rule3_s", "block_ms", "tail_padding_s")
#: Those sent only when given on the command line (else the server's).
GIVEN_FIELDS = ("endpoint", "rule1_s", "rule2_s", "rule3_s")
#: The variable that sets the wait for the summary after the end of input.
FINISH_TIMEOUT_VARIABLE = "STREAMASR_FINISH_TIMEOUT_S"
#: Seconds of audio per message sent (the server cuts its own feed blocks).
SEND_BLOCK_S = 0.1


def check_remote_options(options: ModelOptions) -> None:
    """Model options other than the endpoint rules belong to the server: refuse them."""
    from streamasr.commands.options import _SPECS

    defaults = ModelOptions()
    for spec in _SPECS:
        if spec.field in SESSION_FIELDS:
            continue
        if getattr(options, spec.field) != getattr(defaults, spec.field):
            flag = spec.decls[0].split("/")[0]
            raise UsageError(
                f"{flag} is the server's setting; with --server drop it (the server was "
                "started with its model options)"
            )
    for name in options.engine:  # an engine's own options are the server's too
        flag = "--" + name.replace("_", "-")
        raise UsageError(
            f"{flag} is the server's setting; with --server drop it (the server was "
            "started with its model options)"
        )


def session_settings(options: ModelOptions, finished_here: bool = False) -> dict[str, object]:
    """The session's config keys: the feed block ("chunk" unless --block-ms) and the tail
    padding as `file` uses them, and the endpoint rules given (none: the server's).
    `finished_here`: punctuation or casing runs in this process's finishing chain, so the
    server is asked for neither (they would run twice)."""
    defaults = ModelOptions()
    given: dict[str, object] = {
        name: getattr(options, name)
        for name in GIVEN_FIELDS
        if getattr(options, name) != getattr(defaults, name)
    }
    given["block_ms"] = options.block_ms if options.block_ms else "chunk"
    given["tail_padding_s"] = options.tail_padding_s
    if finished_here:
        given["punctuate"] = given["sentence_case"] = False
    return given


def remote_model(
    url: str, model_options: ModelOptions, finished_here: bool = False, room: str | None = None,
    asked: dict[str, bool] | None = None, cafile: str | None = None,
) -> RemoteModel:
    """A connection to the `streamasr serve` at `url` (the token from $STREAMASR_TOKEN,
    trusting `cafile`'s certificates for wss://) whose sessions ask for the settings given
    here (session_settings), publishing to `room` with the finishing `asked` of the server
    (room_finishing)."""
    from streamasr.server.client import connect

    model = connect(url, token=os.environ.get("STREAMASR_TOKEN") or None, cafile=cafile)
    model.finish_timeout_s = finish_timeout_s()
    model.settings = session_settings(model_options, finished_here)
    if room is not None:
        model.settings["room"] = room
        model.settings.update(asked or {})
    return model


def room_finishing(
    room: str | None, punctuate: str | None, sentence_case: bool
) -> tuple[Finishing | None, dict[str, bool]]:
    """Who finishes the finals. Publishing to a room, the server does (readers get what the
    speaker asked for, and a server's own --punctuate is not turned off): no local chain
    (None), the config keys asked; a server without a punctuation model refuses in one
    line. Else (None room) the local chain is loaded by the caller: (None, {})."""
    from streamasr.output.finishing import Finishing

    if room is None:
        return None, {}
    if punctuate is not None:
        return Finishing(), {"punctuate": True}
    return Finishing(), {"sentence_case": True} if sentence_case else {}


def finish_timeout_s() -> float:
    """$STREAMASR_FINISH_TIMEOUT_S, else FINISH_TIMEOUT_S: the least wait for the summary
    after the end of input (docs/serve.md, "When the server fails the client")."""
    from streamasr.server.client import FINISH_TIMEOUT_S

    given = os.environ.get(FINISH_TIMEOUT_VARIABLE)
    if not given:
        return FINISH_TIMEOUT_S
    try:
        seconds = float(given)
    except ValueError:
        seconds = -1.0
    if not 0 < seconds < 1e6:
        raise UsageError(f"{FINISH_TIMEOUT_VARIABLE}={given[:40]!r}: give seconds above 0")
    return seconds


def check_cafile(cafile: str | None, server: str | None) -> None:
    """--cafile trusts a --server's certificate: it needs --server, and a file that holds a
    certificate (checked before any audio is read or captured; one line, exit 2)."""
    if cafile is None:
        return
    if server is None:
        raise UsageError("--cafile trusts a wss:// server's certificate; give --server URL too")
    from streamasr.server.client_connect import trusting

    trusting(cafile, "--cafile", UsageError)


def check_room(room: str | None, server: str | None) -> None:
    """--room names a room on a server: it needs --server and a name a room may have."""
    if room is None:
        return
    from streamasr.server.protocol import ROOM_NAME

    if server is None:
        raise UsageError("--room publishes to a server's room; give --server URL too")
    if not ROOM_NAME.fullmatch(room):
        raise UsageError(f"--room {room[:80]!r}: use 1 to 64 letters, digits, '-' or '_'")


def file_over_server(
    url: str,
    paths: list[str],
    model_options: ModelOptions,
    realtime: bool,
    raw_format: RawFormat | None,
    renderer: Renderer,
    finished_here: bool,
    room: str | None = None,
    asked: dict[str, bool] | None = None,
    cafile: str | None = None,
) -> None:
    """The `file` command with --server: every input through the remote model, its events
    into `renderer` (the one `file` builds, behind its finishing chain). The one driver
    feeds each input, so whatever ends it (the end, Ctrl-C, a server that went away) the
    finals received so far reach the renderer and its files are closed in place."""
    from streamasr.server.client import ServerError

    with cli_errors():
        model = remote_model(url, model_options, finished_here, room, asked, cafile)
        model.open()  # a wrong URL, a refused token or a full server: said before any audio

    def decode(path: str) -> None:
        try:
            _stream_input(model, path, raw_format, renderer, realtime)
        except ServerError as exc:  # the server went away: the run ends, what came is kept
            report_error(exc)
            raise typer.Exit(exc.exit_code) from None

    with model:
        decode_each(paths, decode)


def _stream_input(
    model: RemoteModel, path: str, raw: RawFormat | None, renderer: Renderer, realtime: bool
) -> None:
    """One input (and the WAV streams that follow it on a pipe) through a remote session."""
    check_path_name(path)
    source: AudioSource | None = open_source(path, raw)
    count = 1
    while source is not None:
        name = path if count == 1 else f"{path} (WAV stream {count})"
        session = model.session(source.sample_rate, name, realtime)
        renderer.begin(name)
        try:
            drive(session, source.blocks(SEND_BLOCK_S), renderer,
                  pacing=Pacing() if realtime else None)
        finally:
            source.close()
        source, count = next_input(source), count + 1
