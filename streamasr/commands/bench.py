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
                help="Test set: LibriSpeech-style folder, Kaldi data dir, JSONL manifest or "
                "TSV/CSV table (docs/bench.md)."
            ),
        ],
        model_options: ModelOptions,
        limit: Annotated[int | None, typer.Option(help="Use only the first N utterances.")] = None,
        audio_column: Annotated[
            str | None,
            typer.Option(help="TSV/CSV: the audio path's column (default: by name)."),
        ] = None,
        text_column: Annotated[
            str | None,
            typer.Option(help="TSV/CSV: the reference's column (default: by name)."),
        ] = None,
        metric: Annotated[
            str,
            typer.Option(help="wer, cer, mer, or auto (by the model's language)."),
        ] = "auto",
        realtime: Annotated[
            bool,
            typer.Option(help="Feed at live speed; also report wall-clock latency (slow)."),
        ] = False,
        streams: Annotated[
            str | None,
            typer.Option(
                help="Also decode N utterances at once, batched (1,2,4,8 sweeps); "
                "--capacity: the counts to probe, or auto."
            ),
        ] = None,
        workers: Annotated[
            int,
            typer.Option(help="Worker processes, one engine each."),
        ] = 1,
        ray: Annotated[
            str | None,
            typer.Option(
                "--ray",
                metavar="[ADDRESS]",
                help="Decode the one-stream pass on a Ray cluster; alone: a local one "
                "(docs/ray.md).",
            ),
        ] = None,
        capacity: Annotated[
            bool,
            typer.Option(
                "--capacity",
                help="Find how many live streams this machine holds (docs/bench.md).",
            ),
        ] = False,
        probe_seconds: Annotated[
            float,
            typer.Option(help="--capacity: audio (s) per probe."),
        ] = 15.0,
        schedule: Annotated[
            str | None,
            typer.Option(
                metavar="aligned|ready",
                help="--capacity: ready (the default) or aligned.",
            ),
        ] = None,
        ceiling: Annotated[
            str | None,
            typer.Option(
                metavar="N|FILE",
                help="--capacity: the engine's stream ceiling, or its JSON "
                "(docs/performance.md).",
            ),
        ] = None,
        out: Annotated[
            Path,
            typer.Option(help="Folder for results.json, results.md and utterances.jsonl."),
        ] = Path("bench-results"),
        baseline: Annotated[
            Path | None,
            typer.Option(help="An earlier results.json to compare against."),
        ] = None,
        fail_on: Annotated[
            str | None,
            typer.Option(
                help="Exit 1 past a bound against --baseline, e.g. "
                "'wer+0.5,throughput-10%'."
            ),
        ] = None,
        plot: Annotated[
            Path | None,
            typer.Option(
                help="Plot error rate against first-token latency to this PNG "
                "(needs streamasr\\[plot])."
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
