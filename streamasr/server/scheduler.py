"""One engine, many streams: the scheduler of `streamasr serve`.

Each utterance of each connection is a StreamSession. Connections hand their audio to the
scheduler, which cuts it into feed blocks exactly as `streamasr file` does (one chunk each,
unless --block-ms or the session's `block_ms` says otherwise). One task takes the utterances
that have blocks ready (at most `max_batch`, after waiting up to `max_wait_ms` for the batch
to fill; an utterance whose input ended goes first and waits for no batch) and runs a job:
per round, one block into each session, then the engine's batched step over all of them.
Only the engine call runs on the single worker thread; the sessions' Python (hypotheses,
endpoints, events, JSON) runs on the event loop, as in sherpa-onnx's own server. So the
event loop never waits on the engine, the worker never waits for the event loop's Python
(the engine lets go of the GIL), a stream is never touched from two threads at once (an
utterance in a job is fed by that job only), and every session's events are those
`streamasr file` prints for the same audio, with the same `audio_s` (int8 models quantise
dynamically: there a batch can change a decode; docs/performance.md).

Blocks that only buffer audio never cost a trip to the worker thread: while an utterance has
no step in flight or queued, its blocks are fed on the event loop as they come, one at a
time, until its stream has a chunk ready (where the engine can say so: the stream's
`ready()`); only then does the utterance join a batch, and the worker steps it before it
feeds the blocks that came after. The order of feeding and stepping, and so every event, is
the same as before. With 100 ms messages and a 320 ms chunk that
is one hand-over per engine step instead of one per message, which on busy cores (where
every wake-up of a thread waits for a core) is what kept first tokens and finals late.

Events leave as the JSON lines of `streamasr file --format jsonl` (render.JsonlRenderer),
handed to the connection's `deliver` callback on the event loop.

Why not the one driver (driver.py): `drive` owns its loop and pulls one source's blocks, one
session at a time, so every step would be one stream's. Here audio is pushed by the
connections and the steps are shared: a batch of sessions advances together through one
`decode_batch`. So the scheduler uses the driver's pieces, not its loop: the session's
`accept`/`end_input`/`after_step`/`close` (batch.step_all's loop, with the engine call sent
to the worker thread), which turn each step into the events `drive` would have given, and
the JSONL renderer as the sink.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import math
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from streamasr.backends.base import Recognizer
from streamasr.events import Event, FirstToken
from streamasr.render import JsonlRenderer
from streamasr.server.metrics import Metrics
from streamasr.server.protocol import SessionConfig
from streamasr.stream import StreamOptions, StreamSession

log = logging.getLogger("streamasr")

#: Audio one utterance contributes to one batched job, in engine chunks: an utterance that
#: is behind (a client that sent a lot at once, a server past its capacity) advances about
#: one step per job, as every other does, so a job stays one batched step long and a new
#: or a punctual utterance never waits behind several steps of another's backlog.
CHUNKS_PER_JOB = 1


class _Lines:
    """A text sink for JsonlRenderer: keeps each JSON line (without its newline)."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def write(self, text: str) -> int:
        self.lines.extend(line for line in text.split("\n") if line)
        return len(text)

    def flush(self) -> None:
        pass

    def take(self) -> list[str]:
        lines, self.lines = self.lines, []
        return lines


