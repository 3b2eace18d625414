"""`bench --capacity`: the largest number of live streams whose step p99 meets the chunk deadline.

The worker processes load their engine first (not timed); then each probe shares N streams
out among them (capacity.py paces them at real time through streamasr's session loop and
batched step), starting together at one monotonic instant. A probe holds when the p99 of
every block's step (from when its schedule let it step -> its step done: its latency, audio
there -> step done, less its wait for the tick under `aligned`) is within the chunk's
duration: later than that, a live stream falls further behind with every chunk. The align
wait is bounded by one chunk and does not grow; it is reported, and is part of the latency.
`--streams auto` doubles N until a probe fails, then bisects between the last that held and
the first that did not; a list of counts probes just those.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from streamasr.audio import FileSource
from streamasr.bench.capacity import ProbeResult, ProbeSpec, clip_from
from streamasr.bench.datasets import Utterance
from streamasr.bench.worker_passes import shares
from streamasr.bench.workers import WorkerPool
from streamasr.errors import DatasetError, InputError

log = logging.getLogger("streamasr")

#: Audio read from the dataset for the streams to loop over; more only costs memory.
CLIP_MAX_S = 120.0
#: Seconds between the probe's order and its common start (sessions are open by then).
START_MARGIN_S = 0.2
#: `--streams auto` stops doubling here, per worker.
AUTO_MAX_PER_WORKER = 256


@dataclass(frozen=True)
class Clip:
    """The audio every stream reads, at its file's sample rate."""

    samples: np.ndarray
    sample_rate: int

    @property
    def duration_s(self) -> float:
        return len(self.samples) / self.sample_rate


def read_clip(utterances: Sequence[Utterance], max_s: float = CLIP_MAX_S) -> Clip:
    """The dataset's readable audio at the first file's sample rate, up to `max_s` seconds."""
    blocks: list[np.ndarray] = []
    rate = 0
    total = 0
    for utt in utterances:
        try:
            source = FileSource(str(utt.audio))
        except InputError as exc:
            log.warning("capacity: skipping %s: %s", utt.id, exc)
            continue
        try:
            if rate and source.sample_rate != rate:
                log.info("capacity: skipping %s (%d Hz, not %d)", utt.id, source.sample_rate, rate)
                continue
            rate = source.sample_rate
            for block in source.blocks(1.0):
                blocks.append(block)
                total += len(block)
        except InputError as exc:
            log.warning("capacity: skipping %s: %s", utt.id, exc)
        finally:
            source.close()
        if rate and total >= max_s * rate:
            break
    clip = clip_from(blocks)
    if not rate or not len(clip):
        raise DatasetError("--capacity needs audio to stream: no file of the dataset was readable")
    return Clip(clip, rate)


def probe(pool: WorkerPool, clip: Clip, streams: int, duration_s: float,
          deadline_ms: float, schedule: str = "aligned") -> dict[str, Any]:
    """Run `streams` live streams over the pool's workers, paced by `schedule`
    (batch.SCHEDULES); the probe's record."""
    used = min(pool.size, streams)
    per_worker = shares(streams, used)
    firsts = [sum(per_worker[:i]) for i in range(used)]
    pool.gather([
        ("arm", ProbeSpec(clip.samples, clip.sample_rate, n, first, streams, duration_s,
                          schedule))
        for n, first in zip(per_worker, firsts, strict=True)
    ])
    load_before = os.getloadavg()[0]
    start_at = time.monotonic() + START_MARGIN_S
    results: list[ProbeResult] = pool.gather([("go", start_at)] * used)
    latencies = np.array([x for r in results for x in r.latencies_ms], dtype=np.float64)
    waits = np.array([x for r in results for x in r.align_waits_ms], dtype=np.float64)
    audio_s = sum(r.audio_s for r in results)
    cpu_s = sum(r.cpu_s for r in results)
    p99 = float(np.percentile(latencies, 99)) if len(latencies) else float("inf")
    # what must meet the chunk: a block's step, from when the schedule let it step (its tick
    # under `aligned`, whose wait is bounded by one chunk and does not grow; its arrival
    # under `ready`) to the step's end; later than the chunk, a stream falls further behind
    steps = latencies - waits if len(waits) == len(latencies) else latencies
    step_p99 = float(np.percentile(steps, 99)) if len(steps) else float("inf")
    behind = any(r.fell_behind for r in results)
    return {
        "streams": streams,
        "workers": used,
        "streams_per_worker": per_worker,
        "p50_ms": _ms(np.percentile(latencies, 50)) if len(latencies) else None,
        "p99_ms": _ms(p99) if len(latencies) else None,
        "max_ms": _ms(latencies.max()) if len(latencies) else None,
        # `aligned`: a block's wait for the step clock's tick, part of its latency above
        "align_wait_p50_ms": _ms(np.percentile(waits, 50)) if len(waits) else None,
        "align_wait_max_ms": _ms(waits.max()) if len(waits) else None,
        "step_p99_ms": _ms(step_p99) if len(steps) else None,
        "blocks": len(latencies),
        "held": bool(len(latencies)) and step_p99 <= deadline_ms and not behind,
        "fell_behind": behind,
        "cpu_s_per_audio_s": round(cpu_s / audio_s, 4) if audio_s > 0 else None,
        "late_start_ms": max(r.late_start_ms for r in results),
        "loadavg_1min": round(load_before, 2),
    }


