"""`streamasr bench --capacity`: how many live streams this machine holds with this model."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from streamasr.commands.common import err_console
from streamasr.errors import UsageError

#: --probe-seconds bounds: shorter gives too few blocks for a p99; longer is a soak test.
PROBE_MIN_S = 1.0
PROBE_MAX_S = 600.0


def check_capacity(request: Any) -> None:
    """Refuse what a capacity run cannot honour, before anything is loaded."""
    if request.realtime:
        raise UsageError("--capacity paces every stream at real time itself; drop --realtime")
    if request.ray is not None:
        raise UsageError("--capacity measures this machine; drop --ray")
    if request.model_options.vad_gate:
        raise UsageError("--capacity runs batched steps, which --vad-gate cannot; drop it")
    for flag, value in (("--baseline", request.baseline), ("--fail-on", request.fail_on),
                        ("--plot", request.plot)):
        if value is not None:
            raise UsageError(f"--capacity writes its own report; drop {flag}")
    from streamasr.session.batch import SCHEDULES

    if request.schedule is not None and request.schedule not in SCHEDULES:
        raise UsageError(f"--schedule {request.schedule!r}: use {' or '.join(SCHEDULES)}")
    if request.ceiling is not None:
        read_ceiling(request.ceiling)
    if not PROBE_MIN_S <= request.probe_seconds <= PROBE_MAX_S:
        raise UsageError(
            f"--probe-seconds must be between {PROBE_MIN_S:g} and {PROBE_MAX_S:g}, "
            f"got {request.probe_seconds:g}"
        )


def read_ceiling(value: str) -> float:
    """--ceiling: a stream count, or the `ceiling_streams` of scripts/capacity_cpu.py's JSON."""
    found: Any
    try:
        found = float(value)
    except ValueError:
        found = _ceiling_in_file(value)
    if (isinstance(found, bool) or not isinstance(found, (int, float))
            or not math.isfinite(found) or found <= 0):
        raise UsageError(f"--ceiling {value}: give a positive number of streams, or the JSON "
                         "that scripts/capacity_cpu.py --out writes")
    return float(found)


def _ceiling_in_file(value: str) -> Any:
    try:
        doc = json.loads(Path(value).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UsageError(f"--ceiling {value}: neither a number nor a readable JSON file of "
                         f"scripts/capacity_cpu.py --out ({exc})") from None
    return doc.get("ceiling_streams") if isinstance(doc, dict) else None


def run_capacity(request: Any, setting: Any, utterances: Any, options: Any,
                 run: dict[str, Any], dataset: dict[str, Any]) -> None:
    """Load the workers, search the stream count, write and show the report."""
    from streamasr.bench.capacity_report import headline, rich_table, write_capacity
    from streamasr.bench.capacity_search import (
        AUTO_MAX_PER_WORKER,
        capacity_summary,
        probe,
        read_clip,
        search,
    )
    from streamasr.bench.workers import worker_pool

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
                # one line per probe on stderr, also when it is a log: a search takes minutes
                err_console.print(f"capacity: {n} streams: p99 {found['p99_ms']} ms, "
                                  f"{'held' if found['held'] else 'missed'}", highlight=False,
                                  markup=False)
                return found

            search(one, counts, request.workers, AUTO_MAX_PER_WORKER * request.workers)
    except KeyboardInterrupt:
        if done:  # what was measured is written, marked incomplete; the stop goes on
            report(complete=False)
        raise
    doc = report(complete=True)
    table = rich_table(doc)
    if err_console.is_terminal:
        err_console.print(table)
    else:
        from rich.console import Console

        Console(file=err_console.file, width=120, color_system=None).print(table)
    err_console.print(headline(doc), highlight=False, markup=False)
    err_console.print(f"results: {request.out / 'results.json'}, {request.out / 'results.md'}",
                      highlight=False, markup=False)
