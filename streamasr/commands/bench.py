"""`streamasr bench`: WER/CER, latency and speed over a test set, with sweeps and a run record."""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Annotated

import typer

from streamasr.backends.options import check_number
from streamasr.bench.outdir import RECORDS_NAME
from streamasr.commands.common import (
    EXIT_INTERRUPTED,
    VerboseOpt,
    cli_errors,
    err_console,
    setup_logging,
)
from streamasr.commands.options import ModelOptions, with_model_options
from streamasr.errors import DatasetError, UsageError
from streamasr.output.render import escape

log = logging.getLogger("streamasr")
MAX_STREAMS = 256  # one batch of utterances in memory at once; far past any CPU's cores


def register(app: typer.Typer) -> None:
    """Add the `bench` command."""

    @app.command("bench")
    @with_model_options(sweep=True)
    def bench_command(
        dataset: Annotated[
            Path,
            typer.Argument(
                help="LibriSpeech-style folder (*.trans.txt, or trans.txt beside the clips), "
                "Kaldi data dir (wav.scp + text), JSONL manifest (audio_filepath, text, ...) "
                "or TSV/CSV table (a path and a text column, e.g. Common Voice's test.tsv)."
            ),
        ],
        model_options: ModelOptions,
        limit: Annotated[int | None, typer.Option(help="Use only the first N utterances.")] = None,
        audio_column: Annotated[
            str | None,
            typer.Option(help="TSV/CSV datasets: the column with the audio path (default: "
                         "the first of path, audio, audio_filepath, file, filename, wav)."),
        ] = None,
        text_column: Annotated[
            str | None,
            typer.Option(help="TSV/CSV datasets: the column with the reference text (default: "
                         "the first of sentence, text, transcript, transcription)."),
        ] = None,
        metric: Annotated[
            str,
            typer.Option(
                help="wer, cer, mer, or auto: cer for a Chinese model, mer (CJK characters "
                "and English words) for a Chinese-English one, else wer."
            ),
        ] = "auto",
        realtime: Annotated[
            bool,
            typer.Option(
                help="Feed each utterance at live speed and report wall-clock latency "
                "too (slow: takes as long as the audio)."
            ),
        ] = False,
        streams: Annotated[
            str | None,
            typer.Option(
                help="Also decode N utterances at once in batches (shared out among the "
                "--workers) and report the aggregate throughput; comma-separated to sweep "
                "(1,2,4,8). The text must equal one stream's (checked for each value). With "
                "--capacity: the live stream counts to probe, or auto (the default) to search."
            ),
        ] = None,
        workers: Annotated[
            int,
            typer.Option(
                help="Decode in N worker processes, each with its own engine loaded before "
                "anything is timed, to use N cores (try --threads 1 --workers $(nproc)). "
                "Results are identical to one worker; default 1 keeps the per-utterance "
                "compute times free of contention between workers."
            ),
        ] = 1,
        ray: Annotated[
            str | None,
            typer.Option(
                "--ray",
                metavar="[ADDRESS]",
                help="Decode the one-stream pass on a Ray cluster, in shards of utterances, "
                "one engine per CPU: --ray alone starts one on this machine; auto, "
                "ray://HOST:PORT or HOST:PORT joins one. Results equal a local run's "
                "(pip install 'streamasr\\[ray]').",
            ),
        ] = None,
        capacity: Annotated[
            bool,
            typer.Option(
                "--capacity",
                help="Instead of scoring the set: find how many live streams this machine "
                "holds. Streams of the dataset's audio are paced at real time through "
                "streamasr's loop over --workers processes, and the largest count whose step "
                "p99 stays within the chunk's duration is reported (see docs/bench.md).",
            ),
        ] = False,
        probe_seconds: Annotated[
            float,
            typer.Option(help="--capacity: seconds of live audio per probed stream count."),
        ] = 15.0,
        schedule: Annotated[
            str | None,
            typer.Option(
                metavar="aligned|ready",
                help="--capacity: how live streams are stepped. ready (the default, as serve's): "
                "each as soon as its chunk is there, as independent clients arrive; aligned: "
                "all together at the ticks of one clock of the chunk's period (a chunk waits "
                "at most one chunk for its tick, counted in the latency).",
            ),
        ] = None,
        ceiling: Annotated[
            str | None,
            typer.Option(
                metavar="N|FILE",
                help="--capacity: the engine's stream ceiling on this machine, or the JSON "
                "of scripts/capacity_cpu.py --out; the result is then also given as a "
                "fraction of it (see docs/performance.md).",
            ),
        ] = None,
        out: Annotated[
            Path,
            typer.Option(
                help="Folder for results.json and results.md, checked writable before "
                "anything runs; utterances.jsonl there grows as utterances finish."
            ),
        ] = Path("bench-results"),
        baseline: Annotated[
            Path | None,
            typer.Option(help="An earlier results.json to compare against."),
        ] = None,
        fail_on: Annotated[
            str | None,
            typer.Option(
                help="Exit 1 when a metric regresses past a bound against --baseline, "
                "e.g. 'wer+0.5,first_token_p90+50ms,throughput-10%'."
            ),
        ] = None,
        plot: Annotated[
            Path | None,
            typer.Option(
                help="Draw error rate against first-token latency to this PNG "
                "(needs matplotlib: pip install 'streamasr\\[plot]')."
            ),
        ] = None,
        verbose: VerboseOpt = False,
    ) -> None:
        """Accuracy, latency and speed over a test set; one table row per setting."""
        setup_logging(verbose)
        request = BenchRequest(
            dataset=dataset,
            model_options=model_options,
            limit=limit,
            audio_column=audio_column,
            text_column=text_column,
            metric=metric,
            realtime=realtime,
            streams=streams,
            workers=workers,
            ray=ray,
            capacity=capacity,
            probe_seconds=probe_seconds,
            schedule=schedule,
            ceiling=ceiling,
            out=out,
            baseline=baseline,
            fail_on=fail_on,
            plot=plot,
        )
        try:
            with cli_errors():
                regressed = run_bench(request)
        except KeyboardInterrupt:
            kept = out / RECORDS_NAME
            where = f"the finished utterances are in {kept}" if kept.is_file() else "nothing ran"
            if capacity and (out / "results.json").is_file():
                where = f"the probes finished are in {out / 'results.json'}, marked incomplete"
            if (out / "results.json").is_file() and kept.is_file():
                where += f" and in {out / 'results.json'}, marked incomplete"
            err_console.print(f"[yellow]interrupted; {escape(where)}[/yellow]", highlight=False)
            raise typer.Exit(EXIT_INTERRUPTED) from None
        if regressed:
            raise typer.Exit(1)


