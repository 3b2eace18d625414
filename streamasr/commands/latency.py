"""`streamasr latency` and `streamasr mask`: what a streaming setting costs, and why.

Both commands are arithmetic on settings (no model download, instant), except
`latency --measure`, which loads a local model by its plan (sherpa-onnx, NeMo, or any
`--backend`) and times its steps through the stepping core (session/measure.py).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from streamasr.analysis.latency import (
    LatencyBudget,
    chunk_budget,
    with_measurement,
)
from streamasr.analysis.mask import (
    MAX_LAYERS,
    UNLIMITED,
)
from streamasr.backends.base import BackendEntry, check_threads
from streamasr.backends.declared_budget import budget_from_info
from streamasr.backends.options import check_number
from streamasr.backends.plan import make_plan
from streamasr.backends.registry import choose_backend, released, settings_budget
from streamasr.commands.common import (
    CHUNK_RANGE,
    cli_errors,
    setup_logging,
)
from streamasr.commands.latency_options import (
    FormatOpt,
    LatencyAttOpt,
    LeftChunksOpt,
    StyleOpt,
    check_format,
    stdout_console,
)
from streamasr.commands.options import ModelOptions, with_model_options
from streamasr.distribution import catalog
from streamasr.errors import UsageError
from streamasr.session.measure import measure_engine

MEASURE_STEPS = 12
_NO_ENGINE_OPTIONS = ModelOptions()
#: the model group's options as latency means them: for --measure
LATENCY_HELP = {
    "backend": "Engine for --measure: sherpa-onnx, nemo, module:ATTRIBUTE.",
    "device": "Where --measure runs: cpu, cuda, cuda:N (NeMo).",
    "threads": "CPU threads for --measure.",
}


def _check_latency_numbers(
    chunk: int | None,
    layers: int | None,
    subsampling: int | None,
    left_chunks: int | None,
    threads: int,
) -> None:
    """Every number `latency` takes, in a range where its arithmetic means something."""
    check_number("--chunk", chunk, *CHUNK_RANGE, "frames")
    check_number("--layers", layers, 1, MAX_LAYERS, "layers")
    check_number("--subsampling", subsampling, 1, 64, "(FastConformer 8, U2 4)")
    check_number("--left-chunks", left_chunks, -1, 100_000, "(-1 = all)")
    check_threads(threads)


def build_budget(
    *,
    model: str | None,
    chunk: int | None,
    att_context_size: str | None,
    style: str | None,
    layers: int | None,
    subsampling: int | None,
    left_chunks: int | None,
    measure: bool,
    threads: int,
    backend: str | None = None,
    device: str = "cpu",
    engine: Mapping[str, object] | None = None,
) -> LatencyBudget:
    """Pick the arithmetic the options ask for and compute it (and measure, if asked).
    `engine`: the backends' other options given (--fp32, --decoder, -O NAME=VALUE), from
    the shared model options group."""
    if att_context_size is not None and model is None and backend is None:
        if chunk is not None or measure or left_chunks is not None:
            raise UsageError(
                "--att-context-size alone describes a NeMo setting by arithmetic; drop "
                "--chunk, --left-chunks and --measure, or add --model MODEL.nemo to load "
                "(and --measure) that trained look-ahead"
            )
        return _settings_budget(
            att_context_size=att_context_size, style=style, layers=layers,
            subsampling=subsampling,
        )
    if style is not None or layers is not None:
        raise UsageError("--style and --layers describe NeMo masks; use them with "
                         "--att-context-size LEFT,RIGHT")
    if subsampling is not None:
        if model is not None or measure or backend is not None:
            raise UsageError(
                "--subsampling with --chunk counts the chunk in encoder steps (WeNet U2 style) "
                "and reads no model; drop --model/--measure, or drop --subsampling"
            )
        if chunk is None:
            raise UsageError("--subsampling needs --chunk N (the chunk in encoder steps)")
        return chunk_budget(
            chunk, subsampling=subsampling,
            left_chunks=UNLIMITED if left_chunks is None else left_chunks,
        )
    if left_chunks is not None:
        raise UsageError("--left-chunks goes with --chunk N --subsampling S (WeNet U2 style)")
    if model is None and not measure and chunk is not None and backend is None:
        return _settings_budget(chunk=chunk)
    given = {
        "chunk": chunk, "att_context_size": att_context_size, **(engine or {}),
    }
    entry = choose_backend(model, backend)  # a released name: the engine its entry names
    release = catalog.find(model) if model and not Path(model).exists() else None
    if release is not None and release.engine == entry.name and not measure:
        # the engine's other options checked; --chunk picks among the released settings
        make_plan(model, backend, dict(given, chunk=None), threads=threads, device=device,
                  entry=entry)
        return released(release).budget(chunk)
    return _backend_budget(model, backend, entry, given, device, measure, threads)


def _settings_budget(**settings: int | str | None) -> LatencyBudget:
    """The arithmetic of settings alone, from the engine that owns them."""
    budget = settings_budget(settings)
    if budget is None:  # every built-in engine declares its arithmetic
        raise UsageError("no engine describes these settings; add --model MODEL")
    return budget


def _backend_budget(
    model: str | None,
    backend: str | None,
    entry: BackendEntry,
    given: Mapping[str, object],
    device: str,
    measure: bool,
    threads: int,
) -> LatencyBudget:
    """Ask the backend for its budget; one without its own arithmetic is loaded by the plan
    and its budget derived from what it declares. Then, if asked, the loaded model is measured
    here (session/measure.py steps it through the stepping core), never by the engine."""
    plan = make_plan(model, backend, given, threads=threads, device=device, entry=entry)
    declared = None if entry.budget is None else entry.budget(model, plan.engine, measure)
    if declared is not None and not measure:
        return declared  # the engine's arithmetic: nothing loads
    recognizer = plan.load(entry)  # chosen once, above
    budget = declared if declared is not None else budget_from_info(recognizer.info)
    if not measure:
        return budget
    timing = measure_engine(recognizer, steps=MEASURE_STEPS)
    return with_measurement(budget, timing, threads)


def render_budget(budget: LatencyBudget, console: Console) -> None:
    """The budget as a Rich table: quantity | value | formula, footnotes below."""
    table = Table(title=Text(budget.title), title_justify="left", show_lines=False)
    table.add_column("quantity")
    table.add_column("value", justify="right", no_wrap=True)
    table.add_column("formula")
    in_measured = False
    for line in budget.lines:
        if line.measured and not in_measured:
            table.add_section()
            in_measured = True
        value = Text(line.text, style="bold")
        if line.flagged:
            value = Text(f"{line.text} !", style="bold yellow")
        formula = Text(line.formula)
        if line.note:
            formula.append(f"\n{line.note}", style="yellow" if line.flagged else "dim")
        table.add_row(Text(line.quantity, style="cyan" if line.measured else ""), value, formula)
    console.print(table)
    for note in budget.notes:
        console.print(Text(note, style="dim"))


def latency_command(
    model: Annotated[
        str | None,
        typer.Option(
            "--model", "-m",
            help="Model name (`models list`), folder or encoder .onnx.",
        ),
    ] = None,
    chunk: Annotated[
        int | None,
        typer.Option(help="Chunk in 50 Hz frames (16 = 320 ms); with --subsampling, in "
                     "encoder steps."),
    ] = None,
    att_context_size: LatencyAttOpt = None,
    style: StyleOpt = None,
    layers: Annotated[
        int | None, typer.Option(help="Encoder layers, for the band style's growth (17).")
    ] = None,
    subsampling: Annotated[
        int | None,
        typer.Option(help="Frames of 10 ms per encoder step (NeMo 8; with --chunk: U2's 4)."),
    ] = None,
    left_chunks: LeftChunksOpt = None,
    measure: Annotated[
        bool,
        typer.Option("--measure", help="Load the model and measure when its encoder steps "
                     "run and what they cost."),
    ] = False,
    model_options: ModelOptions = _NO_ENGINE_OPTIONS,  # the group, spliced in at register
    fmt: FormatOpt = "table",
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log details to stderr.")]
    = False,
) -> None:
    """The latency budget of a streaming setting, each figure with its formula."""
    setup_logging(verbose)
    with cli_errors():
        check_format(fmt)
        threads, backend = model_options.threads, model_options.backend
        _check_latency_numbers(chunk, layers, subsampling, left_chunks, threads)
        budget = build_budget(
            model=model, chunk=chunk, att_context_size=att_context_size, style=style,
            layers=layers, subsampling=subsampling, left_chunks=left_chunks,
            measure=measure, threads=threads, backend=backend,
            device=model_options.device or "cpu",
            engine=model_options.engine,
        )
    if fmt == "json":
        typer.echo(json.dumps(budget.to_dict(), indent=2))
    else:
        render_budget(budget, stdout_console())


def register(app: typer.Typer) -> None:
    """Add `latency` and `mask` to the streamasr app."""
    from streamasr.commands.mask import mask_command

    # the engines' own options (--fp32, --decoder, a plugin's, -O) as file's and bench's;
    # --chunk and --att-context-size are latency's: arithmetic without a model, too
    latency = with_model_options(
        fields=("backend", "device", "threads"), own=("chunk", "att_context_size"),
        help_for=LATENCY_HELP, user_defaults=False,
    )(latency_command)
    app.command("latency")(latency)
    app.command("mask")(mask_command)
