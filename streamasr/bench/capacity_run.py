"""`bench --capacity`'s run: the workers loaded, the stream count searched, the report
written; each probe and the report handed to the command to show."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from streamasr.bench.capacity_report import write_capacity
from streamasr.bench.capacity_search import (
    AUTO_MAX_PER_WORKER,
    capacity_summary,
    probe,
    read_clip,
    search,
)
from streamasr.bench.datasets import Utterance
from streamasr.bench.request import BenchRequest, read_ceiling
from streamasr.bench.runner import RunOptions
from streamasr.bench.sweep import Setting
from streamasr.bench.workers import worker_pool
from streamasr.errors import UsageError


def run_capacity(request: BenchRequest, setting: Setting, utterances: Sequence[Utterance],
                 options: RunOptions, run: dict[str, Any], dataset: dict[str, Any],
                 probed: Callable[[int, dict[str, Any]], None],
                 done_with: Callable[[dict[str, Any], Path], None]) -> None:
    """Load the workers, search the stream count, write the report; `probed` gets each
    probe as it finishes (a search takes minutes), `done_with` the report."""
    counts = request.capacity_counts()
    schedule = request.schedule or "ready"
    ceiling = read_ceiling(request.ceiling) if request.ceiling is not None else None
    clip = read_clip(utterances)
    deadline_ms = setting.recognizer.info.chunk_s * 1000
    if deadline_ms <= 0:
        raise UsageError("--capacity needs a model with a fixed chunk (its deadline)")
    done: list[dict[str, Any]] = []  # the probes finished, kept if the run is stopped
    load_s = 0.0

    def report(complete: bool) -> dict[str, Any]:
        run["loadavg_after"] = [round(x, 2) for x in os.getloadavg()]
        doc = {
            "run": run,
            "dataset": dataset,
            "capacity": capacity_summary(done, deadline_ms, request.probe_seconds, load_s,
                                         request.workers, counts is None, schedule, ceiling),
            "complete": complete,
        }
        write_capacity(request.out, doc)
        return doc

    try:
        with worker_pool(setting.plan, options, request.workers) as pool:
            load_s = pool.start_ready()

            def one(n: int) -> dict[str, Any]:
                found = probe(pool, clip, n, request.probe_seconds, deadline_ms, schedule)
                done.append(found)
                probed(n, found)
                return found

            search(one, counts, request.workers, AUTO_MAX_PER_WORKER * request.workers)
    except KeyboardInterrupt:
        if done:  # what was measured is written, marked incomplete; the stop goes on
            report(complete=False)
        raise
    done_with(report(complete=True), request.out)
