"""`streamasr devices` and `streamasr mic`: live captions from a microphone."""

from __future__ import annotations

import errno
import logging
from typing import IO, Annotated

import typer

from streamasr.backends.options import check_number
from streamasr.commands.common import (
    EXIT_INTERRUPTED,
    FormatOpt,
    PunctuateOpt,
    QuietOpt,
    SentenceCaseOpt,
    VerboseOpt,
    choose_format,
    cli_errors,
    err_console,
    make_renderer,
    report_error,
    setup_logging,
)
from streamasr.commands.cue_options import with_cue_options
from streamasr.commands.options import (
    ModelOptions,
    preflight,
    with_model_options,
)
from streamasr.commands.remote import (
    SEND_BLOCK_S,
    CafileOpt,
    RoomOpt,
    ServerOpt,
    check_cafile,
    check_remote_options,
    check_room,
    remote_model,
    room_finishing,
)
from streamasr.devices.live import (
    CaptureClock,
    Say,
    SessionOpener,
    SessionOutput,
    Tone,
    run_capture,
)
from streamasr.devices.mic import DEFAULT_MAX_BACKLOG_S, MicSource
from streamasr.devices.mic_devices import DeviceInfo, list_input_devices, select_device
from streamasr.devices.wav_writer import AudioWriter
from streamasr.errors import DeviceError, OutputError, StreamAsrError, UsageError
from streamasr.output.finishing import NONE, Finishing, load_finishing
from streamasr.output.render import LiveRenderer, Renderer, escape
from streamasr.session.driver import Session
from streamasr.session.stream import StreamOptions
from streamasr.text.captions import CueRules

log = logging.getLogger("streamasr")

DeviceOpt = Annotated[
    str | None,
    typer.Option(
        "--device",
        "-d",
        help="Input device: index or name part (`streamasr devices`).",
    ),
]
ChannelOpt = Annotated[
    int | None,
    typer.Option(help="Only this channel (1-based); default: their mean."),
]
DurationOpt = Annotated[
    float | None,
    typer.Option(help="Stop after this many seconds of captured audio."),
]
SaveOpt = Annotated[
    str | None,
    typer.Option(
        help="Write the captured audio here (docs/mic.md)."
    ),
]
LogOpt = Annotated[
    str | None,
    typer.Option("--log", help="Also write every event as JSONL to this file."),
]
BacklogOpt = Annotated[
    float,
    typer.Option(
        "--max-backlog",
        help="Seconds of audio held while decoding lags; more are dropped.",
    ),
]


def terminal_output(
    renderer: Renderer, log_file: IO[str] | None, quiet: bool = False,
    finishing: Finishing = NONE,
) -> SessionOutput:
    """The live loop's output as `mic` shows it: messages on stderr (above the live area when
    there is one, so the partial and the level meter below it stay whole).

    `quiet`: captions only; of the messages, warnings alone are said (no "listening", no
    first-token lines, no end report), and the live view has no level meter (a silent or
    clipping input is then said once, as a warning).
    """
    if isinstance(renderer, LiveRenderer):
        live = renderer

        def say_live(text: str, tone: Tone) -> None:
            live.note(_styled(text, tone))

        if quiet:
            return SessionOutput(renderer, log_file, _warnings_only(say_live), finishing=finishing)
        # the live view shows a level meter and its own audio-time first-token line
        return SessionOutput(
            renderer, log_file, say_live, level_view=live.level, forward_first_tokens=False,
            finishing=finishing,
        )
    say = _warnings_only(_say_stderr) if quiet else _say_stderr
    return SessionOutput(renderer, log_file, say, finishing=finishing)


def _warnings_only(say: Say) -> Say:
    def say_warnings(text: str, tone: Tone) -> None:
        if tone in ("warn", "alarm"):
            say(text, tone)

    return say_warnings


_STYLES: dict[str, str] = {"info": "", "dim": "dim", "warn": "yellow", "alarm": "red"}


def _styled(text: str, tone: Tone) -> str:
    style = _STYLES.get(tone, "")
    return f"[{style}]{escape(text)}[/{style}]" if style else escape(text)


def _say_stderr(text: str, tone: Tone) -> None:
    """A message on stderr, left for the terminal to wrap (numbers are never split)."""
    _say(_styled(text, tone))


def _say(message: str) -> None:
    err_console.print(message, highlight=False, soft_wrap=True)


def format_devices(devices: list[DeviceInfo]) -> str:
    """The `devices` table: default marked with '*'."""
    header = f"  {'index':>5}  {'name':<40}  {'host API':<12}  {'channels':>8}  {'rate':>6}"
    lines = [header]
    for d in devices:
        mark = "*" if d.is_default else " "
        lines.append(
            f"{mark} {d.index:>5}  {d.name[:40]:<40}  {d.hostapi[:12]:<12}  "
            f"{d.input_channels:>8}  {d.sample_rate:>6}"
        )
    return "\n".join(lines)


