"""One bench run from a checked request and a prepared engine: every setting loaded and run,
results written and compared. What it shows goes through the command's `BenchView`."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any, Protocol

from streamasr.backends.base import BackendEntry, EngineOptions
from streamasr.backends.plan import LoadPlan
from streamasr.bench import report
from streamasr.bench.baseline import (
    Check,
    check_baseline_matches,
    compare,
    load_baseline,
    parse_fail_on,
)
from streamasr.bench.capacity_run import run_capacity
from streamasr.bench.datasets import Utterance, load_dataset
from streamasr.bench.metrics import info_metric
from streamasr.bench.outdir import RecordLog, check_out
from streamasr.bench.plot import plot_tradeoff, require_matplotlib
from streamasr.bench.request import BenchRequest
from streamasr.bench.results import write_results
from streamasr.bench.runner import RunOptions
from streamasr.bench.sweep import Setting, plan_settings, run_setting, swept_records
from streamasr.bench.tables import TableColumns
from streamasr.bench.worker_passes import run_setting_in_workers
from streamasr.errors import DatasetError
from streamasr.session.interrupts import signal_name, stopped_by
from streamasr.session.stream import StreamOptions

#: A cluster to run on (bench --ray): its run_setting and the run record's `ray` entry
Cluster = Callable[[], tuple[Callable[..., dict[str, Any]], dict[str, Any]]]


class Prepared(Protocol):
    """The engine choice the command prepared: backend, plan, feed and a sweep's values."""

    @property
    def entry(self) -> BackendEntry: ...
    @property
    def plan(self) -> LoadPlan: ...
    @property
    def feed(self) -> StreamOptions: ...
    @property
    def swept(self) -> str | None: ...
    @property
    def values(self) -> tuple[Any, ...]: ...


@dataclass(frozen=True)
class BenchView:
    """What a run shows, handed in by the command (bench computes, the CLI prints):
    `progress(total)` gives a step callback taking each finished utterance's label,
    `results(doc, out, notes, checks)` the table and lines under it, `probe(n, found)` one
    capacity probe, `capacity(doc, out)` the capacity report."""

    progress: Callable[[int], AbstractContextManager[Callable[[str], None]]]
    results: Callable[[dict[str, Any], Path, list[str], list[Check]], None]
    probe: Callable[[int, dict[str, Any]], None]
    capacity: Callable[[dict[str, Any], Path], None]


