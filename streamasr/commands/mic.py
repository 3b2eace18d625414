"""`streamasr devices` and `streamasr mic`: live captions from a microphone."""

from __future__ import annotations

import dataclasses
import logging
import statistics
import time
from collections.abc import Callable
from typing import IO, Annotated

import typer

from streamasr.backends.base import Recognizer
from streamasr.commands.common import (
    EXIT_INTERRUPTED,
    FormatOpt,
    VerboseOpt,
    check_number,
    choose_format,
    cli_errors,
    err_console,
    make_renderer,
    report_error,
    setup_logging,
)
from streamasr.commands.options import ModelOptions, build, with_model_options
from streamasr.errors import DeviceError, OutputError, StreamAsrError, UsageError
from streamasr.events import Event, FirstToken, StreamSummary
from streamasr.level import LevelMeter, LevelReading, LevelTotals
from streamasr.mic import (
    DEFAULT_MAX_BACKLOG_S,
    AudioWriter,
    DeviceInfo,
    MicSource,
    list_input_devices,
    select_device,
)
from streamasr.onset import OnsetOptions
from streamasr.render import JsonlRenderer, LiveRenderer, Renderer, escape
from streamasr.stream import StreamOptions, StreamSession

log = logging.getLogger("streamasr")

BACKLOG_WARN_S = 1.0  # warn once this much captured audio waits for the decoder
WARN_EVERY_S = 5.0
DEFAULT_ONSET_DBFS = OnsetOptions().threshold_dbfs

DeviceOpt = Annotated[
    str | None,
    typer.Option(
        "--device",
        "-d",
        help="Input device: index or case-insensitive part of its name (see `streamasr "
        "devices`). Default: the system's default input.",
    ),
]
ChannelOpt = Annotated[
    int | None,
    typer.Option(help="Use only this input channel (1-based); default: average the channels."),
]
DurationOpt = Annotated[
    float | None,
    typer.Option(help="Stop after this many seconds of captured audio (unattended runs)."),
]
SaveOpt = Annotated[
    str | None,
    typer.Option(
        help="Write the captured audio here as it arrives (.wav: 32-bit float, replays "
        "exactly with `streamasr file --realtime`)."
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
        help="Seconds of captured audio the queue may hold when decoding falls behind; "
        "beyond it blocks are dropped and counted.",
    ),
]


class SessionOutput:
    """Fans events out to the chosen renderer and the --log file; collects first tokens."""

    def __init__(self, renderer: Renderer, log_file: IO[str] | None) -> None:
        self.renderer = renderer
        # the live view would print its own audio-time first-token line beside ours
        self._forward_first_tokens = not isinstance(renderer, LiveRenderer)
        self.log_file = log_file
        self.jsonl = JsonlRenderer(log_file) if log_file is not None else None
        self.first_tokens: list[FirstToken] = []
        # set by the first failed --log write; the log stops, the session is stopped by the
        # caller (`raise_log_error`), and the text on screen is kept
        self.log_error: OutputError | None = None

    def begin(self, source: str) -> None:
        self.renderer.begin(source)
        self._log(lambda jsonl: jsonl.begin(source))

    def event(self, event: Event) -> None:
        if self._forward_first_tokens or not isinstance(event, FirstToken):
            self.renderer.event(event)
        self._log(lambda jsonl: jsonl.event(event))
        if isinstance(event, FirstToken):
            self.first_tokens.append(event)
            self.say(
                f"[dim]utterance {event.segment + 1}: first token "
                f"{event.wall_latency_s * 1000:.0f} ms after speech onset at {event.onset_s:.2f} s "
                f"(wall clock; {event.latency_s * 1000:.0f} ms of audio)[/dim]"
            )

    def say(self, message: str) -> None:
        """A message during the session; above the live area when there is one, so the
        partial and the level meter below it stay whole."""
        if isinstance(self.renderer, LiveRenderer):
            self.renderer.note(message)
        else:
            _say(message)

    def level(self, reading: LevelReading, previous: LevelReading | None) -> None:
        """The input level: a meter in the live view; otherwise a line when a warning starts."""
        if isinstance(self.renderer, LiveRenderer):
            self.renderer.level(reading)
            return
        if reading.no_signal and (previous is None or not previous.no_signal):
            _say(
                f"[yellow]no signal for {reading.silent_for_s:.0f} s: is the input muted, or "
                "the wrong device? (`streamasr devices`, --device)[/yellow]"
            )
        if reading.clipping and (previous is None or not previous.clipping):
            _say("[red]the input is clipping (samples at full scale): lower the gain[/red]")

    def end(self, summary: StreamSummary) -> None:
        self.renderer.end(summary)
        self._log(lambda jsonl: jsonl.end(summary))

    def raise_log_error(self) -> None:
        """Stop the session if --log could not be written (full disk): one line, exit 1."""
        if self.log_error is not None:
            raise self.log_error

    def _log(self, write: Callable[[JsonlRenderer], None]) -> None:
        """Write to --log; a failure is recorded once, never raised mid-flush."""
        if self.jsonl is None:
            return
        try:
            write(self.jsonl)
        except OSError as exc:
            self.jsonl = None
            name = getattr(self.log_file, "name", "")
            self.log_error = OutputError(
                f"--log {name}: cannot write ({exc.strerror or exc}); free some space or log "
                "elsewhere. The transcript is kept"
            )
            self.close()

    def close(self) -> None:
        if self.log_file is not None and not self.log_file.closed:
            try:
                self.log_file.close()
            except OSError as exc:  # its last flush failed; the error is already recorded
                log.debug("closing the --log file: %s", exc)