@dataclass(eq=False)
class Utterance:
    """One utterance of one connection: its session, audio not yet fed, where events go.

    Everything is used on the event loop; only the engine call of a step runs on the worker
    thread, while the utterance is in that job (`in_job`) and nothing else feeds it.
    """

    session: StreamSession
    config: SessionConfig
    deliver: Callable[[list[str]], None]
    fail: Callable[[str], None]
    block_samples: int
    job_blocks: int  # feed blocks per job: one engine chunk's worth, at least one
    lines: _Lines = field(default_factory=_Lines)
    renderer: JsonlRenderer = field(init=False)
    pending: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))
    blocks: deque[np.ndarray] = field(default_factory=deque)
    queued_samples: int = 0
    ending: bool = False
    ended: bool = False
    in_job: bool = False  # taken into the job running now
    step_due: bool = False  # fed up to a ready chunk on the event loop: step before feeding
    discarded: bool = False
    done: asyncio.Future[None] | None = None
    drained: asyncio.Event = field(default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        self.renderer = JsonlRenderer(self.lines, self.config.partials)  # type: ignore[arg-type]
        self.renderer.begin(self.config.source)

    @property
    def queued_s(self) -> float:
        """Seconds of audio received and not yet fed to the engine."""
        return self.queued_samples / self.config.sample_rate


@dataclass
class _Work:
    utterance: Utterance
    blocks: list[np.ndarray]
    end: bool
    primed: bool = False  # step it before feeding `blocks`


class Scheduler:
    """Batches ready utterances through one recognizer on one worker thread."""

    def __init__(
        self,
        recognizer: Recognizer,
        options: StreamOptions,
        metrics: Metrics,
        max_batch: int,
        max_wait_s: float,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.recognizer = recognizer
        self.options = options
        self.metrics = metrics
        self.max_batch = max_batch
        self.max_wait_s = max_wait_s
        self.clock = clock
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="streamasr-engine"
        )
        self._ready: OrderedDict[Utterance, None] = OrderedDict()
        self._wake = asyncio.Event()

    async def open(
        self,
        config: SessionConfig,
        deliver: Callable[[list[str]], None],
        fail: Callable[[str], None],
    ) -> Utterance:
        """A new utterance (its engine stream is made on the worker thread)."""
        options = config.stream_options(self.options)

        def make() -> StreamSession:
            return StreamSession(self.recognizer, config.sample_rate, config.source, options)

        session = await asyncio.get_running_loop().run_in_executor(self._executor, make)
        block = max(1, round(session.block_s * config.sample_rate))
        chunks_s = CHUNKS_PER_JOB * self.recognizer.chunk_s
        per_job = max(1, math.ceil(chunks_s / session.block_s - 1e-6))
        return Utterance(session, config, deliver, fail, block, per_job)

    def add_audio(self, utterance: Utterance, samples: np.ndarray) -> None:
        """Queue mono float32 samples; whole feed blocks become ready for the next step."""
        if utterance.ending or utterance.discarded or len(samples) == 0:
            return
        joined = np.concatenate([utterance.pending, samples]) if len(utterance.pending) else samples
        size = utterance.block_samples
        whole = len(joined) // size * size
        for start in range(0, whole, size):
            utterance.blocks.append(joined[start : start + size])
        utterance.pending = joined[whole:]
        utterance.queued_samples += len(samples)
        self._feed_inline(utterance)
        if utterance.blocks or utterance.step_due:
            utterance.drained.clear()
            self._mark_ready(utterance)

    def _feed_inline(self, utterance: Utterance) -> None:
        """On the event loop: feed queued blocks until the stream has a chunk ready.

        Only while no job holds the session nor has a step of it due, and
        only where the stream can say when it is ready (and no VAD model runs on each block).
        """
        session = utterance.session
        ready = getattr(session.stream, "ready", None)
        busy = utterance.in_job or utterance.step_due
        if ready is None or busy or self.options.vad.uses_front_end:
            return
        while utterance.blocks:
            block = utterance.blocks.popleft()
            utterance.queued_samples -= len(block)
            session.accept(block)
            self.metrics.audio_s.inc(len(block) / utterance.config.sample_rate)
            if ready():
                utterance.step_due = True
                return

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
            self._mark_ready(utterance)
            self._ready.move_to_end(utterance, last=False)  # an end goes first, unbatched
        return utterance.done

    def discard(self, utterance: Utterance) -> None:
        """The connection went away: forget the utterance (a step in flight is ignored)."""
        utterance.discarded = True
        self._ready.pop(utterance, None)
        utterance.drained.set()
        if utterance.done is not None and not utterance.done.done():
            utterance.done.set_result(None)

    def _mark_ready(self, utterance: Utterance) -> None:
        self._ready[utterance] = None
        self._wake.set()

    async def run(self) -> None:
        """The scheduler task: runs until cancelled."""
        while True:
            await self._wake.wait()
            self._wake.clear()
            if (
                len(self._ready) < self.max_batch
                and self.max_wait_s > 0
                and not any(utterance.ending for utterance in self._ready)
            ):
                await asyncio.sleep(self.max_wait_s)
            while self._ready:
                work = self._take_batch()
                if not work:
                    continue
                self.metrics.batch_size.observe(len(work))
                try:
                    await self._step(work)
                except Exception as exc:  # an engine failure ends the streams it stepped
                    log.exception("engine step failed")
                    for item in work:
                        if not item.utterance.discarded:
                            item.utterance.fail(f"engine step failed: {exc}")
                    continue

    def _take_batch(self) -> list[_Work]:
        work: list[_Work] = []
        again: list[Utterance] = []
        while self._ready and len(work) < self.max_batch:
            utterance, _ = self._ready.popitem(last=False)
            if utterance.discarded or utterance.ended:
                continue
            if not (utterance.blocks or utterance.step_due or utterance.ending):
                continue  # fed on the event loop meanwhile; nothing for the worker
            count = min(len(utterance.blocks), utterance.job_blocks)
            blocks = [utterance.blocks.popleft() for _ in range(count)]
            utterance.queued_samples -= sum(len(block) for block in blocks)
            end = utterance.ending and not utterance.blocks
            if utterance.blocks:
                again.append(utterance)  # the rest in a later job, after the others
            else:
                utterance.drained.set()
            if end:
                utterance.ended = True
            work.append(_Work(utterance, blocks, end, utterance.step_due))
            utterance.step_due = False
            utterance.in_job = True
        # Only now back in the queue: an utterance taken twice into one job would have its
        # stream stepped twice in one batched step, which the engine does not survive.
        for utterance in again:
            self._ready[utterance] = None
        return work

    async def _step(self, work: list[_Work]) -> None:
        """One job: the batched step of every primed utterance, then block by block the
        queued blocks taken (one chunk's worth at most), each followed by a batched step,
        then the ends: tail padding, steps until nothing is ready, the last final. The order
        of feeding and stepping per utterance is `streamasr file`'s, so are the events.

        An utterance's lines go out as soon as nothing more of this job is its: most have
        no queued blocks and go right after the first step.
        """
        await self._step_sessions([item.utterance for item in work if item.primed])
        self._dispatch([item for item in work if not (item.blocks or item.end)])
        later = [item for item in work if item.blocks or item.end]
        for index in range(max((len(item.blocks) for item in later), default=0)):
            stepping = [item for item in later if index < len(item.blocks)]
            for item in stepping:
                self._accept(item.utterance, item.blocks[index])
            await self._step_sessions([item.utterance for item in stepping])
        ending = [item.utterance for item in later if item.end]
        await self._step_sessions([u for u in ending if u.session.end_input()])
        for utterance in ending:
            self._render(utterance, utterance.session.close())
            utterance.renderer.end(utterance.session.summary())
        self._dispatch(later)

    def _accept(self, utterance: Utterance, block: np.ndarray) -> None:
        utterance.session.accept(block)
        self.metrics.audio_s.inc(len(block) / utterance.config.sample_rate)

    async def _step_sessions(self, utterances: list[Utterance]) -> None:
        """Step until no stream has a chunk ready; only the engine call leaves the loop.

        Everything in Python (reading hypotheses, endpoints, events, JSON) runs here on the
        event loop and the worker thread only runs the engine, which lets go of the GIL:
        the two threads then never wait for each other's Python (on busy cores such a wait
        is a whole switch interval, and it was what kept finals late under load).
        """
        loop = asyncio.get_running_loop()
        sessions = [utterance.session for utterance in utterances]
        while sessions:
            streams = [session.stream for session in sessions]
            known = [getattr(stream, "ready", None) for stream in streams]
            if all(ready is not None for ready in known) and not any(
                ready() for ready in known  # type: ignore[misc]
            ):
                return  # nothing to step: no trip to the worker thread
            stepped, elapsed = await loop.run_in_executor(
                self._executor, self._decode, streams
            )
            count = sum(stepped)
            if not count:
                return
            self.metrics.compute_s.inc(elapsed)
            share = elapsed / count
            for utterance, did_step in zip(utterances, stepped, strict=True):
                if did_step:
                    utterance.session.add_compute(share)
                    self._render(utterance, utterance.session.after_step())

    def _decode(self, streams: list[Any]) -> tuple[list[bool], float]:
        """On the worker thread: one batched step; which streams stepped, and its time."""
        started = self.clock()
        stepped = self.recognizer.decode_batch(streams)
        return stepped, self.clock() - started

    def _render(self, utterance: Utterance, events: list[Event]) -> None:
        for event in events:
            if isinstance(event, FirstToken):
                self.metrics.first_token_event(event.to_dict())
            utterance.renderer.event(event)

    def _dispatch(self, work: list[_Work]) -> None:
        """On the event loop: hand each utterance's new lines to its connection."""
        for item in work:
            utterance = item.utterance
            utterance.in_job = False
            lines = utterance.lines.take()
            if utterance.discarded:
                continue
            if lines:
                utterance.deliver(lines)
            if item.end:
                self.metrics.utterances.inc()
                if utterance.done is not None and not utterance.done.done():
                    utterance.done.set_result(None)
            elif not utterance.ending and utterance in self._ready:
                # blocks that came during the step: feed them here if they hold no step
                self._feed_inline(utterance)
                if not (utterance.blocks or utterance.step_due):
                    self._ready.pop(utterance, None)
                    utterance.drained.set()

    def close(self) -> None:
        """Wait for a step in flight, then stop the worker thread."""
        self._executor.shutdown(wait=True)
