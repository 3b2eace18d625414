"""The one streaming loop: feed blocks, decode chunk by chunk, turn hypotheses into events.

Used by `file`, `mic` and `bench` alike. The recognizer and the clock come in as arguments,
so tests can drive the loop with a fake clock and get exact timings.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import numpy as np

from streamasr.backends.base import Hypothesis, Recognizer, RecognizerStream
from streamasr.events import Endpoint, Event, Final, FirstToken, Partial, StreamSummary
from streamasr.onset import OnsetDetector, OnsetOptions

DEFAULT_TAIL_PADDING_S = 0.66
OUTPUT_FRAME_S = 0.04  # streaming Zipformer output rate: 25 Hz


@dataclass(frozen=True)
class StreamOptions:
    """How audio is fed: block size (None = one chunk) and padding at the end of input.

    `paced` says the audio arrives at live speed (`--realtime`, a microphone): only then is
    a wall-clock latency the user's wait, so only then is it reported.
    """

    block_s: float | None = None
    tail_padding_s: float = DEFAULT_TAIL_PADDING_S
    onset: OnsetOptions = OnsetOptions()
    paced: bool = False


class StreamSession:
    """Feeds one audio stream into one recognizer stream and reports what a user would see.

    Endpoints are checked after every encoder step (not after every feed block), so the
    segmentation and the text do not depend on the feed block size.
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
        self._stream: RecognizerStream = recognizer.create_stream()
        self._start_wall = clock()
        self._samples_fed = 0
        self._compute_s = 0.0
        self._seq = 0
        self._segment = 0
        self._shown = ""
        self._segment_has_token = False
        self._finals: list[Final] = []
        self._onsets = OnsetDetector(sample_rate, options.onset)
        self._first_token: FirstToken | None = None
        self._revisions = 0
        self._finished = False

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
        self._onsets.feed(samples)
        self._stream.accept(self.sample_rate, samples)
        self._samples_fed += len(samples)
        events = self._decode_ready()
        self._compute_s += self.clock() - started
        return events

    def finish(self) -> list[Event]:
        """End of input: pad the tail so the last words come out, emit the last final.

        Safe to call twice and after an interruption: what was recognised is flushed once.
        """
        if self._finished:
            return []
        self._finished = True
        if self._samples_fed == 0:
            return []  # nothing was heard: padding alone must not produce text
        started = self.clock()
        pad = int(self.options.tail_padding_s * self.sample_rate)
        if pad > 0:
            self._stream.accept(self.sample_rate, np.zeros(pad, dtype=np.float32))
        self._stream.input_finished()
        events = self._decode_ready()
        hyp = self._stream.hypothesis()
        if hyp.text:
            events.append(self._final(hyp))
        self._compute_s += self.clock() - started
        return events

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
        )

    def _decode_ready(self) -> list[Event]:
        events: list[Event] = []
        while self._stream.decode_step():
            text = self._stream.text()
            if text != self._shown:
                events.extend(self._partial(self._stream.hypothesis()))
            if self._stream.is_endpoint():
                if text:
                    events.append(self._event(Endpoint))
                    events.append(self._final(self._stream.hypothesis()))
                self._stream.reset()
        return events

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
            self._event(
                Partial, text=hyp.text, tokens=hyp.tokens, token_times_s=hyp.token_times_s
            )
        )
        return events

    def _first_token_event(self, hyp: Hypothesis) -> FirstToken:
        """First text of a segment, timed from the detected onset; never a negative latency.

        Without a detected onset the engine's segment start stands in; when that start lies
        after the audio fed (a segment opened inside the tail padding) the latency is 0 and
        the event says so, rather than reporting text before its own onset.
        """
        onset, source = first_token_onset(self._onsets.onset_s, hyp.segment_start_s, self.audio_s)
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
            end = min(end, hyp.token_times_s[-1] + OUTPUT_FRAME_S)
        final = self._event(
            Final,
            text=hyp.text,
            start_s=min(round(start, 3), self.audio_s),
            end_s=min(round(max(end, start), 3), self.audio_s),
            tokens=hyp.tokens,
            token_times_s=hyp.token_times_s,
        )
        self._finals.append(final)
        self._segment += 1
        self._shown = ""
        self._segment_has_token = False
        self._onsets.rearm(self.audio_s)
        return final

    def _event(self, cls: type[Event], **fields: object) -> Event:
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
