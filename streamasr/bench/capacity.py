"""One capacity probe in one worker: N live streams paced at real time through streamasr's loop.

Why: "how many live streams does this machine hold" is only answered by the loop a server
runs, not by a bare engine. Each stream is a StreamSession; every feed block (one chunk of
audio by default) becomes available at its wall-clock time, as from a microphone or a
socket. Streams start at evenly spread phases within one block, as independent clients
would. The loop then paces them the way `streamasr serve`'s scheduler does, by one of the
two schedules of batch.py:

- `aligned`: rounds at the ticks of one `StepClock` (origin: the probe's common start,
  period: one block, so the workers' ticks coincide); at each tick every stream is fed the
  block that arrived by then and all of them step in one batch (batch.step_all). A block's
  wait for its tick (`align_waits_ms`, below one block) is part of its latency.
- `ready`: a round as soon as any block has arrived: each stream is fed its oldest arrived
  block and those streams step at once, so a step batches the streams that happen to be ready.

A block's latency is from the moment its audio was all there to the end of the step that
consumed it.

The first `WARMUP_S` of each probe (a quarter of a shorter one), where the first steps at a new
batch size fall, count in neither the latencies nor the CPU seconds.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from streamasr.backends.base import Recognizer
from streamasr.session.batch import StepClock, step_all
from streamasr.session.stream import StreamOptions, StreamSession

#: Seconds at the start of a probe left out of its figures.
WARMUP_S = 1.0
#: A probe this far behind real time has failed already; it stops rather than run on.
MAX_LAG_S = 5.0
#: A block due this little after a tick counts as due on it (float sums of block_s round).
TICK_SLACK_S = 1e-6
#: Streams start this many seconds apart in the shared clip, so they decode different audio.
CLIP_STAGGER_S = 3.7


@dataclass(frozen=True)
class ProbeSpec:
    """One worker's part of a probe: its streams are `first`..`first + streams - 1` of
    `total`, all paced from the common monotonic `start_at` for `duration_s`."""

    clip: np.ndarray
    sample_rate: int
    streams: int
    first: int
    total: int
    duration_s: float
    schedule: str = "aligned"  # batch.SCHEDULES


@dataclass(frozen=True)
class ProbeResult:
    """What one worker measured: every block's latency, and what the steady part cost."""

    latencies_ms: tuple[float, ...]
    cpu_s: float
    audio_s: float
    late_start_ms: float  # how late the worker began after the common start
    fell_behind: bool = False  # stopped early: a block waited more than MAX_LAG_S
    # `aligned`: each block's wait for its tick (arrival -> tick), in the order of latencies_ms
    align_waits_ms: tuple[float, ...] = ()


