"""What every command shares: number checks, error handling, output (the model options group
is in options.py)."""

from __future__ import annotations

import contextlib
import errno
import functools
import inspect
import logging
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console

from streamasr.backends.options import Setting
from streamasr.errors import InputError, OutputError, ReaderGone, StreamAsrError, UsageError
from streamasr.output.render import (
    FORMATS,
    PARTIALS,
    RENDERERS,
    Renderer,
    RenderTarget,
    escape,
    formats_help,
)
from streamasr.text.captions import CueRules
from streamasr.text.printable import printable

err_console = Console(stderr=True, soft_wrap=True)

EXIT_INTERRUPTED = 130
F = TypeVar("F", bound=Callable[..., Any])

# An upper bound is where a value stops meaning anything, not a limit on useful settings.
CHUNK_RANGE = (1, 1024)  # 50 Hz frames: 20 ms to 20 s

FormatOpt = Annotated[
    str | None,
    typer.Option(
        "--format",
        "-f",
        help=formats_help(),
    ),
]
PartialsOpt = Annotated[
    str,
    typer.Option(
        "--partials",
        help="jsonl partials: full, or delta (only what changed; for long utterances).",
    ),
]
VerboseOpt = Annotated[bool, typer.Option("--verbose", "-v", help="Log details to stderr.")]
QuietOpt = Annotated[
    bool,
    typer.Option(
        "--quiet",
        "-q",
        help="Captions only: stderr keeps warnings and errors.",
    ),
]
RawOpt = Annotated[
    str | None,
    typer.Option(
        "--raw",
        help="Headerless PCM: s16le, s32le or f32le (needs --rate).",
    ),
]
RateOpt = Annotated[
    int | None, typer.Option("--rate", help="Sample rate in Hz of --raw input.")
]
ChannelsOpt = Annotated[
    int | None,
    typer.Option("--channels", help="Interleaved channels of --raw input (default 1)."),
]

SentenceCaseOpt = Annotated[
    bool,
    typer.Option("--sentence-case", help="Finals in sentence case, for all-capitals models."),
]
PunctuateOpt = Annotated[
    str | None,
    typer.Option("--punctuate", metavar="MODEL",
                 help="Punctuate and case finals: punct-en or a folder."),
]


def choose_format(fmt: str | None) -> str:
    """The output format: as asked, else the configured one (config file or
    $STREAMASR_FORMAT), else live on a terminal and text when piped."""
    if fmt is None:
        from streamasr import config

        settings = config.load()
        if settings.format is not None and settings.format not in FORMATS:
            raise UsageError(
                f"format {settings.format!r} from the config ({settings.path}) or "
                f"$STREAMASR_FORMAT is not known; use one of: {', '.join(FORMATS)}"
            )
        fmt = settings.format
    if fmt is None:
        return "live" if sys.stdout.isatty() else "text"
    if "," in fmt:
        raise UsageError(
            f"--format {fmt}: several formats are written as files; add -o/--output-dir DIR "
            "(or give one format for standard output)"
        )
    if fmt == "txt":  # the file extension of text (what -o DIR writes)
        return "text"
    if fmt not in FORMATS:
        raise UsageError(f"--format {fmt!r} is not known; use one of: {', '.join(FORMATS)}")
    return fmt


def check_partials(partials: str, fmt: str) -> None:
    """--partials: full or delta, and only where partials are written (JSONL)."""
    if partials not in PARTIALS:
        raise UsageError(f"--partials {partials!r} is not known; use one of: {', '.join(PARTIALS)}")
    if partials != "full" and fmt != "jsonl":
        raise UsageError(f"--partials {partials} changes JSONL output; add --format jsonl")


def make_renderer(
    fmt: str, realtime: bool, partials: str = "full", quiet: bool = False, headers: bool = False,
    cues: CueRules | None = None,
) -> Renderer:
    """The renderer for a format (render.RENDERERS), writing data to stdout and messages to
    stderr (with `quiet`, no summary or first-token lines: JSONL's records are data and
    stay; with `headers`, several inputs are told apart; `cues`: subtitle cue rules)."""
    target = RenderTarget(
        None, err_console, realtime, partials, quiet, headers, cues or CueRules()
    )
    return RENDERERS[fmt].make(target)


class _CurrentStderrHandler(logging.StreamHandler):
    """Writes to whatever sys.stderr is now (test runners and redirections swap it)."""

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr
        super().emit(record)


class _PrintableFormatter(logging.Formatter):
    """Log lines whose control characters (from file names, a plugin's errors) are not sent
    to the terminal; a traceback (--verbose) keeps its lines."""

    def format(self, record: logging.LogRecord) -> str:
        return "\n".join(printable(line) for line in super().format(record).split("\n"))