@dataclass(frozen=True)
class BenchRequest:
    """What `streamasr bench` was asked to do: the shared model options group (whose
    sweepable engine option, if given, may hold several values) and bench's own."""

    dataset: Path
    model_options: ModelOptions = ModelOptions()
    limit: int | None = None
    audio_column: str | None = None  # TSV/CSV datasets; None = found by name
    text_column: str | None = None
    metric: str = "auto"
    realtime: bool = False
    streams: str | int | None = None  # None: 1, or auto with --capacity
    workers: int = 1
    ray: str | None = None  # a Ray cluster's address ("local": one started here)
    capacity: bool = False
    probe_seconds: float = 15.0
    schedule: str | None = None  # --capacity's pacing (batch.SCHEDULES); None: ready
    ceiling: str | None = None  # --capacity: a stream count, or capacity_cpu.py's JSON
    out: Path = Path("bench-results")
    baseline: Path | None = None
    fail_on: str | None = None
    plot: Path | None = None

    def check(self) -> None:
        """Refuse impossible combinations before anything is loaded."""
        from streamasr.bench.metrics import METRICS
        from streamasr.bench.sweep import swept_option

        if self.capacity:
            from streamasr.commands.bench_capacity import check_capacity

            swept = swept_option(self.model_options.engine)
            if swept and any(sep in str(self.model_options.engine[swept]) for sep in ",/"):
                raise UsageError("--capacity measures one setting; give one value of the "
                                 "swept option")
            check_capacity(self)
        elif str(self.streams).strip() == "auto":
            raise UsageError("--streams auto searches the live streams a machine holds: "
                             "add --capacity, or give counts (1,2,4,8)")
        else:
            for flag, value in (("--schedule", self.schedule), ("--ceiling", self.ceiling)):
                if value is not None:
                    raise UsageError(f"{flag} applies to live streams paced by --capacity "
                                     "(--streams alone decodes unpaced batches); add --capacity "
                                     f"or drop {flag}")
        swept_option(self.model_options.engine)
        for n in self.capacity_counts() or self.stream_counts():
            check_number("--streams", n, 1, MAX_STREAMS, "(streams decoded in one batch)")
        if self.limit is not None and self.limit < 1:
            raise UsageError(f"--limit must be at least 1, got {self.limit}")
        from streamasr.bench.workers import check_workers

        check_workers(self.workers)
        if self.ray is not None:
            from streamasr.cluster.address import check_address

            check_address(self.ray)
            if self.workers > 1:
                raise UsageError("--ray spreads the utterances over the cluster's CPUs; drop "
                                 "--workers")
        if self.model_options.vad_gate and max(self.stream_counts()) > 1:
            raise UsageError("--vad-gate ends and reopens a stream at each gap, which a batched "
                             "step cannot; use it without --streams")
        if self.realtime and max(self.stream_counts()) > 1:
            raise UsageError("--realtime paces one live stream at a time; use it without --streams")
        if self.metric not in (*METRICS, "auto"):
            raise UsageError(f"--metric {self.metric!r}: use wer, cer, mer or auto")
        if self.fail_on and self.baseline is None:
            raise UsageError("--fail-on needs --baseline PREVIOUS/results.json to compare against")

    def stream_counts(self) -> list[int]:
        """--streams as a sorted list: '1,4,2' -> [1, 2, 4]."""
        from streamasr.bench.sweep import parse_int_list

        if self.capacity or self.streams is None:
            return [1]
        values = parse_int_list(str(self.streams), "--streams")
        return sorted(v for v in values if v is not None) or [1]

    def capacity_counts(self) -> list[int] | None:
        """--capacity's stream counts to probe; None: search (auto)."""
        if not self.capacity or self.streams is None or str(self.streams).strip() == "auto":
            return None
        from streamasr.bench.sweep import parse_int_list

        values = parse_int_list(str(self.streams), "--streams")
        return sorted(v for v in values if v is not None) or None