class CapacityProbe:
    """Sessions opened (outside the timing), then `run(start_at)` paces them."""

    def __init__(
        self,
        recognizer: Recognizer,
        spec: ProbeSpec,
        options: StreamOptions,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.recognizer = recognizer
        self.spec = spec
        self.clock = clock
        self.sleep = sleep
        self.sessions = [
            StreamSession(recognizer, spec.sample_rate, f"stream-{spec.first + i}", options, clock)
            for i in range(spec.streams)
        ]
        self.block_s = self.sessions[0].block_s if self.sessions else 0.0
        self.block_n = max(1, round(self.block_s * spec.sample_rate))
        blocks = int(spec.duration_s / self.block_s) if self.block_s > 0 else 0
        self.blocks = blocks
        need = blocks * self.block_n
        stagger = round(CLIP_STAGGER_S * spec.sample_rate)
        self.audio = [
            np.resize(spec.clip, need + stagger * (spec.first + i))[stagger * (spec.first + i):]
            for i in range(spec.streams)
        ]

    def _phase_s(self, index: int) -> float:
        return (self.spec.first + index) / max(1, self.spec.total) * self.block_s

    def run(self, start_at: float) -> ProbeResult:
        """Pace every stream from `start_at` (monotonic seconds, shared by all workers)."""
        now = self.clock()
        if now < start_at:
            self.sleep(start_at - now)
        late_ms = max(0.0, (self.clock() - start_at) * 1000)
        count = len(self.sessions)
        # block k of stream i is all there at start + phase_i + (k + 1) * block
        due = [start_at + self._phase_s(i) + self.block_s for i in range(count)]
        tally = _Tally(start_at + min(WARMUP_S, self.spec.duration_s / 4))
        if self.spec.schedule == "aligned":
            self._aligned(due, StepClock(start_at, self.block_s), tally)
        else:
            self._ready(due, tally)
        cpu_s = time.process_time() - tally.cpu_mark if tally.cpu_mark is not None else 0.0
        return ProbeResult(
            latencies_ms=tuple(round(x, 3) for x in tally.latencies_ms),
            cpu_s=cpu_s,
            audio_s=len(tally.latencies_ms) * self.block_s,
            late_start_ms=round(late_ms, 3),
            fell_behind=tally.behind,
            align_waits_ms=tuple(round(x, 3) for x in tally.waits_ms),
        )

    def _feed(self, i: int, k: int) -> None:
        self.sessions[i].accept(self.audio[i][k * self.block_n:(k + 1) * self.block_n])

    def _ready(self, due: list[float], tally: _Tally) -> None:
        """A round whenever a block has arrived: those streams step at once."""
        count = len(self.sessions)
        fed = [0] * count
        while True:
            now = self.clock()
            tally.mark_cpu(now)
            # one block per stream and round, as the server feeds them: a stream that is
            # behind gets its next block in the next round, so a round's work stays bounded
            arrived: list[tuple[int, float]] = []
            for i in range(count):
                if fed[i] < self.blocks and due[i] <= now:
                    self._feed(i, fed[i])
                    arrived.append((i, due[i]))
                    fed[i] += 1
                    due[i] += self.block_s
            if arrived:
                if not self._step(arrived, now, tally, None):
                    return
                continue
            waiting = [due[i] for i in range(count) if fed[i] < self.blocks]
            if not waiting:
                return
            self.sleep(max(0.0, min(waiting) - self.clock()))

    def _aligned(self, due: list[float], clock: StepClock, tally: _Tally) -> None:
        """A round at each tick of the shared clock: every block arrived by the tick is fed
        (one per stream: the streams' blocks are one period apart) and all step in one batch."""
        count = len(self.sessions)
        fed = [0] * count
        while True:
            waiting = [due[i] for i in range(count) if fed[i] < self.blocks]
            if not waiting:
                return
            tick = clock.next_tick_s(min(waiting))
            now = self.clock()
            if now < tick:
                self.sleep(tick - now)
                now = self.clock()
            tally.mark_cpu(now)
            arrived: list[tuple[int, float]] = []
            for i in range(count):
                # one block per stream: its next is a period later, past this tick
                if fed[i] < self.blocks and due[i] <= tick + TICK_SLACK_S:
                    self._feed(i, fed[i])
                    arrived.append((i, due[i]))
                    fed[i] += 1
                    due[i] += self.block_s
            if not self._step(arrived, now, tally, tick):
                return

    def _step(self, arrived: list[tuple[int, float]], now: float, tally: _Tally,
              tick: float | None) -> bool:
        """One batched step over the streams just fed; False: the probe fell behind."""
        if now - min(t for _, t in arrived) > MAX_LAG_S:
            tally.behind = True
            return False
        streams = list(dict.fromkeys(i for i, _ in arrived))
        step_all(self.recognizer, [self.sessions[i] for i in streams], self.clock)
        done = self.clock()
        steady = [t for _, t in arrived if t >= tally.steady_at]
        tally.latencies_ms += [(done - t) * 1000 for t in steady]
        if tick is not None:
            tally.waits_ms += [max(0.0, tick - t) * 1000 for t in steady]
        return True


class _Tally:
    """What a probe counts once it is steady: latencies, align waits, the CPU mark."""

    def __init__(self, steady_at: float) -> None:
        self.steady_at = steady_at
        self.cpu_mark: float | None = None
        self.latencies_ms: list[float] = []
        self.waits_ms: list[float] = []
        self.behind = False

    def mark_cpu(self, now: float) -> None:
        if self.cpu_mark is None and now >= self.steady_at:
            self.cpu_mark = time.process_time()


def clip_from(blocks: Sequence[np.ndarray]) -> np.ndarray:
    """The dataset's audio as one clip that every stream reads from (looped as needed)."""
    if not blocks:
        return np.zeros(0, np.float32)
    return np.concatenate([np.asarray(b, np.float32) for b in blocks])