def run_bench(request: BenchRequest, prepared: Prepared, view: BenchView,
              cluster: Cluster | None = None) -> int:
    """Run every setting, write and show results; the number of --fail-on checks failed."""
    entry, plan, feed, swept = prepared.entry, prepared.plan, prepared.feed, prepared.swept
    if request.plot is not None:
        require_matplotlib()
    rules = parse_fail_on(request.fail_on) if request.fail_on else []
    baseline = load_baseline(request.baseline) if request.baseline else None
    settings = plan_settings(plan, entry, swept, prepared.values)
    if baseline is not None and rules:
        check_baseline_matches(baseline, [s.name for s in settings], str(request.baseline))
    columns = TableColumns(request.audio_column, request.text_column)
    data = load_dataset(request.dataset, columns=columns).limited(request.limit)
    if not data.utterances:
        raise DatasetError(
            f"{data.path}: no usable utterances ({len(data.bad_rows)} bad rows, "
            f"{len(data.missing_audio)} with missing audio); see the warnings above"
        )
    info = settings[0].recognizer.info
    metric = request.metric
    if metric == "auto":
        metric = info_metric(info, request.model, [u.text for u in data.utterances])
    options = RunOptions(feed, metric=metric, realtime=request.realtime)
    run = report.run_record(
        {
            "model": info.model_name,
            "model_files": [str(p) for p in info.model_files],
            "backend": info.backend,
            "device": info.device,
            "settings": [s.name for s in settings],
            **swept_records(settings),
            "chunk_ms": [round(s.recognizer.info.chunk_s * 1000, 3) for s in settings],
            "lookahead_ms": [round(s.recognizer.info.lookahead_s * 1000, 3) for s in settings],
            "output_frame_ms": round(info.output_frame_s * 1000, 3),
            "threads": plan.threads,
            **{k: v for k, v in settings[0].own.items() if k != swept},
            "endpoint": asdict(feed.endpoint),
            "block_ms": round(feed.block_s * 1000, 6) if feed.block_s else None,
            "tail_padding_s": feed.tail_padding_s,
            "onset_dbfs": feed.onset.threshold_dbfs,
            "vad": asdict(feed.vad),
            "metric": metric,
            "realtime": request.realtime,
            "streams": request.stream_counts(),
            "workers": request.workers,
            "limit": request.limit,
        }
    )
    check_out(request.out)
    if request.capacity:
        run_capacity(request, settings[0], data.utterances, options, run,
                     report.dataset_record(data), view.probe, view.capacity)
        return 0
    one = partial(run_setting_in_workers, workers=request.workers) if request.workers > 1 \
        else run_setting
    if cluster is not None:  # shards of utterances on a cluster: streamasr/cluster/
        one, run["ray"] = cluster()
    records = RecordLog(request.out)
    try:
        with view.progress(len(data.utterances) * len(settings) *
                           (1 + sum(1 for n in request.stream_counts() if n > 1))) as step:
            results, complete = run_all(settings, plan.engine, data.utterances, options,
                                        request.stream_counts(), one, records.write, step)
    finally:
        records.close()
    doc = report.results_document(run, report.dataset_record(data), results)
    doc["complete"] = complete
    if not complete:
        # stopped by a signal: what finished is written and shown, then the stop goes on
        signum = stopped_by()
        doc["stopped"] = {
            "signal": signal_name(signum) if signum is not None else "KeyboardInterrupt",
            "utterances_done": sum(len(s["utterances"]) for s in results),
            "utterances_planned": len(data.utterances) * len(settings),
        }
        write_results(request.out, doc)
        view.results(doc, request.out, [], [])
        raise KeyboardInterrupt
    checks = compare(baseline, doc, rules) if baseline is not None else []
    write_results(request.out, doc, checks)
    notes = batching_notes(entry, settings, str(request.streams or 1))
    if request.plot is not None:
        plot_tradeoff(doc, request.plot)
        notes.append(f"plot: {request.plot}")
    view.results(doc, request.out, notes, checks)
    if all(s["summary"]["failed"] == s["summary"]["utterances"] for s in doc["settings"]):
        raise DatasetError("no utterance could be decoded; see the errors in results.json")
    return sum(1 for c in checks if c.failed)


def batching_notes(entry: BackendEntry, settings: list[Setting], streams: str) -> list[str]:
    """When batched rows are not bit-exact (an int8 export): the engine's own words for it."""
    most = max((int(p) for p in streams.split(",") if p.strip().isdigit()), default=1)
    if most > 1 and entry.batching_note is not None:
        note = entry.batching_note([(s.name, s.recognizer.info) for s in settings])
        if note is not None:
            return [note]
    return []


def run_all(
    settings: list[Setting],
    engine: EngineOptions,
    utterances: Sequence[Utterance],
    options: RunOptions,
    streams: list[int],
    run_one: Callable[..., dict[str, Any]],
    keep: Callable[[dict[str, Any]], None],
    step: Callable[[str], None],
) -> tuple[list[dict[str, Any]], bool]:
    """Run each setting; `keep` gets every finished utterance's record at once (the
    `utterances.jsonl` log), `step` its label. Stopped (Ctrl-C, SIGTERM), it returns what
    finished and False: the settings done, and the one-stream records of the setting that
    was running (a partial batched pass is left out: it compares with nothing)."""
    results: list[dict[str, Any]] = []
    running: list[Any] = []  # the one-stream records of the setting now running

    def on_done(name: str, record: Any) -> None:
        keep({"setting": name, **record.to_dict()})
        if name == settings[len(results)].name:
            running.append(record)
        step(f"{name}: {record.id}")

    for setting in settings:
        running.clear()
        started = time.perf_counter()
        try:
            results.append(run_one(setting, engine, utterances, options, streams, on_done))
        except KeyboardInterrupt:
            if running:
                order = {u.id: i for i, u in enumerate(utterances)}
                done = sorted(running, key=lambda r: order.get(r.id, 0))
                summary = report.summarize(done, options.metric, time.perf_counter() - started)
                summary["complete"] = False
                info = setting.recognizer.info
                results.append(report.setting_record(setting.name, info, summary, done))
            return results, False
    return results, True
