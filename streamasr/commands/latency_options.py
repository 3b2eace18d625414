"""Options and output helpers that `streamasr latency` and `streamasr mask` share."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console

from streamasr.errors import UsageError

OUTPUT_FORMATS = ("table", "json")

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
        help="NeMo LEFT,RIGHT in encoder steps, e.g. 70,13 (-1 = unlimited); with a .nemo "
        "model, the trained look-ahead to load.",
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


def stdout_console() -> Console:
    """Rich console on stdout; wide enough for formulas when piped."""
    console = Console(highlight=False)
    if not console.is_terminal:
        console = Console(highlight=False, width=140)
    return console


def check_format(fmt: str) -> None:
    if fmt not in OUTPUT_FORMATS:
        raise UsageError(f"--format {fmt!r} is not known; use one of: {', '.join(OUTPUT_FORMATS)}")
