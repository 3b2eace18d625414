"""`streamasr file`: stream audio files through the model as a live system would."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from streamasr.audio import (
    STDIN_NAME,
    AudioSource,
    RawFormat,
    check_path,
    check_raw_format,
    next_input,
    open_source,
)
from streamasr.backends.base import Recognizer
from streamasr.commands.common import (
    EXIT_INTERRUPTED,
    ChannelsOpt,
    FormatOpt,
    PartialsOpt,
    QuietOpt,
    RateOpt,
    RawOpt,
    VerboseOpt,
    check_partials,
    check_path_name,
    choose_format,
    cli_errors,
    err_console,
    make_renderer,
    report_error,
    setup_logging,
)
from streamasr.commands.options import ModelOptions, build, with_model_options
from streamasr.commands.output_dir import OutputDirRenderer, check_output_dir, parse_formats
from streamasr.commands.remote import RoomOpt, ServerOpt, check_room, file_over_server
from streamasr.driver import Pacing, Sink, drive
from streamasr.errors import InputError, UsageError
from streamasr.events import Event, StreamSummary
from streamasr.render import (
    RENDERERS,
    ProgressDisplay,
    PunctuationRenderer,
    Renderer,
    SentenceCaseRenderer,
)
from streamasr.stream import StreamOptions, StreamSession

if TYPE_CHECKING:
    from streamasr.punctuation import Punctuator

log = logging.getLogger("streamasr")


def stream_one(
    path: str,
    recognizer: Recognizer,
    renderer: Renderer,
    options: StreamOptions,
    realtime: bool,
    progress: ProgressDisplay | None = None,
    raw: RawFormat | None = None,
) -> None:
    """Stream one file; on any interruption, flush what was recognised, then re-raise.

    WAV streams that follow the first on a pipe (`cat a.wav b.wav |`) are inputs of their own.
    """
    check_path_name(path)
    source: AudioSource | None = open_source(path, raw)
    count = 1
    while source is not None:
        name = path if count == 1 else f"{path} (WAV stream {count})"
        _stream_source(name, source, recognizer, renderer, options, realtime, progress)
        source, count = next_input(source), count + 1


def _stream_source(
    path: str,
    source: AudioSource,
    recognizer: Recognizer,
    renderer: Renderer,
    options: StreamOptions,
    realtime: bool,
    progress: ProgressDisplay | None,
) -> None:
    if source.info.length_known and source.info.frames == 0:
        log.warning("%s has no audio samples; the transcript is empty", path)
    session = StreamSession(recognizer, source.sample_rate, path, options)
    renderer.begin(path)
    sink: Sink = renderer
    after_block = None
    if progress is not None:
        # a buffered pipe's header may not state the true length: position only
        progress.begin(path, None if path == STDIN_NAME else source.info.duration_s)
        sink = _ProgressSink(renderer, progress, session)
        after_block = sink.advance
    try:
        blocks = source.blocks(session.block_s)
        drive(session, blocks, sink, pacing=Pacing() if realtime else None,
              after_block=after_block)
    finally:
        source.close()


class _ProgressSink:
    """The renderer with the progress bar beside it; the bar goes before the summary line."""

    def __init__(
        self, renderer: Renderer, progress: ProgressDisplay, session: StreamSession
    ) -> None:
        self.renderer = renderer
        self.progress = progress
        self.session = session

    def event(self, event: Event) -> None:
        self.renderer.event(event)
        self.progress.event(event)

    def advance(self, _block: object) -> None:
        self.progress.advance(self.session.audio_s)

    def end(self, summary: StreamSummary) -> None:
        self.progress.end()
        self.renderer.end(summary)


def register(app: typer.Typer) -> None:
    """Add the `file` command."""

    @app.command("file")
    @with_model_options()
    def file_command(
        paths: Annotated[
            list[str], typer.Argument(help="Audio files (wav, flac, ogg, ...); '-' reads stdin.")
        ],
        model_options: ModelOptions,
        realtime: Annotated[
            bool,
            typer.Option(help="Feed at the audio's own speed, so wall-clock timings are real."),
        ] = False,
        raw: RawOpt = None,
        rate: RateOpt = None,
        channels: ChannelsOpt = None,
        fmt: FormatOpt = None,
        partials: PartialsOpt = "full",
        server: ServerOpt = None,
        room: RoomOpt = None,
        ray: Annotated[
            str | None,
            typer.Option("--ray", metavar="[ADDRESS]", help="Decode the inputs on a Ray cluster, "
                         "one task per file, outputs written by the tasks into --output-dir: "
                         "--ray alone starts one on this machine; auto, ray://HOST:PORT or "
                         "HOST:PORT joins one (pip install 'streamasr\\[ray]')."),
        ] = None,
        output_dir: Annotated[
            Path | None,
            typer.Option("--output-dir", "-o", help="Write one file per input and per format "
                         "into this folder, named after the input (talk.wav -> talk.srt); "
                         "--format takes several here: txt,jsonl,srt,vtt (default txt)."),
        ] = None,
        sentence_case: Annotated[
            bool,
            typer.Option("--sentence-case", help="Finals in sentence case ('The right time to "
                         "act') for models that write all capitals."),
        ] = False,
        punctuate: Annotated[
            str | None,
            typer.Option("--punctuate", metavar="MODEL", help="Punctuate and case finals with "
                         "sherpa-onnx's online punctuation model: punct-en (after `streamasr "
                         "models pull punct-en`) or a folder with model.onnx and bpe.vocab. "
                         "Partials stay as recognised; wins over --sentence-case."),
        ] = None,
        quiet: QuietOpt = False,
        verbose: VerboseOpt = False,
    ) -> None:
        """Stream audio files in fixed blocks: live partials, finals, first-token timing."""
        setup_logging(verbose)
        with cli_errors():
            check_room(room, server)
        if ray is not None:  # one task per input on a cluster: streamasr/cluster/
            from streamasr.cluster.file_run import file_on_ray

            if server is not None:
                with cli_errors():
                    raise UsageError("--ray and --server both say where to decode; pick one")
            file_on_ray(ray, paths, model_options, output_dir, fmt, partials,
                        (raw, rate, channels), realtime, punctuate, sentence_case, quiet)
            return
        if server is not None:  # the same output, decoded by `streamasr serve` at that URL
            if punctuate is not None:
                with cli_errors():
                    raise UsageError(
                        "--punctuate works on local decoding only; drop --server, or "
                        "punctuate the server's output yourself"
                    )
            file_over_server(
                server, paths, model_options, realtime, (raw, rate, channels), fmt, partials,
                quiet, room,
            )
            return
        with cli_errors():
            raw_format = raw_input_format(raw, rate, channels)
            renderer: Renderer
            if output_dir is not None:
                formats = parse_formats(fmt)
                check_partials(partials, "jsonl" if "jsonl" in formats else formats[0])
                check_output_dir(output_dir, paths)
                renderer = OutputDirRenderer(
                    output_dir, formats, err_console, realtime, partials, quiet
                )
            else:
                fmt_name = choose_format(fmt)
                check_partials(partials, fmt_name)
                if fmt_name == "srt" and len(paths) > 1:
                    raise UsageError(
                        "several inputs in one SRT would restart its times; use --output-dir DIR "
                        "for one .srt per input, or --format vtt (one file, a NOTE per input)"
                    )
                renderer = make_renderer(
                    fmt_name, realtime, partials, quiet, headers=len(paths) > 1
                )
            check_inputs_exist(paths)
            punctuator = load_punctuator(punctuate, sentence_case)
            recognizer, options = build(model_options, paced=realtime)
        draws = output_dir is None and RENDERERS[fmt_name].terminal
        progress = None if quiet else progress_display(draws)
        if punctuator is not None:
            renderer = PunctuationRenderer(renderer, punctuator.punctuate)
        elif sentence_case:
            renderer = SentenceCaseRenderer(renderer)
        failed = 0
        for path in paths:
            try:
                stream_one(path, recognizer, renderer, options, realtime, progress, raw_format)
            except InputError as exc:
                failed += 1
                report_error(exc)
            except KeyboardInterrupt:
                err_console.print("[yellow]interrupted; flushed what was recognised[/yellow]")
                raise typer.Exit(EXIT_INTERRUPTED) from None
        if failed:
            err_console.print(f"{failed} of {len(paths)} inputs failed", highlight=False)
            raise typer.Exit(1)


def load_punctuator(value: str | None, sentence_case: bool) -> Punctuator | None:
    """The punctuation model `--punctuate` names, loaded before the speech model so that a
    missing or damaged folder fails in a second; it also restores case, so it wins over
    --sentence-case (one warning says so)."""
    if value is None:
        return None
    from streamasr import punctuation

    punctuator = punctuation.load(value)
    if sentence_case:
        log.warning("--sentence-case is ignored: the --punctuate model restores case itself")
    return punctuator


def check_inputs_exist(paths: list[str]) -> None:
    """When no input can be read at all, say so before the model loads (seconds); when some
    can, the others fail one by one as they come, and the rest still run."""
    problems = []
    for path in paths:
        if path == STDIN_NAME:
            return
        try:
            check_path(path)
            return
        except InputError as exc:
            problems.append(exc)
        except OSError:  # a name the system cannot even look up: it fails alone, in order
            return
    if problems:
        more = len(problems) - 1
        raise InputError(f"{problems[0]}" + (f" (and {more} more unreadable)" if more else ""))


def raw_input_format(raw: str | None, rate: int | None, channels: int | None) -> RawFormat | None:
    """--raw/--rate/--channels as one checked format (None: inputs carry their own header)."""
    if raw is None:
        if rate is not None or channels is not None:
            raise UsageError(
                "--rate and --channels describe headerless PCM; add --raw s16le|s32le|f32le "
                "(audio files carry their own rate and channels)"
            )
        return None
    check_raw_format(RawFormat(raw, 16000, 1))  # the encoding first: it is the likelier typo
    if rate is None:
        raise UsageError(f"--raw {raw} needs --rate: headerless PCM does not say its rate")
    return check_raw_format(RawFormat(raw, rate, 1 if channels is None else channels))


def progress_display(renderer_draws: bool) -> ProgressDisplay | None:
    """A progress bar on stderr when data goes to a file or pipe and stderr is a terminal
    (not beside a renderer that draws on the terminal itself)."""
    if renderer_draws or sys.stdout.isatty() or not err_console.is_terminal:
        return None
    return ProgressDisplay(err_console)