def _ms(value: Any) -> float:
    return round(float(value), 2)


def search(run_probe: Callable[[int], dict[str, Any]], counts: Sequence[int] | None,
           start: int, most: int) -> list[dict[str, Any]]:
    """Probes in the order run: the given `counts`, or (None) doubling from `start` until a
    probe fails or `most` is reached, then bisection between the last held and first failed."""
    if counts is not None:
        return [run_probe(n) for n in counts]
    probes = []
    held, failed = 0, 0
    n = start
    while True:
        result = run_probe(n)
        probes.append(result)
        if not result["held"]:
            failed = n
            break
        held = n
        if n >= most:
            return probes
        n = min(most, n * 2)
    while failed - held > 1:
        n = (held + failed) // 2
        result = run_probe(n)
        probes.append(result)
        if result["held"]:
            held = n
        else:
            failed = n
    return probes


def largest_held(probes: Sequence[dict[str, Any]]) -> int:
    """The largest N that held, 0 when none did."""
    return max((p["streams"] for p in probes if p["held"]), default=0)


def capacity_summary(
    probes: Sequence[dict[str, Any]], deadline_ms: float, duration_s: float, load_s: float,
    workers: int, auto: bool, schedule: str = "aligned", ceiling: float | None = None,
) -> dict[str, Any]:
    """The `capacity` entry of results.json. `ceiling`: the engine's own stream ceiling on
    this machine (scripts/capacity_cpu.py), which the largest count is given as a fraction of."""
    best = largest_held(probes)
    held = [p for p in probes if p["streams"] == best and p["held"]]
    cpu = held[0]["cpu_s_per_audio_s"] if held else None
    return {
        "largest_streams": best,
        "deadline_ms": round(deadline_ms, 3),
        "probe_s": duration_s,
        "search": "auto" if auto else "listed",
        "schedule": schedule,
        "workers": workers,
        "cores": _cores(),
        "load_s": round(load_s, 3),
        # what the streams would need of the whole machine at that figure
        "cores_needed_at_largest": round(cpu * best, 3) if cpu is not None else None,
        # the CPU's own bound: every core busy at the cheapest cost per audio second seen
        "cpu_bound_streams": _cpu_bound(probes),
        "ceiling_streams": ceiling,
        "of_ceiling": round(best / ceiling, 3) if ceiling else None,
        "probes": sorted(probes, key=lambda p: p["streams"]),
        "probe_order": [p["streams"] for p in probes],
    }


def _cpu_bound(probes: Sequence[dict[str, Any]]) -> int | None:
    """How many streams the cores could feed if nothing but decoding ran: cores / (CPU s per
    audio s), at the cheapest probe (batches cost less per stream as they grow)."""
    costs = [p["cpu_s_per_audio_s"] for p in probes if p["cpu_s_per_audio_s"]]
    return int(_cores() / min(costs)) if costs else None


def _cores() -> int:
    from streamasr.bench.workers import available_cores

    return available_cores()
