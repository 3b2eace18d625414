"""The live capture loop: microphone -> save -> decode -> events, until duration, Ctrl-C or error.

Core, not a command: nothing here writes to a terminal. Events go to the renderer handed in
(through `SessionOutput`, which also writes the --log JSONL and collects first tokens), and
messages for the person at the microphone ("listening", "decoding is behind", the end
report) go to a `say(text, tone)` callback the caller chooses; by default they are logged to
the "streamasr" logger. `streamasr mic` passes one that prints them on stderr.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import statistics
import time
from collections.abc import Callable, Iterator
from typing import IO, Literal

import numpy as np

from streamasr.audio.level import LevelMeter, LevelReading, LevelTotals
from streamasr.backends.base import Recognizer
from streamasr.devices.mic import CapturedBlock, MicSource
from streamasr.devices.wav_writer import AudioWriter
from streamasr.errors import OutputError
from streamasr.output.finishing import NONE, Finishing, finished
from streamasr.output.render import JsonlRenderer, Renderer
from streamasr.session import interrupts
from streamasr.session.driver import Session, drive
from streamasr.session.events import Event, FirstToken, StreamSummary
from streamasr.session.stream import StreamOptions, StreamSession

log = logging.getLogger("streamasr")

BACKLOG_WARN_S = 1.0  # warn once this much captured audio waits for the decoder
WARN_EVERY_S = 5.0

#: How a message should look: plain information, a detail, a warning, or something wrong.
Tone = Literal["info", "dim", "warn", "alarm"]
Say = Callable[[str, Tone], None]
LevelView = Callable[[LevelReading], None]


def log_message(text: str, tone: Tone) -> None:
    """The default `say`: messages become log records (warnings for warn and alarm)."""
    log.log(logging.WARNING if tone in ("warn", "alarm") else logging.INFO, "%s", text)


class SessionOutput:
    """Fans events out to the renderer and the --log file; collects first tokens; passes
    messages on to `say`.

    `level_view`: a view that shows the input level continuously (the live meter); without
    one, a message is said when "no signal" or clipping starts. `forward_first_tokens`:
    False for a renderer that prints its own first-token line.
    """

    def __init__(
        self,
        renderer: Renderer,
        log_file: IO[str] | None,
        say: Say = log_message,
        *,
        level_view: LevelView | None = None,
        forward_first_tokens: bool = True,
        finishing: Finishing = NONE,
    ) -> None:
        """`finishing`: punctuation or casing, for the renderer and the log alike."""
        self.renderer = finished(renderer, finishing)
        self._say = say
        self._level_view = level_view
        self._forward_first_tokens = forward_first_tokens
        self.log_file = log_file
        self.jsonl = finished(JsonlRenderer(log_file), finishing) if log_file is not None else None
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
            audio_ms = f"{event.latency_s * 1000:.0f} ms of audio"
            if event.wall_latency_s is None:  # not paced live: only the audio-time form means much
                said = f"{audio_ms} after speech onset at {event.onset_s:.2f} s"
            else:
                said = (
                    f"{event.wall_latency_s * 1000:.0f} ms after speech onset at "
                    f"{event.onset_s:.2f} s (wall clock; {audio_ms})"
                )
            self.say(f"utterance {event.segment + 1}: first token {said}", "dim")

    def say(self, text: str, tone: Tone = "info") -> None:
        """A message for the person at the microphone."""
        self._say(text, tone)

    def level(self, reading: LevelReading, previous: LevelReading | None) -> None:
        """The input level: to the level view if there is one; else a message when a
        warning starts."""
        if self._level_view is not None:
            self._level_view(reading)
            return
        if reading.no_signal and (previous is None or not previous.no_signal):
            self.say(
                f"no signal for {reading.silent_for_s:.0f} s: is the input muted, or "
                "the wrong device? (`streamasr devices`, --device)",
                "warn",
            )
        if reading.clipping and (previous is None or not previous.clipping):
            self.say("the input is clipping (samples at full scale): lower the gain", "alarm")

    def end(self, summary: StreamSummary) -> None:
        self.renderer.end(summary)
        self._log(lambda jsonl: jsonl.end(summary))

    def raise_log_error(self) -> None:
        """Stop the session if --log could not be written (full disk): one line, exit 1."""
        if self.log_error is not None:
            raise self.log_error

    def _log(self, write: Callable[[Renderer], None]) -> None:
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


def first_token_p50_ms(first_tokens: list[FirstToken]) -> float | None:
    """Median wall-clock first-token latency over utterances (None: no utterance had text, or
    none was timed on the wall clock because the audio was not paced live)."""
    walls = [ev.wall_latency_s for ev in first_tokens if ev.wall_latency_s is not None]
    if not walls:
        return None
    return statistics.median(walls) * 1000


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


#: Opens the session a capture feeds: (sample rate, source name, capture clock) -> session.
SessionOpener = Callable[[int, str, CaptureClock], Session]


def run_capture(
    source: MicSource,
    recognizer: Recognizer | None,
    options: StreamOptions,
    output: SessionOutput,
    writer: AudioWriter | None,
    duration_s: float | None,
    *,
    open_session: SessionOpener | None = None,
) -> StreamSummary | None:
    """The live loop: capture -> save -> decode -> render, until duration, Ctrl-C or error.

    The decoding is the one driver's (driver.py); this adds what only a microphone needs:
    the session starts at the first captured block (its wall clock is the capture's), the
    audio is saved as it arrives, and the level, the backlog and lost audio are watched.
    Whatever stops it, the last final is flushed, the summary rendered and the files closed
    before the exception (KeyboardInterrupt, DeviceError) propagates.

    `open_session`: where the audio is decoded instead of a local StreamSession of
    `recognizer` (`mic --server`: a session on a `streamasr serve` connection).
    """
    if open_session is None:
        if recognizer is None:
            raise ValueError("run_capture needs a recognizer or open_session")
        local = recognizer

        def open_session(rate: int, name: str, clock: CaptureClock) -> Session:
            live = dataclasses.replace(options, paced=True)  # a microphone is live
            return StreamSession(local, rate, name, live, clock)

    capture = _Capture(source, output, writer, duration_s)
    summary: StreamSummary | None = None

    def abandoned() -> None:
        """The engine hung and a stop signal came: the files and the end report (the
        driver renders the summary of what was recognised)."""
        if writer is not None:
            writer.close()
        output.close()
        _report_end(source, output, capture.summary(), writer)

    source.start()
    with interrupts.on_abandon(abandoned):
        try:
            blocks = source.blocks()
            first = next(blocks, None)
            if first is not None:
                clock = CaptureClock(first.arrived_s, len(first.samples) / source.sample_rate)
                name = source.device.describe()
                capture.session = open_session(source.sample_rate, name, clock)
                output.begin(name)
                mix = (
                    f"channel {source.channel}"
                    if source.channel
                    else f"{source.channels} channel(s) averaged"
                )
                output.say(
                    f"listening: {name}, {source.sample_rate} Hz, {mix}; Ctrl-C to stop", "info"
                )
                summary = drive(
                    capture.session,
                    capture.samples(first, blocks, clock),
                    output,
                    after_block=capture.watch,
                )
        finally:
            # a stop signal now must not cut the flush in half: it is raised after it
            with interrupts.deferred():
                source.close()
                if writer is not None:
                    writer.close()
                output.close()
                _report_end(source, output, capture.summary(), writer)
                _report_level(output, capture.meter.totals())
    return summary


class _Capture:
    """What the microphone adds around the driver: saving, the duration limit, the meter,
    and the warnings about a backlog, dropped blocks and input overflows."""

    def __init__(
        self,
        source: MicSource,
        output: SessionOutput,
        writer: AudioWriter | None,
        duration_s: float | None,
    ) -> None:
        self.source = source
        self.output = output
        self.writer = writer
        self.session: Session | None = None
        self.limit = round(duration_s * source.sample_rate) if duration_s is not None else None
        self.fed = 0
        self.captured = 0
        # the meter runs on audio time: a backlog must not make silence look shorter or longer
        self.meter = LevelMeter(source.sample_rate, clock=lambda: self.fed / source.sample_rate)
        self.reading: LevelReading | None = None
        self._last_warn = {"backlog": 0.0, "overflow": 0.0}
        self._seen_overflows = 0
        self._seen_dropped = 0

    def summary(self) -> StreamSummary | None:
        """The session's summary so far (None: no audio was captured)."""
        return self.session.summary() if self.session is not None else None

    def samples(
        self, first: CapturedBlock, rest: Iterator[CapturedBlock], clock: CaptureClock
    ) -> Iterator[np.ndarray]:
        """The samples to decode, saved as they pass; ends at the duration limit. Closing it
        (the driver does, before the last decode) stops the capture."""
        try:
            for block in itertools.chain([first], rest):
                samples = block.samples
                if self.limit is not None:
                    samples = samples[: self.limit - self.fed]
                self.captured += len(block.samples)
                clock.observe(block.arrived_s, self.captured / self.source.sample_rate)
                if self.writer is not None:
                    self.writer.write(samples)
                self.fed += len(samples)
                yield samples
                if self.limit is not None and self.fed >= self.limit:
                    return
        finally:
            self.source.close()

    def watch(self, samples: np.ndarray) -> None:
        """After each decoded block: the --log file, the level, backlog and lost audio."""
        output, source = self.output, self.source
        output.raise_log_error()
        if len(samples):
            previous, self.reading = self.reading, self.meter.update(samples)
            output.level(self.reading, previous)
        stats = source.stats()
        now = time.monotonic()
        backlog = source.backlog_s
        if backlog >= BACKLOG_WARN_S and now - self._last_warn["backlog"] >= WARN_EVERY_S:
            self._last_warn["backlog"] = now
            output.say(
                f"decoding is behind real time: {backlog:.1f} s of captured audio waiting",
                "warn",
            )
        if stats.dropped_blocks > self._seen_dropped:
            self._seen_dropped = stats.dropped_blocks
            output.say(
                f"dropped {stats.dropped_s:.1f} s of audio in total: the backlog "
                "reached --max-backlog",
                "alarm",
            )
        if (
            stats.input_overflows > self._seen_overflows
            and now - self._last_warn["overflow"] >= WARN_EVERY_S
        ):
            self._seen_overflows = stats.input_overflows
            self._last_warn["overflow"] = now
            output.say(
                f"PortAudio reported {self._seen_overflows} input overflow(s): audio was "
                "lost before it reached streamasr",
                "warn",
            )


def _report_end(
    source: MicSource,
    output: SessionOutput,
    summary: StreamSummary | None,
    writer: AudioWriter | None,
) -> None:
    stats = source.stats()
    if summary is None:
        output.say("no audio was captured")
        return
    p50 = first_token_p50_ms(output.first_tokens)
    if p50 is None:
        output.say("first token: no utterance produced text")
    else:
        output.say(
            f"first token p50 {p50:.0f} ms after speech onset (wall clock) over "
            f"{len(output.first_tokens)} utterance(s)"
        )
    output.say(
        f"capture: {stats.captured_s:.2f} s in {stats.blocks} blocks, "
        f"{stats.input_overflows} input overflows, {stats.input_underflows} underflows, "
        f"{stats.dropped_s:.2f} s dropped, max backlog {stats.max_backlog_s:.2f} s"
    )
    if writer is not None:
        output.say(f"saved {writer.frames / source.sample_rate:.2f} s to {writer.path}")


def _report_level(output: SessionOutput, totals: LevelTotals) -> None:
    """Say so if the whole capture was silent, or if any of it clipped."""
    if totals.silent:
        loudest = (
            "digital silence"
            if totals.max_level_dbfs == float("-inf")
            else f"never above {totals.max_level_dbfs:.1f} dBFS"
        )
        output.say(
            f"the whole capture was silent ({loudest}; floor {totals.floor_dbfs:.0f} "
            "dBFS): check that the input is not muted and that --device is the microphone "
            "(`streamasr devices`)",
            "warn",
        )
    if totals.clipped:
        output.say(
            f"the capture clipped: {totals.clipped_samples} sample(s) in "
            f"{totals.clipped_blocks} block(s) reached full scale; lower the input gain",
            "warn",
        )
