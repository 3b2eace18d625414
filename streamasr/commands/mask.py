"""`streamasr mask`: draw an attention mask, and its receptive field through depth."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.console import Console
from rich.text import Text

from streamasr.analysis.mask import (
    STYLES,
    UNLIMITED,
    MaskReport,
    build_mask_report,
    check_mask_numbers,
    history_steps,
    lookahead_steps,
    parse_att_context_size,
)
from streamasr.commands.common import cli_errors
from streamasr.commands.latency_options import (
    AttContextOpt,
    FormatOpt,
    check_format,
    stdout_console,
)
from streamasr.errors import UsageError

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
        check_format(fmt)
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
        render_mask(report, stdout_console())