def run_bench(request: BenchRequest) -> bool:
    """Validate everything, run every setting, write and show results; True on regression."""
    from streamasr.bench import report
    from streamasr.bench.baseline import (
        check_baseline_matches,
        compare,
        comparison_lines,
        load_baseline,
        parse_fail_on,
    )
    from streamasr.bench.datasets import load_dataset
    from streamasr.bench.metrics import info_metric
    from streamasr.bench.outdir import RecordLog, check_out
    from streamasr.bench.results import write_results
    from streamasr.bench.runner import RunOptions
    from streamasr.bench.sweep import plan_settings, run_setting, swept_records
    from streamasr.bench.tables import TableColumns
    from streamasr.commands.bench_output import note_int8_batching, show_results
    from streamasr.commands.bench_passes import run_all, stopped_record
    from streamasr.commands.options import preflight

    group = request.model_options
    request.check()
    # an option the backend does not declare (--chunk on a NeMo model): refused before loading
    prepared = preflight(group, paced=request.realtime, sweep=True)
    entry, plan, stream, swept = prepared.entry, prepared.plan, prepared.feed, prepared.swept
    prepared.offer()
    if request.plot is not None:
        from streamasr.bench.plot import require_matplotlib

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
        metric = info_metric(info, group.model, [u.text for u in data.utterances])
    options = RunOptions(stream, metric=metric, realtime=request.realtime)
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
            "endpoint": asdict(stream.endpoint),
            "block_ms": group.block_ms,
            "tail_padding_s": group.tail_padding_s,
            "onset_dbfs": group.onset_dbfs,
            "vad": asdict(stream.vad),
            "metric": metric,
            "realtime": request.realtime,
            "streams": request.stream_counts(),
            "workers": request.workers,
            "limit": request.limit,
        }
    )
    if request.capacity:
        from streamasr.bench.report import dataset_record
        from streamasr.commands.bench_capacity import run_capacity

        check_out(request.out)
        run_capacity(request, settings[0], data.utterances, options, run, dataset_record(data))
        return False
    if request.workers > 1:
        from functools import partial

        from streamasr.bench.worker_passes import run_setting_in_workers

        run_setting = partial(run_setting_in_workers, workers=request.workers)
    check_out(request.out)
    if request.ray is not None:  # shards of utterances on a cluster: streamasr/cluster/
        from streamasr.cluster.shards import ray_runner

        run_setting, run["ray"] = ray_runner(request.ray, request.out)
    records = RecordLog(request.out)
    try:
        results, complete = run_all(
            settings,
            plan.engine,
            data.utterances,
            options,
            request.stream_counts(),
            run_setting,
            records.write,
        )
    finally:
        records.close()
    doc = report.results_document(run, report.dataset_record(data), results)
    doc["complete"] = complete
    if not complete:
        # stopped by a signal: what finished is written and shown, then the stop goes on
        doc["stopped"] = stopped_record(results, len(data.utterances) * len(settings))
        write_results(request.out, doc)
        show_results(doc, request.out)
        raise KeyboardInterrupt
    checks = compare(baseline, doc, rules) if baseline is not None else []
    write_results(request.out, doc, checks)
    show_results(doc, request.out)
    note_int8_batching(entry, settings, str(request.streams or 1))
    if request.plot is not None:
        from streamasr.bench.plot import plot_tradeoff

        plot_tradeoff(doc, request.plot)
        err_console.print(f"plot: {request.plot}", highlight=False, markup=False)
    if checks:
        err_console.print("[bold]against the baseline[/bold]")
        for line in comparison_lines(checks):
            err_console.print(line, highlight=False, markup=False)
    if all(s["summary"]["failed"] == s["summary"]["utterances"] for s in doc["settings"]):
        raise DatasetError("no utterance could be decoded; see the errors in results.json")
    failed = [c for c in checks if c.failed]
    if failed:
        err_console.print(
            f"[red]regression:[/red] {len(failed)} check(s) beyond --fail-on bounds",
            highlight=False,
        )
    return bool(failed)
