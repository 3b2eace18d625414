"""The one streaming loop: feed blocks, decode chunk by chunk, turn hypotheses into events.

Used by `file`, `mic` and `bench` alike. The recognizer and the clock come in as arguments,
so tests can drive the loop with a fake clock and get exact timings.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from streamasr.audio.resample import StreamResampler
from streamasr.backends.base import EndpointOptions, Hypothesis, Recognizer, RecognizerStream
from streamasr.errors import BackendError
from streamasr.session.batch import step_alone
from streamasr.session.endpointing import Endpointer
from streamasr.session.events import Endpoint, Event, Final, FirstToken, Partial, StreamSummary
from streamasr.text.prefix import Prefix
from streamasr.vad import Piece, VadFrontEnd, VadOptions
from streamasr.vad.onset import OnsetDetector, OnsetOptions

DEFAULT_TAIL_PADDING_S = 0.66
EventT = TypeVar("EventT", bound=Event)


@dataclass(frozen=True)
class StreamOptions:
    """How audio is fed and cut: block size (None = one chunk), padding at the end of input,
    onset detection and the endpoint rules (applied here, the same for every engine), and
    the voice activity detector (`vad`: onsets, its end rule, the silence gate; docs/vad.md).

    `paced` says the audio arrives at live speed (`--realtime`, a microphone): only then is
    a wall-clock latency the user's wait, so only then is it reported.
    """

    block_s: float | None = None
    tail_padding_s: float = DEFAULT_TAIL_PADDING_S
    onset: OnsetOptions = OnsetOptions()
    paced: bool = False
    endpoint: EndpointOptions = EndpointOptions()
    vad: VadOptions = VadOptions()


class StreamSession:
    """Feeds one audio stream into one recognizer stream and reports what a user would see.

    Endpoints are checked after every encoder step (not after every feed block), so the
    segmentation and the text do not depend on the feed block size. Audio is resampled here
    for a backend that wants one rate and does not convert itself.

    `feed`/`finish` decode as they go (batch.step_alone). A batch driver (batch.py) instead calls
    `accept`/`end_input`, steps many streams at once with the recognizer's `decode_batch`,
    hands each stepped session to `after_step`, and ends with `close`: the same events.
    """

    def __init__(
        self,
        recognizer: Recognizer,
        sample_rate: int,
        source_name: str = "",
        options: StreamOptions = StreamOptions(),
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.recognizer = recognizer
        self.sample_rate = sample_rate
        self.source_name = source_name
        self.options = options
        self.clock = clock
        self.stream: RecognizerStream = recognizer.create_stream()
        info = recognizer.info
        self._frame_s = info.output_frame_s
        self._engine_rate = sample_rate
        self._resampler: StreamResampler | None = None
        if not info.resamples_input and sample_rate != info.sample_rate_hz:
            self._resampler = StreamResampler(sample_rate, info.sample_rate_hz)
            self._engine_rate = info.sample_rate_hz
        self._endpointer = Endpointer(options.endpoint, self._frame_s)
        self._backend = info.backend
        self._start_wall = clock()
        self._samples_fed = 0
        self._compute_s = 0.0
        self._seq = 0
        self._segment = 0
        self._shown = ""
        self._segment_has_token = False
        self._finals: list[Final] = []
        self._onsets = OnsetDetector(sample_rate, options.onset)
        self._vad: VadFrontEnd | None = None
        if options.vad.uses_front_end:
            self._vad = VadFrontEnd(options.vad, sample_rate, options.onset)
        self._onset_from_s = 0.0  # a VAD onset of the open segment lies at or after this
        # the silence gate ends the engine's stream at a gap and opens a fresh one after it:
        # where in the input that stream began, what it was fed, what it decoded
        self._stream_from_s = 0.0
        self._stream_samples = 0
        self._stream_decoded_s = 0.0
        self._gap = False
        self._first_token: FirstToken | None = None
        self._revisions = 0
        self._finished = False
        self._closed = False
        # a stop signal came inside an engine call (an engine that runs Python between its
        # C calls: the handler runs there): the engine is left mid-call, so the flush must
        # not call it again (it would wait in the same place) and ends with the last
        # hypothesis it returned
        self._engine_stopped = False
        self._last_hyp = Hypothesis(text="")

    @property
    def block_s(self) -> float:
        """Feed block in seconds: the option, or one chunk's duration."""
        return self.options.block_s or self.recognizer.chunk_s

    @property
    def audio_s(self) -> float:
        """Seconds of real audio fed so far (tail padding excluded)."""
        return self._samples_fed / self.sample_rate

    def run(self, blocks: Iterable[np.ndarray]) -> Iterator[Event]:
        """Feed every block, then finish; yields events as they happen."""
        for block in blocks:
            yield from self.feed(block)
        yield from self.finish()

    def feed(self, samples: np.ndarray) -> list[Event]:
        """Accept one block of mono float32 audio and decode what it makes possible."""
        if self._finished:
            return []
        started = self.clock()
        if self._vad is not None and self._vad.gate is not None:
            self._onsets.feed(samples)
            self._samples_fed += len(samples)
            events = self._feed_gated(self._vad.accept(samples))
        else:
            self.accept(samples)
            events = self._decode_ready()
        self._compute_s += self.clock() - started
        return events

    def finish(self) -> list[Event]:
        """End of input: pad the tail so the last words come out, emit the last final.

        Safe to call twice and after an interruption: what was recognised is flushed once.
        """
        if self._finished:
            return []
        started = self.clock()
        events: list[Event] = []
        if self._vad is not None and self._vad.gate is not None and not self._engine_stopped:
            events = self._feed_gated(self._vad.finish())
        if self.end_input():
            events.extend(self._decode_ready())
            events.extend(self.close())
        self._compute_s += self.clock() - started
        return events

    def accept(self, samples: np.ndarray) -> None:
        """Buffer one block without decoding (the onset detector sees it at once)."""
        if self._finished:
            return
        self._onsets.feed(samples)
        self._samples_fed += len(samples)
        if self._vad is None:
            self._to_engine(samples)
            return
        if self._vad.gate is not None:
            raise BackendError(
                "the VAD gate needs a stream decoded as it is fed (feed/finish), not stepped "
                "by a batch; drop --vad-gate or decode one stream at a time"
            )
        for piece in self._vad.accept(samples):
            self._to_engine(piece.samples)

    def end_input(self) -> bool:
        """Append the tail padding and tell the engine no more audio comes, without decoding.

        False when nothing was ever heard: padding alone must not produce text.
        """
        if self._finished:
            return False
        self._finished = True
        if self._samples_fed == 0 or (self._gap and self._stream_samples == 0):
            return False
        if self._engine_stopped:
            return True  # close() ends with the last hypothesis; the engine is not called
        pad = int(self.options.tail_padding_s * self.sample_rate)
        if pad > 0:
            self._to_engine(np.zeros(pad, dtype=np.float32))
        if self._resampler is not None:
            self.stream.accept(self._engine_rate, self._resampler.flush())
        self.stream.input_finished()
        return True

    def after_step(self) -> list[Event]:
        """What one encoder step changed: a partial, and an endpoint with its final."""
        hyp = self._hypothesis()
        events: list[Event] = []
        if hyp.text != self._shown:
            events.extend(self._partial(hyp))
        self._stream_decoded_s += self.recognizer.chunk_s
        decision = self._endpointer.step(self.recognizer.chunk_s, hyp)
        rule = decision.rule if decision is not None else None
        # the VAD decided speech ended by the audio this step decoded (block-size invariant)
        vad_end = self._vad is not None and self._vad.end_due(
            self._stream_from_s + self._stream_decoded_s
        )
        if rule is None and vad_end and hyp.text:
            rule = "vad"
        if rule is not None:
            if hyp.text:
                events.append(self._event(Endpoint, rule_hint=rule))
                events.append(self._final(hyp))
            self.stream.reset()
            self._endpointer.reset()
        return events

    def close(self) -> list[Event]:
        """After the last step at end of input: the final of the open utterance, if any."""
        if self._closed or self._samples_fed == 0:
            return []
        self._closed = True
        hyp = self._last_hyp if self._engine_stopped else self._hypothesis()
        return [self._final(hyp)] if hyp.text else []

    def abandoned(self) -> list[Event]:
        """The run is ended while the engine hangs (interrupts.py, from the watcher thread):
        the open utterance's final from the engine's last hypothesis, the engine not called."""
        self._engine_stopped = True
        return self.finish() if not self._finished else self.close()

    def engine_stopped(self) -> None:
        """A stop signal came inside a call into this session's engine stream (a batch step):
        it is not called again; the flush ends with the last hypothesis."""
        self._engine_stopped = True

    @property
    def stopped(self) -> bool:
        """Whether a stop signal came inside an engine call (it is not called again)."""
        return self._engine_stopped

    def add_compute(self, seconds: float) -> None:
        """Compute spent on this stream by a batch driver (its share of a batched step)."""
        self._compute_s += seconds

    def _feed_gated(self, pieces: list[Piece]) -> list[Event]:
        """Feed what the gate kept; at the first skipped piece of a gap, end the engine's
        stream there (an endpoint named `vad_gate`); after the gap, open a fresh stream whose
        times are shifted to where it began in the input."""
        events: list[Event] = []
        for piece in pieces:
            if piece.keep:
                if self._gap:
                    self._restart_stream(piece.start_sample / self.sample_rate)
                self._stream_samples += len(piece.samples)
                self._to_engine(piece.samples)
                events.extend(self._decode_ready())
            elif not self._gap:
                events.extend(self._end_stream_at_gap())
        return events

    def _end_stream_at_gap(self) -> list[Event]:
        self._gap = True
        if self._stream_samples == 0:
            return []
        self._stream_samples = 0  # what follows goes to a fresh stream, or nowhere
        # the stream already had the gate's hangover of silence after the speech: the padding
        # only makes up the rest of the usual tail
        hangover_s = self._vad.options.min_silence_s if self._vad is not None else 0.0
        pad = int(max(0.0, self.options.tail_padding_s - hangover_s) * self.sample_rate)
        if pad > 0:
            self._to_engine(np.zeros(pad, dtype=np.float32))
        if self._resampler is not None:
            self.stream.accept(self._engine_rate, self._resampler.flush())
        self.stream.input_finished()
        events = self._decode_ready()
        hyp = self._hypothesis()
        if hyp.text:
            events.append(self._event(Endpoint, rule_hint="vad_gate"))
            events.append(self._final(hyp))
        return events

    def _restart_stream(self, from_s: float) -> None:
        self.stream = self.recognizer.create_stream()
        if self._resampler is not None:
            self._resampler = StreamResampler(self.sample_rate, self._engine_rate)
        self._endpointer.reset()
        self._stream_from_s = from_s
        self._stream_samples = 0
        self._stream_decoded_s = 0.0
        self._gap = False

    def _to_engine(self, samples: np.ndarray) -> None:
        if self._resampler is not None:
            samples = self._resampler(samples)
            if len(samples) == 0:
                return
        self.stream.accept(self._engine_rate, samples)

    def summary(self) -> StreamSummary:
        """Totals for the stream so far."""
        return StreamSummary(
            source=self.source_name,
            audio_s=self.audio_s,
            compute_s=self._compute_s,
            wall_s=self.clock() - self._start_wall,
            text=" ".join(f.text for f in self._finals),
            finals=tuple(self._finals),
            first_token_latency_s=self._first_token.latency_s if self._first_token else None,
            first_token_wall_latency_s=(
                self._first_token.wall_latency_s if self._first_token else None
            ),
            revisions=self._revisions,
            skipped_s=round(self._vad.skipped_s, 6) if self._vad is not None else 0.0,
        )

    def _hypothesis(self) -> Hypothesis:
        """The backend's hypothesis, checked where it is new (see check_hypothesis)."""
        try:
            hyp = self.stream.hypothesis()
        except KeyboardInterrupt:
            self._engine_stopped = True
            raise
        check_hypothesis(hyp, self._backend)
        if self._stream_from_s:
            shift = self._stream_from_s  # a stream the gate opened after a gap
            hyp = dataclasses.replace(
                hyp,
                token_times_s=tuple(round(t + shift, 6) for t in hyp.token_times_s),
                segment_start_s=hyp.segment_start_s + shift,
            )
        self._last_hyp = hyp
        return hyp

    def _decode_ready(self) -> list[Event]:
        return step_alone(self)

    def _partial(self, hyp: Hypothesis) -> list[Event]:
        events: list[Event] = []
        if hyp.text and not self._segment_has_token:
            self._segment_has_token = True
            first = self._first_token_event(hyp)
            if self._first_token is None:
                self._first_token = first
            events.append(first)
        if self._shown and not hyp.text.startswith(self._shown):
            self._revisions += 1
        self._shown = hyp.text
        events.append(
            self._event(Partial, text=hyp.text, tokens=hyp.tokens, token_times_s=hyp.token_times_s)
        )
        return events

    def _first_token_event(self, hyp: Hypothesis) -> FirstToken:
        """First text of a segment, timed from the detected onset; never a negative latency.

        Without a detected onset the engine's segment start stands in; when that start lies
        after the audio fed (a segment opened inside the tail padding) the latency is 0 and
        the event says so, rather than reporting text before its own onset.
        """
        detected = self._onsets.onset_s
        if self._vad is not None:
            detected = self._vad.onset_after(self._onset_from_s, self.audio_s)
        elif self.options.vad.detector == "off":
            detected = None
        onset, source = first_token_onset(detected, hyp.segment_start_s, self.audio_s)
        if source == "detected" and self._vad is not None:
            source = self._vad.onset_source
        wall_latency = None
        if self.options.paced:
            wall_latency = round(max(0.0, self.clock() - self._start_wall - onset), 6)
        return self._event(
            FirstToken,
            text=hyp.text,
            onset_s=min(round(onset, 3), round(self.audio_s, 6)),
            latency_s=round(max(0.0, self.audio_s - onset), 6),
            wall_latency_s=wall_latency,
            onset_source=source,
        )

    def _final(self, hyp: Hypothesis) -> Final:
        start = hyp.token_times_s[0] if hyp.token_times_s else hyp.segment_start_s
        end = self.audio_s
        if hyp.token_times_s:
            # a token is stamped with its encoder output frame; the segment ends with that
            # frame, so consecutive segments never overlap
            end = min(end, hyp.token_times_s[-1] + self._frame_s)
        final = self._event(
            Final,
            text=hyp.text,
            start_s=min(round(start, 3), self.audio_s),
            end_s=min(round(max(end, start), 3), self.audio_s),
            tokens=tuple(hyp.tokens),  # once per segment: a final is a plain record
            token_times_s=tuple(hyp.token_times_s),
        )
        self._finals.append(final)
        self._segment += 1
        self._shown = ""
        self._last_hyp = Hypothesis(text="")
        self._segment_has_token = False
        self._onsets.rearm(self.audio_s)
        self._onset_from_s = final.end_s
        return final

    def _event(self, cls: type[EventT], **fields: object) -> EventT:
        self._seq += 1
        return cls(
            seq=self._seq,
            audio_s=round(self.audio_s, 6),
            wall_s=round(self.clock() - self._start_wall, 6),
            segment=self._segment,
            **fields,
        )


