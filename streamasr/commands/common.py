"""What every command shares: engine options on the command line, error handling, output."""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator
from typing import Annotated

import typer
from rich.console import Console

from streamasr.backends.base import EndpointOptions, EngineOptions
from streamasr.errors import StreamAsrError, UsageError
from streamasr.render import (
    FORMATS,
    JsonlRenderer,
    LiveRenderer,
    Renderer,
    SrtRenderer,
    TextRenderer,
)

err_console = Console(stderr=True, soft_wrap=True)

EXIT_INTERRUPTED = 130

ModelOpt = Annotated[
    str | None,
    typer.Option(
        "--model", "-m", help="Bundled model name or a sherpa-onnx model directory."
    ),
]
ChunkOpt = Annotated[
    int | None,
    typer.Option(
        help="Chunk in 50 Hz frames (16 = 320 ms). Selects the model export with that chunk; "
        "refused if the model has none."
    ),
]
Fp32Opt = Annotated[bool, typer.Option("--fp32", help="Use fp32 ONNX files even if int8 exist.")]
ThreadsOpt = Annotated[int, typer.Option(help="CPU threads for the engine.")]
DecodingOpt = Annotated[
    str, typer.Option(help="greedy_search or modified_beam_search.")
]
HotwordsOpt = Annotated[
    str | None,
    typer.Option(help="File of hotwords, one per line (needs modified_beam_search)."),
]
HotwordsScoreOpt = Annotated[float, typer.Option(help="Bonus per hotword token.")]
EndpointOpt = Annotated[
    bool, typer.Option(help="Cut the stream into utterances at silences (endpoint rules).")
]
Rule1Opt = Annotated[
    float,
    typer.Option(
        "--rule1", help="Endpoint after this many seconds of silence when nothing was recognised."
    ),
]
Rule2Opt = Annotated[
    float,
    typer.Option(
        "--rule2", help="Endpoint after this many seconds of silence following recognised text."
    ),
]
Rule3Opt = Annotated[
    float,
    typer.Option("--rule3", help="Endpoint any utterance longer than this many seconds."),
]
FormatOpt = Annotated[
    str | None,
    typer.Option(
        "--format",
        "-f",
        help="live (terminal default), text (one line per final; default when piped), "
        "jsonl (every event), srt (subtitles).",
    ),
]
BlockOpt = Annotated[
    float | None,
    typer.Option(
        "--block-ms", help="Feed block in ms (how much audio arrives at once); default one chunk."
    ),
]
TailOpt = Annotated[
    float,
    typer.Option(help="Seconds of silence appended at end of input so the last words come out."),
]
VerboseOpt = Annotated[bool, typer.Option("--verbose", "-v", help="Log details to stderr.")]


def engine_options(
    threads: int,
    decoding_method: str,
    hotwords: str | None,
    hotwords_score: float,
    endpoint: bool,
    rule1: float,
    rule2: float,
    rule3: float,
) -> EngineOptions:
    """Build engine settings from command-line values, refusing impossible ones."""
    for name, value in (("--rule1", rule1), ("--rule2", rule2), ("--rule3", rule3)):
        if value <= 0:
            raise UsageError(f"{name} must be a positive number of seconds, got {value}")
    return EngineOptions(
        threads=threads,
        decoding_method=decoding_method,
        hotwords_file=hotwords or "",
        hotwords_score=hotwords_score,
        endpoint=EndpointOptions(enabled=endpoint, rule1_s=rule1, rule2_s=rule2, rule3_s=rule3),
    )


def choose_format(fmt: str | None) -> str:
    """The output format: as asked, else live on a terminal and text when piped."""
    if fmt is None:
        return "live" if sys.stdout.isatty() else "text"
    if fmt not in FORMATS:
        raise UsageError(f"--format {fmt!r} is not known; use one of: {', '.join(FORMATS)}")
    return fmt


def make_renderer(fmt: str, realtime: bool) -> Renderer:
    """The renderer for a format, writing data to stdout and messages to stderr."""
    if fmt == "live":
        return LiveRenderer(Console(), err_console, realtime)
    if fmt == "jsonl":
        return JsonlRenderer(sys.stdout)
    if fmt == "srt":
        return SrtRenderer(sys.stdout, err_console, realtime)
    return TextRenderer(sys.stdout, err_console, realtime)


class _CurrentStderrHandler(logging.StreamHandler):
    """Writes to whatever sys.stderr is now (test runners and redirections swap it)."""

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr
        super().emit(record)


def setup_logging(verbose: bool) -> None:
    """Library logs go to stderr; warnings always, details with --verbose."""
    logger = logging.getLogger("streamasr")
    if not any(isinstance(h, _CurrentStderrHandler) for h in logger.handlers):
        handler = _CurrentStderrHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(levelname)s: %(message)s"))
        logger.addHandler(handler)
    logger.setLevel(logging.DEBUG if verbose else logging.WARNING)


def report_error(exc: StreamAsrError) -> None:
    """One line on stderr, no traceback."""
    err_console.print(f"[red]error:[/red] {exc}", highlight=False, soft_wrap=True)


@contextlib.contextmanager
def cli_errors() -> Iterator[None]:
    """Map streamasr errors to a message and exit code (usage 2, runtime 1)."""
    try:
        yield
    except StreamAsrError as exc:
        report_error(exc)
        raise typer.Exit(exc.exit_code) from exc
