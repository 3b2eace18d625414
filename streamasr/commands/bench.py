"""`streamasr bench`: WER/CER, latency and speed over a test set, with sweeps and a run record."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Annotated

import typer

from streamasr.bench.outdir import RECORDS_NAME
from streamasr.bench.request import BenchRequest
from streamasr.bench.run import run_bench
from streamasr.cluster.address import check_address
from streamasr.cluster.shards import ray_runner
from streamasr.commands.bench_output import VIEW
from streamasr.commands.common import (
    EXIT_INTERRUPTED,
    VerboseOpt,
    cli_errors,
    err_console,
    setup_logging,
)
from streamasr.commands.options import ModelOptions, preflight, with_model_options
from streamasr.output.render import escape


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
            model=model_options.model,
            engine=model_options.engine,
            vad_gate=model_options.vad_gate,
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
                request.check()
                cluster = None
                if ray is not None:
                    check_address(ray)
                    cluster = partial(ray_runner, ray, out)
                # an option the backend does not declare (--chunk on a NeMo model): refused
                prepared = preflight(model_options, paced=realtime, sweep=True)
                prepared.offer()
                failed = run_bench(request, prepared, VIEW, cluster)
        except KeyboardInterrupt:
            kept = out / RECORDS_NAME
            where = f"the finished utterances are in {kept}" if kept.is_file() else "nothing ran"
            if capacity and (out / "results.json").is_file():
                where = f"the probes finished are in {out / 'results.json'}, marked incomplete"
            if (out / "results.json").is_file() and kept.is_file():
                where += f" and in {out / 'results.json'}, marked incomplete"
            err_console.print(f"[yellow]interrupted; {escape(where)}[/yellow]", highlight=False)
            raise typer.Exit(EXIT_INTERRUPTED) from None
        if failed:
            err_console.print(
                f"[red]regression:[/red] {failed} check(s) beyond --fail-on bounds",
                highlight=False,
            )
            raise typer.Exit(1)