def setup_logging(verbose: bool) -> None:
    """Library logs go to stderr; warnings always, details with --verbose."""
    logger = logging.getLogger("streamasr")
    if not any(isinstance(h, _CurrentStderrHandler) for h in logger.handlers):
        handler = _CurrentStderrHandler(sys.stderr)
        handler.setFormatter(_PrintableFormatter("%(levelname)s: %(message)s"))
        logger.addHandler(handler)
    logger.setLevel(logging.DEBUG if verbose else logging.WARNING)


def note(text: str, **style: Any) -> None:
    """A note for a person on stderr: wrapped at word boundaries on a terminal (the terminal
    itself would break a long line inside words), one line when piped (for grep)."""
    err_console.print(text, soft_wrap=not err_console.is_terminal, **style)


def report_error(exc: StreamAsrError | str) -> None:
    """One line on stderr, no traceback; brackets in names are printed, not read as markup.
    A reader that went away (`| head`) is said nothing about."""
    if isinstance(exc, ReaderGone):
        return
    err_console.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False, soft_wrap=True)


def output_error(exc: OSError) -> OutputError:
    """The one-line message for a write to stdout that failed."""
    if exc.errno == errno.EPIPE:
        return ReaderGone("the reading end of the pipe was closed")
    if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        why = f"{exc.strerror}; free some space or write elsewhere"
    elif exc.errno == errno.EBADF:
        why = "it is closed; give the command somewhere to write (e.g. > out.txt)"
    else:
        why = exc.strerror or str(exc)
    return OutputError(f"cannot write to standard output: {why}")


def silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's flush at exit has nothing to fail on.

    The Python docs advise this for SIGPIPE; it also covers a full disk.
    """
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
    finally:
        os.close(devnull)
    sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - lives until the process exits


@contextlib.contextmanager
def cli_errors() -> Iterator[None]:
    """Map streamasr errors to a message and exit code (usage 2, runtime 1)."""
    try:
        yield
    except StreamAsrError as exc:
        report_error(exc)
        raise typer.Exit(exc.exit_code) from exc


def spliced_parameters(
    signature: inspect.Signature, placeholder: str, group: list[inspect.Parameter]
) -> list[inspect.Parameter]:
    """A command's parameters with its `placeholder` replaced by a group of options (the
    model options, the cue options), all keyword-only: how an option group joins a command
    that Typer reads from its signature."""
    params: list[inspect.Parameter] = []
    for param in signature.parameters.values():
        if param.name == placeholder:
            params.extend(group)
        else:
            params.append(param.replace(kind=inspect.Parameter.KEYWORD_ONLY))
    return params


def with_settings(
    placeholder: str, settings: Sequence[Setting], defaults: object, build: Callable[..., Any]
) -> Callable[[F], F]:
    """Add the options a settings object declares (`Setting`s) where the command's
    `placeholder` parameter stands; the command gets `build(**values)`, checked before it runs
    (a bad value is one line and exit 2). The default shown is `defaults`' field of the name."""

    def decorate(command: F) -> F:
        signature = inspect.signature(command, eval_str=True)
        if placeholder not in signature.parameters:
            raise TypeError(f"{command.__name__} needs a parameter named {placeholder}")
        names = {f"{placeholder}_{setting.field}": setting for setting in settings}
        group = []
        for name, setting in names.items():
            default = getattr(defaults, setting.field, None)
            kind = setting.type or type(default)
            option = typer.Option(setting.flag, help=setting.help)
            group.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY,
                                           default=default, annotation=Annotated[kind, option]))
        params = spliced_parameters(signature, placeholder, group)

        @functools.wraps(command)
        def wrapper(**kwargs: Any) -> Any:
            values = {setting.field: kwargs.pop(name) for name, setting in names.items()}
            with cli_errors():
                kwargs[placeholder] = build(**values)
            return command(**kwargs)

        wrapper.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
        wrapper.__annotations__ = {p.name: p.annotation for p in params}
        return wrapper  # type: ignore[return-value]

    return decorate


def decode_each(paths: list[str], decode: Callable[[str], None]) -> None:
    """`file`'s inputs in turn, wherever they are decoded: a bad input fails alone (said, then
    the next one runs), Ctrl-C ends the run after `decode` flushed what was recognised (exit
    130), and a run with failed inputs ends with their count (exit 1)."""
    failed = 0
    for path in paths:
        try:
            decode(path)
        except InputError as exc:
            failed += 1
            report_error(exc)
        except KeyboardInterrupt:
            err_console.print("[yellow]interrupted; flushed what was recognised[/yellow]")
            raise typer.Exit(EXIT_INTERRUPTED) from None
    if failed:
        err_console.print(f"{failed} of {len(paths)} inputs failed", highlight=False)
        raise typer.Exit(1)
