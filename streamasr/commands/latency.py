"""`streamasr latency` and `streamasr mask`: what a streaming setting costs, and why.

Both commands are arithmetic on settings (no model download, instant), except
`latency --measure`, which loads a local model through the backend registry (sherpa-onnx,
NeMo, or any `--backend`) and times its steps through the step protocol.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from streamasr.commands.common import (
    CHUNK_RANGE,
    check_number,
    check_threads,
    cli_errors,
    setup_logging,
)
from streamasr.errors import ModelError, UsageError
from streamasr.latency import (
    PUBLISHED_ALIASES,
    LatencyBudget,
    budget_for_zipformer2_chunk,
    budget_from_info,
    budget_from_metadata,
    catalog_budget,
    chunk_budget,
    measure_engine,
    nemo_budget,
    with_measurement,
)
from streamasr.mask import (
    MAX_LAYERS,
    STYLES,
    UNLIMITED,
    MaskReport,
    build_mask_report,
    check_mask_numbers,
    history_steps,
    lookahead_steps,
    parse_att_context_size,
)

OUTPUT_FORMATS = ("table", "json")
MEASURE_STEPS = 12

FormatOpt = Annotated[
    str, typer.Option("--format", "-f", help="table (for reading) or json (for scripts).")
]
AttContextOpt = Annotated[
    str | None,
    typer.Option(
        "--att-context-size",
        help="NeMo att_context_size LEFT,RIGHT in encoder steps, e.g. 70,13 (-1 = unlimited).",
    ),
]
LatencyAttOpt = Annotated[
    str | None,
    typer.Option(
        "--att-context-size",
        help="NeMo att_context_size LEFT,RIGHT in encoder steps, e.g. 70,13 (-1 = unlimited); "
        "with --model MODEL.nemo, the trained look-ahead to load (and --measure).",
    ),
]
StyleOpt = Annotated[
    str | None,
    typer.Option(help="NeMo att_context_style: chunked_limited (default) or regular (band)."),
]
LeftChunksOpt = Annotated[
    int | None,
    typer.Option(help="Earlier chunks each chunk attends to, WeNet/icefall style (-1 = all)."),
]


def _stdout_console() -> Console:
    """Rich console on stdout; wide enough for formulas when piped."""
    console = Console(highlight=False)
    if not console.is_terminal:
        console = Console(highlight=False, width=140)
    return console


def _check_format(fmt: str) -> None:
    if fmt not in OUTPUT_FORMATS:
        raise UsageError(f"--format {fmt!r} is not known; use one of: {', '.join(OUTPUT_FORMATS)}")


# --- latency -----------------------------------------------------------------------------


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
    fp32: bool,
    backend: str | None = None,
    decoder: str | None = None,
    device: str = "cpu",
) -> LatencyBudget:
    """Pick the arithmetic the options ask for and compute it (and measure, if asked)."""
    if att_context_size is not None and model is None and backend is None:
        if chunk is not None or measure or left_chunks is not None:
            raise UsageError(
                "--att-context-size alone describes a NeMo setting by arithmetic; drop "
                "--chunk, --left-chunks and --measure, or add --model MODEL.nemo to load "
                "(and --measure) that trained look-ahead"
            )
        left, right = parse_att_context_size(att_context_size)
        return nemo_budget(
            left, right, style=style or "chunked_limited", layers=layers or 17,
            subsampling=subsampling or 8,
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
        return budget_for_zipformer2_chunk(chunk)
    engine = _engine_of(model, backend)
    if engine != "sherpa-onnx":
        return _backend_budget(
            model, backend, chunk, att_context_size, decoder, device, measure, threads
        )
    if att_context_size is not None or decoder is not None:
        raise UsageError(
            f"--att-context-size and --decoder choose a NeMo model's look-ahead and head; "
            f"{model or 'the default model'} is a sherpa-onnx export: use --chunk"
        )
    if device != "cpu":
        raise UsageError(
            f"--device {device}: sherpa-onnx models run on the CPU here; drop --device"
        )
    return _model_budget(model, chunk, measure, threads, fp32, device)


def _engine_of(model: str | None, backend: str | None) -> str:
    """The backend that would load `model`, by name only (nothing is loaded).

    A released name that is not on disk stays with the catalog's arithmetic (sherpa-onnx's
    path), which knows NeMo releases too.
    """
    from streamasr.backends.registry import choose_backend
    from streamasr.distribution import catalog

    if backend is None and model is not None and not Path(model).exists():
        if catalog.find(model) is not None:
            return "sherpa-onnx"
    return choose_backend(model, backend).name


def _backend_budget(
    model: str | None,
    backend: str | None,
    chunk: int | None,
    att_context_size: str | None,
    decoder: str | None,
    device: str,
    measure: bool,
    threads: int,
) -> LatencyBudget:
    """Load the model through the registry; derive from what it declares, then measure."""
    from streamasr.backends.registry import choose_backend, engine_options, load_recognizer

    if chunk is not None:
        raise UsageError(
            "--chunk selects a sherpa-onnx export; this model's step comes from the model "
            "itself (for NeMo choose a trained look-ahead with --att-context-size L,R)"
        )
    att = parse_att_context_size(att_context_size) if att_context_size is not None else None
    given = {"att_context_size": att_context_size, "decoder": decoder}
    entry = choose_backend(model, backend)
    if att is not None and entry.option("att_context_size") is None:
        raise UsageError(
            f"--att-context-size chooses a NeMo model's trained look-ahead; the {entry.name} "
            "backend has none"
        )
    options = engine_options(entry, given, threads=threads, device=device)
    recognizer = load_recognizer(model, options, backend)
    info = recognizer.info
    if att is not None and "att_context_size" not in info.settings:
        raise UsageError(
            f"--att-context-size chooses a NeMo model's trained look-ahead; the {info.backend} "
            "backend has none"
        )
    budget = budget_from_info(info)
    if not measure:
        return budget
    timing = measure_engine(recognizer, steps=MEASURE_STEPS)
    return with_measurement(budget, timing, threads)


def _model_budget(
    model: str | None,
    chunk: int | None,
    measure: bool,
    threads: int,
    fp32: bool,
    device: str = "cpu",
) -> LatencyBudget:
    """A sherpa-onnx model's budget: a catalog name, an encoder file, a bundled model or a
    directory.

    Catalog names resolve through the catalog (settings, no download needed) and, for
    `--measure`, through the model cache the way `file --model NAME` finds them.
    """
    from streamasr.backends.sherpa.modeldir import list_bundled, resolve_model
    from streamasr.backends.sherpa.onnx_meta import read_encoder_metadata
    from streamasr.distribution import cache, catalog

    entry = catalog.find(model) if model is not None else None
    if model is not None and entry is not None and not Path(model).exists():
        if not measure:
            return catalog_budget(model, chunk)
        if not entry.exports:
            raise UsageError(
                f"--measure runs the model's files; {entry.name} is a NeMo FastConformer "
                "release, which is not downloaded here: pass --model PATH.nemo (its .nemo "
                "file or folder) to measure it, or drop --measure for its derived budget"
            )
        if cache.find_cached(model) is None:
            raise UsageError(
                f"--measure runs the real engine, so it needs the model's files; {model} is "
                f"not in the cache {cache.cache_dir()}. Download it with "
                f"`streamasr models pull {model}`, or pass --model DIR"
            )
    elif model is not None and model.endswith(".onnx") and Path(model).is_file():
        if measure:
            raise UsageError("--measure needs the model directory, not one .onnx file")
        meta = read_encoder_metadata(model)
        if chunk is not None and chunk != meta.chunk:
            raise UsageError(
                f"{Path(model).name} was exported for chunk {meta.chunk}, not --chunk {chunk}"
            )
        return budget_from_metadata(meta)
    elif model is not None and not Path(model).exists() and model not in list_bundled():
        if cache.find_cached(model) is None:  # a custom name pulled with --url/--archive
            raise ModelError(
                f"unknown model {model!r}: not a directory, a released model or a bundled one; "
                f"{catalog.did_you_mean(model, list_bundled())}. Or pass a model directory"
            )
    files = resolve_model(model, chunk, prefer_int8=not fp32)
    budget = budget_from_metadata(files.metadata)
    if not measure:
        return budget
    if threads < 1:
        raise UsageError(f"--threads {threads}: use 1 or more")
    from streamasr.backends.registry import engine_options, find_backend, load_recognizer

    given = {"chunk": files.chunk, "fp32": fp32}
    options = engine_options(find_backend("sherpa-onnx"), given, threads=threads, device=device)
    recognizer = load_recognizer(str(files.directory), options, "sherpa-onnx")
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
            help="Released model name (" + ", ".join(PUBLISHED_ALIASES) + "; pulled ones "
            "are found in the cache for --measure), a model directory, or an encoder .onnx "
            "file.",
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
                     "run and what they cost (sherpa-onnx, NeMo or any --backend)."),
    ] = False,
    backend: Annotated[
        str | None,
        typer.Option(help="Engine to load the model with: sherpa-onnx, nemo, or "
                     "module:ATTRIBUTE (default: chosen from the model)."),
    ] = None,
    decoder: Annotated[
        str | None,
        typer.Option(help="NeMo hybrid models: rnnt or ctc head (default: the model's)."),
    ] = None,
    device: Annotated[
        str, typer.Option(help="Where --measure runs the model: cpu, cuda or cuda:N (NeMo).")
    ] = "cpu",
    threads: Annotated[int, typer.Option(help="CPU threads for --measure.")] = 1,
    fp32: Annotated[bool, typer.Option("--fp32", help="Measure fp32 files even if int8 exist.")]
    = False,
    fmt: FormatOpt = "table",
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log details to stderr.")]
    = False,
) -> None:
    """The latency budget of a streaming setting, each figure with its formula."""
    setup_logging(verbose)
    with cli_errors():
        _check_format(fmt)
        _check_latency_numbers(chunk, layers, subsampling, left_chunks, threads)
        budget = build_budget(
            model=model, chunk=chunk, att_context_size=att_context_size, style=style,
            layers=layers, subsampling=subsampling, left_chunks=left_chunks,
            measure=measure, threads=threads, fp32=fp32, backend=backend, decoder=decoder,
            device=device,
        )
    if fmt == "json":
        typer.echo(json.dumps(budget.to_dict(), indent=2))
    else:
        render_budget(budget, _stdout_console())


# --- mask --------------------------------------------------------------------------------

VISIBLE, DEEP, MASKED = "■", "▒", "·"


def _mask_title(report: MaskReport) -> str:
    if report.source == "chunks":
        left = "all" if report.left_chunks == UNLIMITED else str(report.left_chunks)
        noun = "left chunk" if report.left_chunks == 1 else "left chunks"
        return f"chunk mask: chunk {report.chunk_size} steps, {left} {noun} (WeNet/icefall)"
    head = f"{report.style} att_context_size=[{report.left},{report.right}]"
    if report.chunk_size:
        left = "all" if report.left_chunks == UNLIMITED else str(report.left_chunks)
        return f"{head}: chunk_size = R + 1 = {report.chunk_size}, left_chunks = {left}"
    return f"{head}: band of {report.left} left, {report.right} right"


def render_mask(report: MaskReport, console: Console) -> None:
    """Draw query rows x key columns, chunk boundaries as rules, depth growth shaded."""
    n = report.steps
    starts = set(report.chunk_starts) - {0}
    deep = report.layers > 1
    console.print(Text(_mask_title(report), style="bold"))
    console.print(Text("rows: query step (output), columns: key step (input)", style="dim"))
    width = len(str(n - 1))

    def cells_header() -> Text:
        text = Text(" " * (width + 1))
        for j in range(n):
            if j in starts:
                text.append("│ ", style="dim")
            text.append(f"{j % 10} ", style="dim")
        return text

    header = cells_header()
    look1, hist1 = lookahead_steps(report.mask), history_steps(report.mask)
    lookn, histn = lookahead_steps(report.receptive), history_steps(report.receptive)
    label = "  look-ahead  history"
    if deep:
        label = f"  look-ahead (1 → {report.layers} layers)"
    header.append(label, style="dim")
    console.print(header)
    rule = "─" * (width + 1) + "".join("┼───" if j in starts else "──" for j in range(n))
    for i in range(n):
        if i in starts:
            console.print(Text(rule, style="dim"))
        row = Text(f"{i:>{width}} ")
        for j in range(n):
            if j in starts:
                row.append("│ ", style="dim")
            if report.mask[i, j]:
                row.append(VISIBLE + " ", style="green")
            elif deep and report.receptive[i, j]:
                row.append(DEEP + " ", style="yellow")
            else:
                row.append(MASKED + " ", style="dim")
        if deep:
            row.append(f"  +{look1[i]} → +{lookn[i]}")
        else:
            row.append(f"  +{look1[i]:<10} -{hist1[i]}")
        console.print(row)
    legend = f"{VISIBLE} attends   {MASKED} masked"
    if deep:
        legend = (f"{VISIBLE} attends in one layer   {DEEP} depends on it through "
                  f"{report.layers} layers   {MASKED} independent")
    console.print(Text(legend, style="dim"))
    worst1, worstn = max(look1), max(lookn)
    if deep:
        if worstn > worst1:
            verdict = (f"look-ahead grows with depth: {worst1} → {worstn} steps over "
                       f"{report.layers} layers (history {max(hist1)} → {max(histn)} steps)")
        else:
            verdict = (f"look-ahead stays at {worst1} steps through {report.layers} layers: "
                       f"no step sees past its chunk (history {max(hist1)} → {max(histn)} "
                       "steps)")
        console.print(verdict)
    else:
        console.print(f"worst-case look-ahead {worst1} steps, longest history {max(hist1)} steps")


def mask_command(
    steps: Annotated[int, typer.Option(help="Sequence length in encoder steps.")] = 12,
    att_context_size: AttContextOpt = None,
    style: Annotated[
        str, typer.Option(help="chunked_limited (chunk-aware) or regular (band).")
    ] = "chunked_limited",
    chunk: Annotated[
        int | None, typer.Option(help="Chunk in encoder steps (WeNet/icefall style).")
    ] = None,
    left_chunks: Annotated[
        int, typer.Option(help="Earlier chunks each chunk sees, with --chunk (-1 = all).")
    ] = UNLIMITED,
    layers: Annotated[
        int, typer.Option(help="Show which inputs each output depends on after N layers.")
    ] = 1,
    fmt: FormatOpt = "table",
) -> None:
    """Draw an attention mask, and its receptive field through depth."""
    with cli_errors():
        _check_format(fmt)
        if style not in STYLES:
            raise UsageError(f"--style {style!r} is unknown; use one of: {', '.join(STYLES)}")
        check_mask_numbers(steps, chunk, left_chunks, layers)
        acs = parse_att_context_size(att_context_size) if att_context_size else None
        report = build_mask_report(
            steps, att_context_size=acs, style=style, chunk=chunk, left_chunks=left_chunks,
            layers=layers,
        )
    if fmt == "json":
        typer.echo(json.dumps(report.to_dict()))
    else:
        render_mask(report, _stdout_console())


def register(app: typer.Typer) -> None:
    """Add `latency` and `mask` to the streamasr app."""
    app.command("latency")(latency_command)
    app.command("mask")(mask_command)