def _say(message: str) -> None:
    """A message on stderr, left for the terminal to wrap (numbers are never split)."""
    err_console.print(message, highlight=False, soft_wrap=True)


def first_token_p50_ms(first_tokens: list[FirstToken]) -> float | None:
    """Median wall-clock first-token latency over utterances (None: no utterance had text)."""
    if not first_tokens:
        return None
    return statistics.median(ev.wall_latency_s for ev in first_tokens) * 1000


class CaptureClock:
    """Wall clock of a live session, zero at the capture of its first sample.

    No block can arrive before its last sample was captured, so that instant is at most
    `arrived - audio_end` for every block; the clock keeps the smallest such bound seen.
    Moving zero earlier only makes later readings larger, so timestamps still only increase,
    and no event is ever stamped earlier than the audio it is about. StreamSession takes
    its first reading as zero.
    """

    def __init__(self, first_arrived_s: float, first_block_s: float) -> None:
        self._origin = first_arrived_s - first_block_s
        self._shift = 0.0
        self._first = True

    def observe(self, arrived_s: float, audio_end_s: float) -> None:
        """A block ending at `audio_end_s` (audio time) arrived at `arrived_s`."""
        bound = arrived_s - audio_end_s
        if bound < self._origin:
            self._shift += self._origin - bound
            self._origin = bound

    def __call__(self) -> float:
        if self._first:
            self._first = False
            return self._origin
        return time.perf_counter() + self._shift


def run_capture(
    source: MicSource,
    recognizer: Recognizer,
    options: StreamOptions,
    output: SessionOutput,
    writer: AudioWriter | None,
    duration_s: float | None,
) -> StreamSummary | None:
    """The live loop: capture -> save -> decode -> render, until duration, Ctrl-C or error.

    Whatever stops it, the last final is flushed, the summary rendered and the files closed
    before the exception (KeyboardInterrupt, DeviceError) propagates.
    """
    session: StreamSession | None = None
    limit = round(duration_s * source.sample_rate) if duration_s is not None else None
    fed = captured = 0
    clock: CaptureClock | None = None
    last_warn = {"backlog": 0.0, "overflow": 0.0}
    seen_overflows = 0
    seen_dropped = 0
    name = source.device.describe()
    # the meter runs on audio time: a backlog must not make silence look shorter or longer
    meter = LevelMeter(source.sample_rate, clock=lambda: fed / source.sample_rate)
    reading: LevelReading | None = None
    source.start()
    try:
        for block in source.blocks():
            samples = block.samples
            if limit is not None:
                samples = samples[: limit - fed]
            captured += len(block.samples)
            if session is None:
                clock = CaptureClock(block.arrived_s, len(block.samples) / source.sample_rate)
                live = dataclasses.replace(options, paced=True)  # a microphone is live
                session = StreamSession(recognizer, source.sample_rate, name, live, clock)
                output.begin(name)
                mix = (
                    f"channel {source.channel}"
                    if source.channel
                    else f"{source.channels} channel(s) averaged"
                )
                _say(f"listening: {escape(name)}, {source.sample_rate} Hz, {mix}; Ctrl-C to stop")
            clock.observe(block.arrived_s, captured / source.sample_rate)
            if writer is not None:
                writer.write(samples)
            fed += len(samples)
            for event in session.feed(samples):
                output.event(event)
            output.raise_log_error()
            if len(samples):
                previous, reading = reading, meter.update(samples)
                output.level(reading, previous)
            stats = source.stats()
            now = time.monotonic()
            backlog = source.backlog_s
            if backlog >= BACKLOG_WARN_S and now - last_warn["backlog"] >= WARN_EVERY_S:
                last_warn["backlog"] = now
                output.say(
                    f"[yellow]decoding is behind real time: {backlog:.1f} s of captured audio "
                    "waiting[/yellow]"
                )
            if stats.dropped_blocks > seen_dropped:
                seen_dropped = stats.dropped_blocks
                output.say(
                    f"[red]dropped {stats.dropped_s:.1f} s of audio in total: the backlog "
                    "reached --max-backlog[/red]"
                )
            if (
                stats.input_overflows > seen_overflows
                and now - last_warn["overflow"] >= WARN_EVERY_S
            ):
                seen_overflows = stats.input_overflows
                last_warn["overflow"] = now
                output.say(
                    f"[yellow]PortAudio reported {seen_overflows} input overflow(s): audio was "
                    "lost before it reached streamasr[/yellow]"
                )
            if limit is not None and fed >= limit:
                break
    finally:
        source.close()
        summary = None
        if session is not None:
            for event in session.finish():
                output.event(event)
            summary = session.summary()
            output.end(summary)
        if writer is not None:
            writer.close()
        output.close()
        _report_end(source, output, summary, writer)
        _report_level(meter.totals())
    return summary


