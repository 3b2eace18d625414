"""Run dataset utterances through the streaming loop, one at a time or N in batches.

Sequential runs go through the one driver (driver.py) exactly as `streamasr file` does.
Batched runs (`--streams N`) keep N sessions open and let sherpa-onnx run one encoder step
over every stream that has a chunk ready (`decode_streams`). Each session still sees, per
stream, the very same sequence of accept / step / endpoint check / reset as in a sequential
run. With fp32 models the two give identical results. int8 models quantise activations
dynamically, with one scale per tensor, so the other streams in a batch nudge a stream's
numbers: the text has stayed the same on every set tried, but a token can be stamped one
output frame (40 ms) later (`scripts/batch_timestamps.py` shows it on bare sherpa-onnx).
Every `--streams` run reports both comparisons.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from streamasr.audio import FileSource
from streamasr.backends.base import Recognizer
from streamasr.bench.datasets import Utterance
from streamasr.bench.metrics import ErrorCounts, Stability, Timing, score, stability, timing
from streamasr.bench.span import SpanDetector
from streamasr.errors import InputError, UsageError
from streamasr.session.batch import step_all
from streamasr.session.driver import Collected, Pacing, drive
from streamasr.session.events import Event, Final
from streamasr.session.stream import StreamOptions, StreamSession

log = logging.getLogger("streamasr")

WARMUP_S = 1.0


@dataclass(frozen=True)
class RunOptions:
    """How utterances are fed and scored."""

    stream: StreamOptions = StreamOptions()
    metric: str = "wer"
    realtime: bool = False


@dataclass(frozen=True)
class UtteranceRecord:
    """Everything measured for one utterance; one entry of results.json."""

    id: str
    audio: str
    reference: str
    hypothesis: str
    audio_s: float
    compute_s: float
    rtf: float
    counts: ErrorCounts
    timing: Timing
    stability: Stability
    speech_onset_s: float | None
    speech_end_s: float | None
    span_source: str  # "dataset" or "detected"
    finals: tuple[dict[str, Any], ...] = ()
    error: str = ""  # why the utterance could not be run (then nothing else is meaningful)

    @property
    def failed(self) -> bool:
        """True when the audio could not be read."""
        return bool(self.error)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        data = asdict(self)
        data["counts"]["errors"] = self.counts.errors
        data["counts"]["rate_pct"] = self.counts.rate_pct
        data["stability"]["revised_words"] = list(self.stability.revised_words)
        data["finals"] = list(self.finals)
        return data

    def algorithmic(self) -> dict[str, Any]:
        """The fields that do not depend on compute speed: equal across batched/sequential."""
        return {
            "hypothesis": self.hypothesis,
            "finals": self.finals,
            "counts": self.counts,
            "first_token_ms": self.timing.first_token_ms,
            "final_ms": self.timing.final_ms,
            "final_cause": self.timing.final_cause,
            "complete_ms": self.timing.complete_ms,
            "stability": self.stability,
            "error": self.error,
        }

    def text(self) -> tuple[str, ...]:
        """The committed texts alone: what batching must never change."""
        return (self.hypothesis, *(f["text"] for f in self.finals), self.error)


def failed_record(utt: Utterance, error: str, metric: str) -> UtteranceRecord:
    """A record for audio that could not be read: the reference counts as all deleted."""
    ref = score(utt.text, "", metric)
    return UtteranceRecord(
        utt.id,
        str(utt.audio),
        utt.text,
        "",
        0.0,
        0.0,
        0.0,
        ref,
        Timing(),
        Stability(),
        utt.speech_onset_s,
        utt.speech_end_s,
        "dataset",
        (),
        error,
    )


def build_record(
    utt: Utterance,
    events: Sequence[Event],
    audio_s: float,
    compute_s: float,
    span: SpanDetector,
    metric: str,
    realtime: bool = False,
) -> UtteranceRecord:
    """Score one finished stream against its reference.

    Wall-clock latencies are kept only under real-time pacing: without it the audio arrives
    faster than live and a wall-clock "latency" would mean nothing (it is often negative).
    """
    finals = [e for e in events if isinstance(e, Final)]
    hypothesis = " ".join(f.text for f in finals)
    from_dataset = utt.speech_onset_s is not None and utt.speech_end_s is not None
    onset = utt.speech_onset_s if utt.speech_onset_s is not None else span.onset_s
    end = utt.speech_end_s if utt.speech_end_s is not None else span.end_s
    return UtteranceRecord(
        id=utt.id,
        audio=str(utt.audio),
        reference=utt.text,
        hypothesis=hypothesis,
        audio_s=round(audio_s, 6),
        compute_s=round(compute_s, 6),
        rtf=round(compute_s / audio_s, 6) if audio_s > 0 else 0.0,
        counts=score(utt.text, hypothesis, metric),
        timing=_timing(events, onset, end, realtime),
        stability=stability(events),
        speech_onset_s=onset,
        speech_end_s=end,
        span_source="dataset" if from_dataset else "detected",
        finals=tuple(
            {"text": f.text, "start_s": f.start_s, "end_s": f.end_s, "audio_s": f.audio_s}
            for f in finals
        ),
    )


def _timing(
    events: Sequence[Event], onset: float | None, end: float | None, realtime: bool
) -> Timing:
    found = timing(events, onset, end)
    if realtime:
        return found
    return replace(found, first_token_wall_ms=None, final_wall_ms=None)


def warm_up(recognizer: Recognizer, sample_rate: int = 16000) -> None:
    """Decode a second of quiet noise once, so first-use costs do not land in the timings."""
    noise = np.random.default_rng(0).normal(0, 0.01, int(WARMUP_S * sample_rate))
    session = StreamSession(recognizer, sample_rate, "warm-up")
    drive(session, [noise.astype(np.float32)], Collected())


def run_utterance(
    recognizer: Recognizer,
    utt: Utterance,
    options: RunOptions,
    clock: Callable[[], float] = time.perf_counter,
    sleep: Callable[[float], None] = time.sleep,
) -> UtteranceRecord:
    """Stream one utterance as `streamasr file` would; unreadable audio gives a failed record."""
    try:
        source = FileSource(str(utt.audio))
    except InputError as exc:
        return failed_record(utt, str(exc), options.metric)
    try:
        session = StreamSession(recognizer, source.sample_rate, utt.id, options.stream, clock)
        span = SpanDetector(source.sample_rate, options.stream.onset)
        pacing = Pacing(clock, sleep) if options.realtime else None
        collected = Collected()
        try:
            summary = drive(
                session, source.blocks(session.block_s), collected, pacing=pacing,
                after_block=span.feed,
            )
        except InputError as exc:
            return failed_record(utt, str(exc), options.metric)
    finally:
        source.close()
    return build_record(
        utt, collected.events, summary.audio_s, summary.compute_s, span, options.metric,
        options.realtime,
    )


def run_sequential(
    recognizer: Recognizer,
    utterances: Sequence[Utterance],
    options: RunOptions,
    on_done: Callable[[UtteranceRecord], None] = lambda record: None,
    clock: Callable[[], float] = time.perf_counter,
    sleep: Callable[[float], None] = time.sleep,
) -> list[UtteranceRecord]:
    """One stream at a time, in dataset order."""
    records = []
    for utt in utterances:
        record = run_utterance(recognizer, utt, options, clock, sleep)
        records.append(record)
        on_done(record)
    return records


@dataclass
class _Slot:
    utt: Utterance
    source: FileSource
    session: StreamSession
    blocks: Iterator[np.ndarray]
    span: SpanDetector
    events: list[Event] = field(default_factory=list)
    done: bool = False
    error: str = ""


def run_batched(
    recognizer: Recognizer,
    utterances: Sequence[Utterance],
    options: RunOptions,
    streams: int,
    on_done: Callable[[UtteranceRecord], None] = lambda record: None,
    clock: Callable[[], float] = time.perf_counter,
) -> list[UtteranceRecord]:
    """Decode up to `streams` utterances at once with the recognizer's batched step (not
    the driver, whose loop steps one stream: the server's scheduler says why).

    Every stream keeps its own session; only encoder steps are shared (streamasr/session/batch.py).
    Records come back in dataset order; each carries its share of the batched steps' time.
    """
    if streams < 1:
        raise UsageError(f"--streams must be at least 1, got {streams}")
    if options.realtime:
        raise UsageError(
            "--realtime paces one live stream; run it without --streams (or with --streams 1)"
        )
    pending = list(enumerate(utterances))[::-1]
    results: dict[int, UtteranceRecord] = {}
    active: dict[int, _Slot] = {}
    while pending or active:
        while pending and len(active) < streams:
            index, utt = pending.pop()
            slot = _open_slot(recognizer, utt, options)
            if isinstance(slot, UtteranceRecord):
                results[index] = slot
                on_done(slot)
            else:
                active[index] = slot
        for slot in active.values():
            _feed_next(slot)
        slots = [s for s in active.values() if not s.error]
        for slot, events in zip(slots, step_all(recognizer, [s.session for s in slots], clock),
                                strict=True):
            slot.events.extend(events)
        for index in [i for i, s in active.items() if s.done]:
            slot = active.pop(index)
            record = _close_slot(slot, options)
            results[index] = record
            on_done(record)
    return [results[i] for i in range(len(utterances))]


def _open_slot(
    recognizer: Recognizer, utt: Utterance, options: RunOptions
) -> _Slot | UtteranceRecord:
    try:
        source = FileSource(str(utt.audio))
    except InputError as exc:
        return failed_record(utt, str(exc), options.metric)
    session = StreamSession(recognizer, source.sample_rate, utt.id, options.stream)
    blocks = source.blocks(session.block_s)
    span = SpanDetector(source.sample_rate, options.stream.onset)
    return _Slot(utt, source, session, blocks, span)


def _feed_next(slot: _Slot) -> None:
    """Give one slot its next block, or end its input (tail padding) when the file is over."""
    try:
        block = next(slot.blocks, None)
    except InputError as exc:
        slot.done, slot.error = True, str(exc)
        return
    if block is not None:
        slot.span.feed(block)
        slot.session.accept(block)
        return
    slot.done = True
    slot.session.end_input()


def _close_slot(slot: _Slot, options: RunOptions) -> UtteranceRecord:
    slot.source.close()
    if slot.error:
        return failed_record(slot.utt, slot.error, options.metric)
    slot.events.extend(slot.session.close())
    summary = slot.session.summary()
    return build_record(
        slot.utt, slot.events, summary.audio_s, summary.compute_s, slot.span, options.metric
    )
