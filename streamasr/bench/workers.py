"""Every core: the one-stream pass of a bench setting spread over worker processes.

Why: one sherpa-onnx engine on one thread is the fastest per stream on a small machine, and it
leaves the other cores idle. Here each worker process loads its own single engine (through the
backend registry, from the model, backend name and EngineOptions, which pickle) and takes
whole utterances from a shared queue, so every utterance still streams in order, start to end,
through one session exactly as in a one-worker run; the records are put back in dataset order.
Text, tokens, token times and algorithmic latencies are therefore the same as with one worker;
only compute times (and so RTF) depend on what else the cores are doing.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import TYPE_CHECKING, Any

from streamasr.backends.base import EngineOptions
from streamasr.bench.datasets import Utterance
from streamasr.bench.runner import RunOptions, UtteranceRecord, run_utterance
from streamasr.errors import UsageError

if TYPE_CHECKING:
    from streamasr.bench.sweep import Setting

log = logging.getLogger("streamasr")

#: More worker processes than this never helps (each holds a whole model in memory).
WORKERS_MAX = 256

# One engine per worker process, loaded once by the pool's initializer.
_WORKER: dict[str, Any] = {}


def available_cores() -> int:
    """Cores this process may run on (the affinity mask, not the machine's total)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def check_workers(workers: int) -> None:
    """`--workers` must be 1..WORKERS_MAX."""
    if not 1 <= workers <= WORKERS_MAX:
        raise UsageError(
            f"--workers must be between 1 and {WORKERS_MAX}, got {workers}; "
            f"this machine has {available_cores()} cores"
        )


def _init_worker(
    model: str | None, backend: str | None, engine: EngineOptions, options: RunOptions
) -> None:
    from streamasr.backends.registry import load_recognizer
    from streamasr.bench.runner import warm_up

    recognizer = load_recognizer(model, engine, backend)
    warm_up(recognizer)
    _WORKER.update(recognizer=recognizer, options=options)


def _run_one(utt: Utterance) -> UtteranceRecord:
    return run_utterance(_WORKER["recognizer"], utt, _WORKER["options"])


def run_in_workers(
    model: str | None,
    backend: str | None,
    engine: EngineOptions,
    utterances: Sequence[Utterance],
    options: RunOptions,
    workers: int,
    on_done: Callable[[UtteranceRecord], None] = lambda record: None,
) -> list[UtteranceRecord]:
    """Decode each utterance in one of `workers` processes; records in dataset order."""
    check_workers(workers)
    workers = min(workers, max(1, len(utterances)))
    # spawn, not fork: the parent may already hold an engine and its thread pools
    context = multiprocessing.get_context("spawn")
    records: list[UtteranceRecord | None] = [None] * len(utterances)
    with ProcessPoolExecutor(
        max_workers=workers,
        mp_context=context,
        initializer=_init_worker,
        initargs=(model, backend, engine, options),
    ) as pool:
        futures = {pool.submit(_run_one, utt): i for i, utt in enumerate(utterances)}
        for future in as_completed(futures):
            record = future.result()
            records[futures[future]] = record
            on_done(record)
    return [r for r in records if r is not None]


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
    """`sweep.run_setting` with the one-stream pass spread over `workers` processes.

    Each worker loads the setting's model with the setting's EngineOptions through the
    registry. Batched passes (`--streams N`) still run in this process on the setting's own
    engine, after the workers are done, and are compared with the one-stream records.
    """
    from streamasr.bench.report import setting_record, summarize
    from streamasr.bench.runner import warm_up
    from streamasr.bench.sweep import batched_passes

    started = clock()
    records = run_in_workers(
        setting.model, setting.backend, setting.engine, utterances, options, workers,
        lambda r: on_done(setting.name, r),
    )
    wall_s = clock() - started
    recognizer = setting.recognizer
    if any(n > 1 for n in streams):
        warm_up(recognizer)
    sweep = batched_passes(setting, records, utterances, options, streams, on_done, clock)
    summary = summarize(records, options.metric, wall_s, sweep or None)
    summary["workers"] = workers
    return setting_record(setting.name, recognizer.info, summary, records)
