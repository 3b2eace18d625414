"""Bench's passes over worker processes: the one-stream pass, and `--streams N` passes with
the N streams shared out among the workers (workers x streams), each worker batching its
share on its own engine. Loading happens before anything is timed."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from streamasr.backends.base import EngineOptions
from streamasr.bench.datasets import Utterance
from streamasr.bench.runner import RunOptions, UtteranceRecord
from streamasr.bench.workers import worker_pool

if TYPE_CHECKING:
    from streamasr.bench.sweep import Setting
    from streamasr.bench.workers import WorkerPool


def shares(count: int, parts: int) -> list[int]:
    """`count` split into `parts` near-equal whole shares, larger ones first: 5, 2 -> [3, 2]."""
    return [count // parts + (1 if i < count % parts else 0) for i in range(parts)]


def batched_in_workers(
    pool: WorkerPool, utterances: Sequence[Utterance], streams: int
) -> tuple[list[UtteranceRecord], list[int]]:
    """One `--streams N` pass over the pool: worker i decodes its share of the utterances
    (every W-th, from the i-th) in batches of its share of the N streams, on its own engine.
    Records come back in dataset order, so they compare with the one-stream pass; with them,
    the streams each worker used."""
    used = min(pool.size, streams, len(utterances))
    per_worker = shares(streams, used)
    parts = [list(range(i, len(utterances), used)) for i in range(used)]
    replies = pool.gather(
        [("batch", n, [utterances[j] for j in part]) for n, part in zip(per_worker, parts,
                                                                          strict=True)]
    )
    records: list[UtteranceRecord | None] = [None] * len(utterances)
    for part, got in zip(parts, replies, strict=True):
        for j, record in zip(part, got, strict=True):
            records[j] = record
    return [r for r in records if r is not None], per_worker


def run_setting_in_workers(
    setting: Setting,
    engine: EngineOptions,
    utterances: Sequence[Utterance],
    options: RunOptions,
    streams: Sequence[int] = (1,),
    on_done: Callable[[str, UtteranceRecord], None] = lambda name, record: None,
    workers: int = 1,
    clock: Callable[[], float] = time.perf_counter,
) -> dict[str, Any]:
    """`sweep.run_setting` spread over `workers` processes, each with its own engine.

    Each worker loads the setting's model by the setting's plan (backends/plan.py)
    before anything is timed (`load_s` in the summary). The one-stream pass takes
    whole utterances from a queue; each `--streams N` pass gives every worker its share of
    the utterances and of the N streams (workers x streams), and is compared with the
    one-stream records.
    """
    from streamasr.bench.report import setting_record, summarize
    from streamasr.bench.sweep import compare_batched, pass_progress

    used = min(workers, max(1, len(utterances)))
    with worker_pool(setting.plan, options, used) as pool:
        load_s = pool.start_ready()
        started = clock()
        records = pool.run(utterances, options, lambda r: on_done(setting.name, r))
        wall_s = clock() - started
        sweep = []
        for n in (n for n in streams if n > 1):
            started = clock()
            batched, per_worker = batched_in_workers(pool, utterances, n)
            entry = compare_batched(setting.name, records, batched, n, clock() - started)
            entry["workers"] = len(per_worker)
            entry["streams_per_worker"] = per_worker
            sweep.append(entry)
            for record in batched:
                pass_progress(on_done, f"{setting.name} x{n}")(record)
    summary = summarize(records, options.metric, wall_s, sweep or None)
    summary["workers"] = workers
    summary["load_s"] = round(load_s, 3)
    return setting_record(setting.name, setting.recognizer.info, summary, records)
