"""`streamasr file`: stream audio files through the model as a live system would."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Annotated

import typer

from streamasr.commands.common import (
    ChannelsOpt,
    FormatOpt,
    PartialsOpt,
    PunctuateOpt,
    QuietOpt,
    RateOpt,
    RawOpt,
    SentenceCaseOpt,
    VerboseOpt,
    check_partials,
    choose_format,
    cli_errors,
    decode_each,
    err_console,
    make_renderer,
    setup_logging,
)
from streamasr.commands.cue_options import with_cue_options
from streamasr.commands.inputs import check_inputs_exist, raw_input_format
from streamasr.commands.options import ModelOptions, build, with_model_options
from streamasr.commands.remote import (
    CafileOpt,
    RoomOpt,
    ServerOpt,
    check_cafile,
    check_remote_options,
    check_room,
    file_over_server,
    room_finishing,
)
from streamasr.errors import UsageError
from streamasr.output.finishing import finished, load_finishing
from streamasr.output.output_dir import OutputDirRenderer, check_output_dir, parse_formats
from streamasr.output.render import RENDERERS, Renderer
from streamasr.output.render_bars import ProgressDisplay
from streamasr.session.file_stream import stream_file
from streamasr.text.captions import CueRules

log = logging.getLogger("streamasr")


def register(app: typer.Typer) -> None:
    """Add the `file` command."""

    @app.command("file")
    @with_model_options()
    @with_cue_options()
    def file_command(
        paths: Annotated[
            list[str], typer.Argument(help="Audio files (wav, flac, ogg, ...); '-' reads stdin.")
        ],
        model_options: ModelOptions,
        cue_rules: CueRules,
        realtime: Annotated[
            bool | None,
            typer.Option(help="Feed at the audio's own speed, so wall-clock timings are real "
                         "(the default with --room)."),
        ] = None,
        raw: RawOpt = None,
        rate: RateOpt = None,
        channels: ChannelsOpt = None,
        fmt: FormatOpt = None,
        partials: PartialsOpt = "full",
        server: ServerOpt = None,
        room: RoomOpt = None,
        cafile: CafileOpt = None,
        ray: Annotated[
            str | None,
            typer.Option("--ray", metavar="[ADDRESS]", help="Decode on a Ray cluster, one task per "
                         "file, into --output-dir (alone: a local cluster)."),
        ] = None,
        output_dir: Annotated[
            Path | None,
            typer.Option("--output-dir", "-o", help="Write a file per input and format here "
                         "(talk.wav -> talk.srt); --format may list several."),
        ] = None,
        sentence_case: SentenceCaseOpt = False,
        punctuate: PunctuateOpt = None,
        quiet: QuietOpt = False,
        verbose: VerboseOpt = False,
    ) -> None:
        """Stream audio files in fixed blocks: live partials, finals, first-token timing."""
        setup_logging(verbose)
        with cli_errors():
            check_room(room, server)
            check_cafile(cafile, server)
        if realtime is None:  # a room's readers follow the talk at its own pace
            realtime = room is not None
        if ray is not None:  # one task per input on a cluster: streamasr/cluster/
            from streamasr.commands.file_ray import file_on_ray

            if server is not None:
                with cli_errors():
                    raise UsageError("--ray and --server both say where to decode; pick one")
            if cue_rules != CueRules():
                with cli_errors():
                    raise UsageError("the --cue-* options are not sent to Ray tasks; drop them "
                                     "with --ray (its cues keep the defaults), or drop --ray")
            file_on_ray(ray, paths, model_options, output_dir, fmt, partials,
                        (raw, rate, channels), realtime, punctuate, sentence_case, quiet)
            return
        with cli_errors():
            if server is not None:
                check_remote_options(model_options)  # the server's model options
            raw_format = raw_input_format(raw, rate, channels)
            renderer, draws = file_renderer(
                output_dir, fmt, partials, paths, realtime, quiet, cue_rules
            )
            check_inputs_exist(paths)  # before a model loads or a server is dialled
            by_server, asked = room_finishing(room, punctuate, sentence_case)
            finishing = by_server or load_finishing(punctuate, sentence_case)
        renderer = finished(renderer, finishing)
        if server is not None:  # the same output, decoded by `streamasr serve` at that URL
            file_over_server(server, paths, model_options, realtime, raw_format, renderer,
                             finishing.active, room, asked, cafile)
            return
        with cli_errors():
            recognizer, options = build(model_options, paced=realtime)
        progress = None if quiet else progress_display(draws)
        decode_each(paths, lambda path: stream_file(
            path, recognizer, renderer, options, realtime, progress, raw_format
        ))


def file_renderer(
    output_dir: Path | None,
    fmt: str | None,
    partials: str,
    paths: list[str],
    realtime: bool,
    quiet: bool,
    cues: CueRules | None = None,
) -> tuple[Renderer, bool]:
    """The renderer -o/--format ask for, whatever decodes (here, a server, the library), and
    whether it draws on the terminal itself; every refusal is a usage error before any work."""
    if output_dir is not None:
        formats = parse_formats(fmt)
        check_partials(partials, "jsonl" if "jsonl" in formats else formats[0])
        check_output_dir(output_dir, paths)
        files = OutputDirRenderer(
            output_dir, formats, err_console, realtime, partials, quiet, cues=cues
        )
        return files, False
    fmt_name = choose_format(fmt)
    check_partials(partials, fmt_name)
    if fmt_name == "srt" and len(paths) > 1:
        raise UsageError(
            "several inputs in one SRT would restart its times; use --output-dir DIR "
            "for one .srt per input, or --format vtt (one file, a NOTE per input)"
        )
    renderer = make_renderer(
        fmt_name, realtime, partials, quiet, headers=len(paths) > 1, cues=cues
    )
    return renderer, RENDERERS[fmt_name].terminal


def progress_display(renderer_draws: bool) -> ProgressDisplay | None:
    """A progress bar on stderr when data goes to a file or pipe and stderr is a terminal
    (not beside a renderer that draws on the terminal itself)."""
    if renderer_draws or sys.stdout.isatty() or not err_console.is_terminal:
        return None
    return ProgressDisplay(err_console)