def first_token_onset(
    detected_s: float | None, segment_start_s: float, audio_s: float
) -> tuple[float, str]:
    """Where a first-token latency is measured from, and why (FirstToken.onset_source)."""
    if detected_s is not None and detected_s <= audio_s:
        return detected_s, "detected"
    if segment_start_s <= audio_s:
        return segment_start_s, "segment_start"
    return audio_s, "text_before_onset"


def check_hypothesis(hyp: Hypothesis, backend: str) -> None:
    """Refuse what a backend must never return: text or tokens that are not strings, token
    times that are not finite, negative or decreasing, a non-finite segment start.

    Only the tokens after `hyp.unchanged_tokens` (and the last unchanged one, for order) are
    looked at, so the check costs what the step added. Raises BackendError naming `backend`.
    """

    def bad(what: str) -> BackendError:
        return BackendError(
            f"backend {backend!r} returned {what}; this is a bug in the backend, not in the "
            "audio (report it to the backend's authors)"
        )

    if not isinstance(hyp.text, str):
        raise bad(f"text of type {type(hyp.text).__name__}, not str")
    tokens, times = hyp.tokens, hyp.token_times_s
    sequences = (tuple, list, Prefix)
    if not isinstance(tokens, sequences) or not isinstance(times, sequences):
        raise bad("tokens or token times that are not sequences")
    unchanged = hyp.unchanged_tokens
    if not isinstance(unchanged, int) or not 0 <= unchanged <= len(tokens):
        raise bad(f"unchanged_tokens {unchanged!r} for {len(tokens)} tokens")
    for index in range(unchanged, len(tokens)):
        if not isinstance(tokens[index], str):
            raise bad(f"token {index} of type {type(tokens[index]).__name__}, not str")
    first = max(0, min(unchanged, len(times)) - 1)
    previous = 0.0
    for index in range(first, len(times)):
        value = times[index]
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise bad(f"token time {index} of type {type(value).__name__}, not float")
        if not math.isfinite(value) or value < 0:
            raise bad(f"token time {index} = {value} s (times must be finite and >= 0)")
        if value < previous:
            raise bad(
                f"token time {index} = {value} s after {previous} s (times must not decrease)"
            )
        previous = value
    start = hyp.segment_start_s
    if isinstance(start, bool) or not isinstance(start, (int, float)) or not math.isfinite(start):
        raise bad(f"segment start {start!r} (must be a finite number of seconds)")