def register(app: typer.Typer) -> None:
    """Add the `devices` and `mic` commands."""

    @app.command("devices")
    def devices_command(verbose: VerboseOpt = False) -> None:
        """List audio input devices: index, name, host API, channels, native rate (* default)."""
        setup_logging(verbose)
        with cli_errors():
            devices = list_input_devices()
            if not devices:
                select_device(devices, None)  # raises the no-device advice
        typer.echo(format_devices(devices))

    @app.command("mic")
    @with_model_options(rename={"device": "--compute-device"})
    @with_cue_options()
    def mic_command(
        *,
        device: DeviceOpt = None,
        channel: ChannelOpt = None,
        duration: DurationOpt = None,
        save: SaveOpt = None,
        log_path: LogOpt = None,
        model_options: ModelOptions,
        cue_rules: CueRules,
        max_backlog: BacklogOpt = DEFAULT_MAX_BACKLOG_S,
        server: ServerOpt = None,
        room: RoomOpt = None,
        cafile: CafileOpt = None,
        fmt: FormatOpt = None,
        sentence_case: SentenceCaseOpt = False,
        punctuate: PunctuateOpt = None,
        quiet: QuietOpt = False,
        verbose: VerboseOpt = False,
    ) -> None:
        """Live captions from a microphone: partials as you speak, a final per utterance.

        An utterance ends after --rule2 s of silence following text and becomes a final line
        with its start and end time; no audio is lost. Ctrl-C stops capture, flushes the last
        final and prints the summary (exit 130). With --server the audio is decoded by a
        `streamasr serve` and printed as here (docs/mic.md).
        """
        setup_logging(verbose)
        writer: AudioWriter | None = None
        log_file: IO[str] | None = None
        try:
            with cli_errors():
                check_number("--duration", duration, 0, 7 * 86400, "s", low_open=True)
                check_number("--max-backlog", max_backlog, 0, 3600, "s", low_open=True)
                check_number("--channel", channel, 1, 1024, "(1-based)")
                check_room(room, server)
                check_cafile(cafile, server)
                fmt_name = choose_format(fmt)
                # the command line first (usage errors, CUDA), then the device, both said in a
                # second, before the model loads
                if server is not None:
                    check_remote_options(model_options)
                else:
                    prepared = preflight(model_options, paced=True)
                chosen = select_device(list_input_devices(), device)
                by_server, asked = room_finishing(room, punctuate, sentence_case)
                # before the speech model
                finishing = by_server or load_finishing(punctuate, sentence_case)
                if server is not None:
                    recognizer, options = None, StreamOptions()
                    open_session = remote_opener(server, model_options, finishing.active, room,
                                                 asked, cafile)  # fmt: skip
                    # the capture's blocks are the messages sent; the server cuts its own
                    block_s = (
                        model_options.block_ms / 1000 if model_options.block_ms else SEND_BLOCK_S
                    )
                else:
                    recognizer, options = prepared.load(), prepared.feed
                    open_session = None
                    block_s = options.block_s or recognizer.chunk_s
                renderer = make_renderer(fmt_name, True, quiet=quiet, cues=cue_rules)
                source = MicSource(chosen, block_s, channel, max_backlog)
                if save is not None:
                    writer = AudioWriter(save, source.sample_rate)
                if log_path is not None:
                    log_file = _open_log(log_path)
            output = terminal_output(renderer, log_file, quiet, finishing)
            try:
                run_capture(
                    source, recognizer, options, output, writer, duration,
                    open_session=open_session,
                )  # fmt: skip
                output.raise_log_error()  # a failure while flushing the last events
            except DeviceError as exc:
                report_error(exc)
                raise typer.Exit(1) from None
            except StreamAsrError as exc:
                report_error(exc)
                raise typer.Exit(exc.exit_code) from None
        except KeyboardInterrupt:
            _say("[yellow]interrupted; flushed what was recognised[/yellow]")
            raise typer.Exit(EXIT_INTERRUPTED) from None
        finally:
            if writer is not None:
                writer.close()
            if log_file is not None and not log_file.closed:
                log_file.close()


def remote_opener(
    url: str, model_options: ModelOptions, finished_here: bool = False, room: str | None = None,
    asked: dict[str, bool] | None = None, cafile: str | None = None,
) -> SessionOpener:
    """Sessions on a `streamasr serve` at `url`, with the session settings `file --server`
    sends (so what is printed is what a local `mic` prints with the server's model)."""
    model = remote_model(url, model_options, finished_here, room, asked, cafile)
    model.open()

    def open_session(rate: int, name: str, clock: CaptureClock) -> Session:
        return model.session(rate, name, realtime=True)

    return open_session


def _open_log(path: str) -> IO[str]:
    """The --log file; a full file system (no space, no inodes) is a runtime error (exit 1),
    a place that cannot be written at all a usage error (exit 2), as for --save."""
    try:
        return open(path, "w", encoding="utf-8")
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise OutputError(
                f"--log {path}: cannot write it ({exc.strerror}); free some space or log "
                "elsewhere"
            ) from None
        raise UsageError(f"--log {path}: cannot write there ({exc.strerror})") from exc
