"""One engine, many streams: the scheduler of `streamasr serve`.

Each utterance of each connection is a StreamSession. Connections hand their audio to the
scheduler, which cuts it into feed blocks: by default (`per_message`, or a session's
`block_ms: "message"`) each message is a block as it comes, cut at the server's feed block
(100 ms), so a live client's last short message is decoded when it arrives, not at its end;
with fixed blocks (--block-ms, or a session's `block_ms`), exactly as `streamasr file` does.
The scheduler works in rounds, as sherpa-onnx's own server does: each round takes the
utterances with an engine step due (at most `max_batch`, first come first stepped: an ended
input jumping the queue starved the others once the server fell behind; a round with an
ended input waits for no batch to fill, others up to `max_wait_ms`), runs one batched
engine step over them, and puts them back at the end of the queue. Only that engine call
runs on the single worker thread; the sessions' Python (feeding blocks, hypotheses,
endpoints, events, their encoding) runs on the event loop. So the event loop never waits on the
engine, the worker never waits for the event loop's Python (the engine lets go of the GIL),
a stream is never touched from two threads at once (nothing feeds an utterance while its
step runs), a round is one engine step long whatever any utterance's backlog (a new or a
punctual utterance, or an end, waits for at most the round in flight), and every session's
events are those `streamasr file` prints for the same audio and feed blocks (`--block-ms M`
for M-ms messages), with the same `audio_s` (int8
models quantise dynamically: there a batch can change a decode; docs/performance.md).

Blocks that only buffer audio never cost a round: an utterance is fed block by block, on the
event loop as its audio comes, until its stream has a chunk ready (where the engine can say
so: the stream's `ready()`); only then does it wait for a round, and after its step the next
block is fed (the tail padding after the last one, once the input ended) only when nothing
more is ready: `streamasr file`'s order, so its events. With 100 ms messages and a 320 ms
chunk that is one round per engine step, not one per message.

Two pacings (`--schedule`, session/batch.py's StepClock). `ready` (the default): an
utterance joins the queue as soon as a step is due, so streams at different phases meet
in one batch only by chance and a round is often one or two streams, each paying a whole
engine call.
`aligned`: an utterance whose step came due with newly received audio is held until the
next tick of one step clock of the model's chunk period, and every held utterance steps in
that tick's round, so a round is as large as the number of live streams and the engine's
cost per stream falls (docs/serve.md, "Aligned stepping"). The wait is below one chunk,
counted in every latency the clients see and reported per utterance (`align_wait_ms` in its
summary). What is behind is not held: an ended input, or one with a chunk or more queued
(a client sending faster than real time) steps in the next round, as under `ready`.

Events leave as event objects (session/events.py; the summary last), finished (punctuation,
casing) and handed to the utterance's `deliver` callback on the event loop; the transport
encodes them (server/wire.py: the JSON lines of `streamasr file --format jsonl`).

Why not the one driver (driver.py): `drive` owns its loop and pulls one source's blocks, one
session at a time, so every step would be one stream's. Here audio is pushed by the
connections and the steps are shared: a batch of sessions advances together through one
`decode_batch`. So the scheduler uses the stepping core (batch.py), one step per round: the
engine call (`engine_step`) on the worker thread, what it changed (`after_engine_step`) on
the event loop; what it keeps is its pacing (which sessions a round takes, and when).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import functools
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import numpy as np

from streamasr.backends.base import Recognizer
from streamasr.output.finishing import NONE, Finishing
from streamasr.server.metrics import Metrics
from streamasr.server.protocol import CLOSE_INVALID, MESSAGE, ProtocolError, SessionConfig
from streamasr.server.utterance import Delivered, Utterance
from streamasr.session.batch import StepClock, after_engine_step, engine_step
from streamasr.session.events import Event, FirstToken
from streamasr.session.stream import StreamOptions, StreamSession

log = logging.getLogger("streamasr")

#: The longest fed audio waits to be added to the audio counter (seconds).
FED_COUNT_S = 0.25

#: A round in flight: its utterances and the engine call's (stepped, seconds) to come.
_Flight = tuple[list[Utterance], "asyncio.Future[tuple[list[bool], float]]"]


class Scheduler:
    """Batches ready utterances through one recognizer, one engine step per round."""

    def __init__(
        self,
        recognizer: Recognizer,
        options: StreamOptions,
        metrics: Metrics,
        max_batch: int,
        max_wait_s: float,
        clock: Callable[[], float] = time.perf_counter,
        per_message: bool = False,
        finishing: Finishing = NONE,
        schedule: str = "aligned",
    ) -> None:
        """`per_message`: sessions that do not say their own feed block get one per message;
        `finishing`: the server's default finishing steps (`serve --punctuate/--sentence-case`;
        a punctuation model here also serves sessions that ask for one); `schedule`:
        `aligned` or `ready` (the module's docstring; a model without a fixed chunk is
        stepped `ready`)."""
        self.recognizer = recognizer
        self.options = options
        self.metrics = metrics
        self.max_batch = max_batch
        self.max_wait_s = max_wait_s
        self.clock = clock
        self.per_message = per_message
        self.finishing = finishing
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="streamasr-engine"
        )
        self._step_started_s: float | None = None  # time.monotonic() of the step in flight
        self._ready: OrderedDict[Utterance, None] = OrderedDict()
        self._held: OrderedDict[Utterance, None] = OrderedDict()  # waiting for the tick
        self._tick_s: float | None = None  # the tick the held utterances wait for
        self.schedule = schedule
        self._origin_s = clock()
        self._wake = asyncio.Event()
        self._fed_s = 0.0  # audio fed since the audio counter was last added to
        self._fed_timer: asyncio.TimerHandle | None = None

    async def open(
        self,
        config: SessionConfig,
        deliver: Callable[[list[Delivered]], None],
        fail: Callable[[str], None],
    ) -> Utterance:
        """A new utterance (its engine stream is made on the worker thread)."""
        options = config.stream_options(self.options)
        finishing = self.session_finishing(config)

        def make() -> StreamSession:
            return StreamSession(self.recognizer, config.sample_rate, config.source, options)

        session = await asyncio.get_running_loop().run_in_executor(self._executor, make)
        block = max(1, round(session.block_s * config.sample_rate))
        per_message = config.block_ms == MESSAGE or (config.block_ms is None and self.per_message)
        return Utterance(session, config, deliver, fail, block, per_message, finishing)

    def session_finishing(self, config: SessionConfig) -> Finishing:
        """The server's finishing steps with the session's own choices applied; a session
        that asks for punctuation from a server without a model is refused (1007)."""
        default = self.finishing
        punctuate = default.punctuate
        if config.punctuate is True and punctuate is None:
            raise ProtocolError(
                CLOSE_INVALID,
                "config: punctuate: this server has no punctuation model (serve --punctuate "
                "MODEL); drop the key or ask for sentence_case",
            )
        if config.punctuate is False:
            punctuate = None
        sentence_case = config.sentence_case
        if sentence_case is None:
            sentence_case = default.sentence_case
        return Finishing(punctuate, sentence_case)

    def add_audio(self, utterance: Utterance, samples: np.ndarray) -> None:
        """Queue mono float32 samples; feed whole blocks until a step is due."""
        if utterance.ending or utterance.discarded or len(samples) == 0:
            return
        size = utterance.block_samples
        if utterance.per_message:  # the message is a block (a long one is cut)
            for start in range(0, len(samples), size):
                utterance.blocks.append(samples[start : start + size])
        else:
            joined = (
                np.concatenate([utterance.pending, samples]) if len(utterance.pending) else samples
            )
            whole = len(joined) // size * size
            for start in range(0, whole, size):
                utterance.blocks.append(joined[start : start + size])
            utterance.pending = joined[whole:]
        utterance.queued_samples += len(samples)
        if utterance.blocks:
            utterance.drained.clear()
        if (
            not utterance.in_round
            and utterance not in self._ready
            and utterance not in self._held
            and self._prepare(utterance)
        ):
            self._mark_due(utterance, hold=not self._behind(utterance))

    def _prepare(self, utterance: Utterance) -> bool:
        """On the event loop: feed blocks (then the tail padding, once the input ended) until
        a step may be due; True when one is. Feeding the next block only once the stream has
        nothing ready is `streamasr file`'s order, so the events are its events.

        Where a stream cannot say it is ready, True means "try": the round's engine call
        tells whether it stepped.
        """
        session = utterance.session
        ready = getattr(session.stream, "ready", None)
        while True:
            if utterance.check:
                if ready is None or ready():
                    return True
                utterance.check = False
            if utterance.blocks:
                block = utterance.blocks.popleft()
                utterance.queued_samples -= len(block)
                session.accept(block)
                self._count_fed(len(block) / utterance.config.sample_rate)
                utterance.check = True
                if not utterance.blocks:
                    utterance.drained.set()
                continue
            if utterance.ending and not utterance.padded:
                utterance.padded = True
                utterance.check = session.end_input()
                continue
            return False

    def _count_fed(self, seconds: float) -> None:
        """Add fed audio to the audio counter within FED_COUNT_S, not per block: with
        --workers each counter increment is a write to a shared file (a block every 100 ms
        of every session). An utterance's close adds what is pending at once."""
        self._fed_s += seconds
        if self._fed_timer is None:
            self._fed_timer = asyncio.get_running_loop().call_later(FED_COUNT_S, self._add_fed)

    def _add_fed(self) -> None:
        if self._fed_timer is not None:
            self._fed_timer.cancel()
            self._fed_timer = None
        if self._fed_s:
            self.metrics.audio_s.inc(self._fed_s)
            self._fed_s = 0.0

    def end(self, utterance: Utterance) -> asyncio.Future[None]:
        """End of input: the rest is fed, the tail padded; the future ends after the summary."""
        loop = asyncio.get_running_loop()
        if utterance.done is None:
            utterance.done = loop.create_future()
        if not utterance.ending and not utterance.discarded:
            utterance.ending = True
            if len(utterance.pending):
                utterance.blocks.append(utterance.pending)
                utterance.pending = np.zeros(0, np.float32)
            if not utterance.in_round:
                self._held.pop(utterance, None)
                self._mark_due(utterance)  # its round waits for no batch nor tick
        return utterance.done

    def discard(self, utterance: Utterance) -> None:
        """The connection went away: forget the utterance (a step in flight is ignored)."""
        utterance.discarded = True
        self._ready.pop(utterance, None)
        self._held.pop(utterance, None)
        utterance.drained.set()
        if utterance.done is not None and not utterance.done.done():
            utterance.done.set_result(None)

    @functools.cached_property
    def _step_clock(self) -> StepClock | None:
        """Aligned stepping's clock (None: `ready`, or a model without a fixed chunk)."""
        chunk_s = self.recognizer.chunk_s
        if self.schedule != "aligned" or chunk_s <= 0:
            return None
        return StepClock(self._origin_s, chunk_s)

    def _mark_due(self, utterance: Utterance, hold: bool = False) -> None:
        """Queue an utterance whose step is due: at the back of the next round's queue, or
        (`hold`, aligned stepping) with the others waiting for the next tick."""
        now = self.clock()
        if utterance.due_at_s is None:
            utterance.due_at_s = now
        if hold and self._step_clock is not None:
            if not self._held:
                self._tick_s = self._step_clock.next_tick_s(now)
            self._held[utterance] = None
        else:
            self._ready[utterance] = None
        self._wake.set()

    def _behind(self, utterance: Utterance) -> bool:
        """Not held for a tick: the input ended, or a chunk or more waits unfed (audio
        sent faster than real time; holding it would slow it down to real time)."""
        chunk = self.recognizer.chunk_s * utterance.config.sample_rate
        return utterance.ending or utterance.queued_samples >= chunk

    def _tick_due(self) -> bool:
        """The held utterances' tick has come."""
        return bool(self._held) and self._tick_s is not None and self.clock() >= self._tick_s

    async def _until_due(self) -> None:
        """Idle: wait until a round may start. Under `ready`, for a step to come due and
        then (no input ended) up to max_wait for a batch to fill; under `aligned`, for an
        utterance that is not held, or the held ones' tick."""
        while not self._ready:
            if self._held and self._tick_s is not None:
                delay = self._tick_s - self.clock()
                if delay <= 0:
                    return
                try:
                    await asyncio.wait_for(self._wake.wait(), delay)
                except TimeoutError:
                    return
            else:
                await self._wake.wait()
                if (
                    self._step_clock is None
                    and len(self._ready) < self.max_batch
                    and self.max_wait_s > 0
                    and not any(utterance.ending for utterance in self._ready)
                ):
                    await asyncio.sleep(self.max_wait_s)
            self._wake.clear()

    async def run(self) -> None:
        """The scheduler task: runs until cancelled.

        Pipelined as sherpa-onnx's server is: as soon as a round's engine call returns, the
        next round (whoever became due meanwhile) goes to the worker thread, and only then
        are the finished round's events made on the event loop, so the engine does not sit
        idle while they are (at 32 streams a round, several ms of a step of tens). A stream
        of the finished round joins the queue again after its events, at the back.

        Aligned stepping is not pipelined: the next round starts after the events, so the
        streams just stepped are in it if they are due (by then, or behind). A server that
        falls behind then steps every stream in one batch instead of splitting them into two
        batches taking turns, and the engine's cost per stream stays at its lowest.
        """
        flight: _Flight | None = None
        while True:
            if flight is None:
                await self._until_due()
                flight = self._launch()
                if flight is None:
                    continue
            batch, running = flight
            try:
                stepped, elapsed = await running
            except Exception as exc:  # an engine failure ends the streams it stepped
                self._failed(batch, exc)
                flight = None
                continue
            # ready: the next round steps while this one's events are made
            flight = self._launch() if self._step_clock is None else None
            try:
                self._finish(batch, stepped, elapsed)
            except Exception as exc:
                self._failed(batch, exc)

    def _launch(self) -> _Flight | None:
        """Take a round and start its engine call on the worker thread (None: nothing due)."""
        batch = self._take_round()
        if not batch:
            return None
        self.metrics.batch_size.observe(len(batch))
        streams = [utterance.session.stream for utterance in batch]
        # _prepare took each stream that can say whether it is ready only once it said so
        checked = all(hasattr(utterance.session.stream, "ready") for utterance in batch)
        running = asyncio.get_running_loop().run_in_executor(
            self._executor, self._decode, streams, checked
        )
        return batch, running

    def _failed(self, batch: list[Utterance], exc: Exception) -> None:
        log.exception("engine step failed", exc_info=exc)
        for utterance in batch:
            utterance.in_round = False
            if not utterance.discarded:
                utterance.fail(f"engine step failed: {exc}")

    def _take_round(self) -> list[Utterance]:
        """Up to max_batch utterances with a step due, in queue order (the held ones join
        at the back once their tick has come); those with nothing due leave the queue, an
        ended one with its last final. Each one's wait since its step came due is noted."""
        if self._tick_due():
            self._ready.update(self._held)
            self._held.clear()
            self._tick_s = None
        batch: list[Utterance] = []
        while self._ready and len(batch) < self.max_batch:
            utterance, _ = self._ready.popitem(last=False)
            if utterance.discarded or utterance.ended:
                continue
            if self._due_or_closed(utterance):
                utterance.in_round = True
                batch.append(utterance)
        now = self.clock()
        for utterance in batch:
            if utterance.due_at_s is not None:
                waited = max(0.0, now - utterance.due_at_s)
                utterance.waits.add(waited)
                self.metrics.align_wait.observe(waited)
                utterance.due_at_s = None
        return batch

    def _due_or_closed(self, utterance: Utterance) -> bool:
        """Feed the utterance on (_prepare): True when a step is due; an ended one with
        nothing left to step is closed, its last final sent."""
        if self._prepare(utterance):
            return True
        if utterance.padded:
            self._close(utterance)
        return False

    def _finish(self, batch: list[Utterance], stepped: list[bool], elapsed: float) -> None:
        """On the event loop, what each step of a round changed; then each utterance is fed
        on at once (as sherpa-onnx's server's connections are): one with a step due goes to
        the end of the queue, one waiting for audio leaves it (its next message feeds it and
        queues it when due), one with nothing left after its end is closed, its last final
        sent now. Left in the queue until a round came to them, they were fed, and closed,
        only a whole queue later once the server was behind."""
        self.metrics.compute_s.inc(elapsed)
        sessions = [None if u.discarded else u.session for u in batch]
        made = after_engine_step(sessions, stepped, elapsed)
        for utterance, did_step, events in zip(batch, stepped, made, strict=True):
            utterance.in_round = False
            utterance.check = did_step
            if utterance.discarded:
                continue
            if did_step:
                self._render(utterance, events)
                self._send(utterance)
            if self._due_or_closed(utterance):  # to the back: first come, first stepped
                self._mark_due(utterance, hold=not self._behind(utterance))

    def _decode(self, streams: list[Any], checked: bool) -> tuple[list[bool], float]:
        """On the worker thread: one batched step; which streams stepped, and its time.
        Only the engine call runs here, and `checked` spares it asking each stream again."""
        self._step_started_s = time.monotonic()
        try:
            return engine_step(self.recognizer, streams, self.clock, checked)
        finally:
            self._step_started_s = None

    def engine_step_running_s(self) -> float:
        """How long the engine step in flight has run (0: none in flight): a step that never
        returns is how a wedged engine shows."""
        started = self._step_started_s
        return 0.0 if started is None else time.monotonic() - started

    def _close(self, utterance: Utterance) -> None:
        """Nothing more to step after the end: the last final, the summary, done."""
        utterance.ended = True
        session = utterance.session
        self._render(utterance, session.close())
        mean_ms, longest_ms = utterance.waits.summary_ms()
        summary = dataclasses.replace(
            session.summary(), align_wait_ms=mean_ms, align_wait_max_ms=longest_ms
        )
        utterance.renderer.end(summary)
        self._send(utterance)
        self._add_fed()  # a finished utterance's audio is counted by its summary
        self.metrics.utterances.inc()
        if utterance.done is not None and not utterance.done.done():
            utterance.done.set_result(None)

    def _render(self, utterance: Utterance, events: list[Event]) -> None:
        for event in events:
            if isinstance(event, FirstToken):
                self.metrics.first_token_event(event.to_dict())
            utterance.renderer.event(event)

    def _send(self, utterance: Utterance) -> None:
        """Hand the utterance's new events (and its summary) to its connection."""
        items = utterance.outbox.take()
        if items and not utterance.discarded:
            utterance.deliver(items)

    def close(self) -> None:
        """Wait for a step in flight, then stop the worker thread."""
        self._executor.shutdown(wait=True)