def _report_end(
    source: MicSource,
    output: SessionOutput,
    summary: StreamSummary | None,
    writer: AudioWriter | None,
) -> None:
    stats = source.stats()
    if summary is None:
        _say("no audio was captured")
        return
    p50 = first_token_p50_ms(output.first_tokens)
    if p50 is None:
        _say("first token: no utterance produced text")
    else:
        _say(
            f"first token p50 {p50:.0f} ms after speech onset (wall clock) over "
            f"{len(output.first_tokens)} utterance(s)"
        )
    _say(
        f"capture: {stats.captured_s:.2f} s in {stats.blocks} blocks, "
        f"{stats.input_overflows} input overflows, {stats.input_underflows} underflows, "
        f"{stats.dropped_s:.2f} s dropped, max backlog {stats.max_backlog_s:.2f} s"
    )
    if writer is not None:
        _say(f"saved {writer.frames / source.sample_rate:.2f} s to {escape(str(writer.path))}")


def _report_level(totals: LevelTotals) -> None:
    """Say so if the whole capture was silent, or if any of it clipped."""
    if totals.silent:
        loudest = (
            "digital silence"
            if totals.max_level_dbfs == float("-inf")
            else f"never above {totals.max_level_dbfs:.1f} dBFS"
        )
        _say(
            f"[yellow]the whole capture was silent ({loudest}; floor {totals.floor_dbfs:.0f} "
            "dBFS): check that the input is not muted and that --device is the microphone "
            "(`streamasr devices`)[/yellow]"
        )
    if totals.clipped:
        _say(
            f"[yellow]the capture clipped: {totals.clipped_samples} sample(s) in "
            f"{totals.clipped_blocks} block(s) reached full scale; lower the input gain[/yellow]"
        )


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
    def mic_command(
        *,
        device: DeviceOpt = None,
        channel: ChannelOpt = None,
        duration: DurationOpt = None,
        save: SaveOpt = None,
        log_path: LogOpt = None,
        model_options: ModelOptions,
        max_backlog: BacklogOpt = DEFAULT_MAX_BACKLOG_S,
        fmt: FormatOpt = None,
        verbose: VerboseOpt = False,
    ) -> None:
        """Live captions from a microphone: partials as you speak, a final per utterance.

        Endpointing is on: an utterance ends after --rule2 s of silence following text.

        Each utterance becomes a final line with its start and end time; no audio is lost.

        Ctrl-C stops capture, flushes the last final and prints the summary (exit 130).
        """
        setup_logging(verbose)
        writer: AudioWriter | None = None
        log_file: IO[str] | None = None
        try:
            with cli_errors():
                check_number("--duration", duration, 0, 7 * 86400, "s", low_open=True)
                check_number("--max-backlog", max_backlog, 0, 3600, "s", low_open=True)
                check_number("--channel", channel, 1, 1024, "(1-based)")
                fmt_name = choose_format(fmt)
                recognizer, options = build(model_options, paced=True)
                renderer = make_renderer(fmt_name, True)
                chosen = select_device(list_input_devices(), device)
                block_s = options.block_s or recognizer.chunk_s
                source = MicSource(chosen, block_s, channel, max_backlog)
                if save is not None:
                    writer = AudioWriter(save, source.sample_rate)
                if log_path is not None:
                    log_file = _open_log(log_path)
            output = SessionOutput(renderer, log_file)
            try:
                run_capture(source, recognizer, options, output, writer, duration)
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


def _open_log(path: str) -> IO[str]:
    try:
        return open(path, "w", encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"--log {path}: cannot write there ({exc.strerror})") from exc
