"""The `streamasr` command: a Typer app whose commands live in streamasr/commands/."""

from __future__ import annotations

import errno
import os
import sys
from typing import Any

import typer
from typer._click.exceptions import NoSuchOption
from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption

from streamasr.commands import coerce
from streamasr.commands.lazy import LazyCommand, lazy_group
from streamasr.version import __version__

coerce.install()  # plain option values without pydantic (streamasr/commands/coerce.py)

# The command table: each command's module is imported only when a command line names it
# (streamasr/commands/lazy.py); the help here is what the top-level --help lists.
COMMANDS = (
    LazyCommand(
        "file",
        "streamasr.commands.file",
        "Stream audio files in fixed blocks: live partials, finals, first-token timing.",
    ),
    LazyCommand(
        "devices",
        "streamasr.commands.mic",
        "List audio input devices: index, name, host API, channels, native rate (* default).",
    ),
    LazyCommand(
        "mic",
        "streamasr.commands.mic",
        "Live captions from a microphone: partials as you speak, a final per utterance.",
    ),
    LazyCommand(
        "bench",
        "streamasr.commands.bench",
        "Accuracy, latency and speed over a test set; one table row per setting.",
    ),
    LazyCommand(
        "latency",
        "streamasr.commands.latency",
        "The latency budget of a streaming setting, each figure with its formula.",
    ),
    LazyCommand(
        "mask",
        "streamasr.commands.latency",
        "Draw an attention mask, and its receptive field through depth.",
    ),
    LazyCommand(
        "serve",
        "streamasr.commands.serve",
        "Serve the model to many clients: WebSocket, OpenAI REST/Realtime, Wyoming; one engine.",
    ),
    LazyCommand(
        "models",
        "streamasr.commands.models",
        "Released models: list them, pull them into the cache (checksummed, resumable), "
        "verify them, print their folder.",
    ),
)

app = typer.Typer(
    name="streamasr",
    help="Streaming speech transcription: live partials, finals and honest latency figures.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=True,
    cls=lazy_group(COMMANDS),
    context_settings={"help_option_names": ["-h", "--help"]},  # every command inherits it
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"streamasr {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version."
    ),
) -> None:
    """Streaming speech transcription."""


def _flag_type(self: TyperOption, ctx: Any) -> str | None:
    """Help shows a flag's type only when it takes a value (`--realtime`, not `<bool>`)."""
    if self.is_flag:
        return None
    return _value_type(self, ctx)


_value_type = TyperOption.display_type_rich
TyperOption.display_type_rich = _flag_type  # type: ignore[method-assign]


def usage_name(self: TyperArgument) -> str:
    """An argument as the usage line shows it: `PATHS...`, `DATASET`, `[NAME]` (Typer's own
    `{paths}...` reads like a set or a format string)."""
    name = self.metavar or (self.name or "").upper()
    if not self.required:
        name = f"[{name}]"
    return name + ("..." if self.nargs != 1 else "")


TyperArgument._usage_display_name = usage_name  # type: ignore[method-assign]


def _compact(format_help: Any) -> Any:
    """-h that fits 80 columns (streamasr/commands/help_layout.py), loaded with the help."""

    def compact_help(self: Any, ctx: Any, formatter: Any) -> None:
        from streamasr.commands import help_layout

        help_layout.install()
        help_layout.place_help(self, ctx)
        written = self.help
        self.help = help_layout.reflow(written)  # the terminal wraps it, not the source
        try:
            format_help(self, ctx, formatter)
        finally:
            self.help = written

    return compact_help


TyperCommand.format_help = _compact(TyperCommand.format_help)  # type: ignore[method-assign]
TyperGroup.format_help = _compact(TyperGroup.format_help)  # type: ignore[method-assign]


class _GuardedStdout:
    """sys.stdout, except that a failed write or flush raises OutputError, not OSError.

    Typer turns a broken pipe into a silent exit 1 and lets a full disk end in a traceback;
    OutputError reaches run(), which says what happened in one line. Started with stdout
    closed, fd 1 is held on /dev/null (so no file the run opens lands there) and every write
    fails the same way.
    """

    def __init__(self, stream: object | None) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        if self._stream is None:
            raise _write_failed(OSError(errno.EBADF, "Bad file descriptor"))
        try:
            return self._stream.write(text)  # type: ignore[attr-defined]
        except OSError as exc:
            raise _write_failed(exc) from None

    def flush(self) -> None:
        if self._stream is None:
            return
        try:
            self._stream.flush()  # type: ignore[attr-defined]
        except OSError as exc:
            raise _write_failed(exc) from None

    def isatty(self) -> bool:
        return self._stream is not None and self._stream.isatty()  # type: ignore[attr-defined]

    def __getattr__(self, name: str) -> object:
        if self._stream is None:
            raise AttributeError(name)
        return getattr(self._stream, name)


def _write_failed(exc: OSError) -> Exception:
    from streamasr.commands.common import output_error

    return output_error(exc)


def _guard_stdout() -> None:
    """Install _GuardedStdout (holding fd 1 on /dev/null when it was closed)."""
    if sys.stdout is None:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 1)
    sys.stdout = _GuardedStdout(sys.stdout)


def run(args: list[str] | None = None) -> int:
    """Run one command line and return its exit status; every failure ends in one line.

    Beyond what Typer does: SIGINT, SIGTERM and SIGHUP stop a run like Ctrl-C (exit 130,
    143, 129), even while the main thread is stuck in an engine step (session/interrupts.py);
    a write to a closed or full stdout is a one-line error with exit 1, and so is a file name
    longer than the system allows.
    """
    from streamasr.commands.common import report_error, silence_stdout
    from streamasr.errors import OutputError, StreamAsrError
    from streamasr.memory import return_large_blocks
    from streamasr.session import interrupts

    return_large_blocks()  # before any model load: its freed blocks leave the process
    interrupts.install(report_error)
    _guard_stdout()
    from streamasr.cluster.address import expand_bare_ray

    args = expand_bare_ray(sys.argv[1:] if args is None else args)  # `--ray` alone: local
    try:
        code = _invoke(args)
    except OutputError as exc:
        report_error(exc)
        silence_stdout()
        code = exc.exit_code
    except StreamAsrError as exc:
        report_error(exc)
        code = exc.exit_code
    except OSError as exc:
        if exc.errno != errno.ENAMETOOLONG:
            raise
        name = str(exc.filename or "")
        short = name if len(name) <= 60 else name[:57] + "..."
        report_error(f"file name too long ({len(name)} characters): {short}; shorten it")
        code = 1
    stopped_by = interrupts.stopped_by()
    if stopped_by is not None:
        code = 128 + stopped_by
    if isinstance(sys.stdout, _GuardedStdout):
        try:
            sys.stdout.flush()
        except OutputError as exc:
            if code == 0:
                report_error(exc)
                code = exc.exit_code
            silence_stdout()
    return code


def _invoke(args: list[str] | None) -> int:
    """The Typer app without its own exit handling, so run() sees write errors."""
    from streamasr.commands.common import report_error as report_error_line

    try:
        result = app(args=args, standalone_mode=False, prog_name="streamasr")
    except typer.Abort:
        report_error_line("aborted")
        return 1
    except KeyboardInterrupt:
        return 130
    except typer.TyperException as exc:  # usage errors (unknown option, missing argument)
        return _usage_error(exc, args or [])
    return result if isinstance(result, int) else 0


def _usage_error(exc: typer.TyperException, args: list[str]) -> int:
    """A Typer/Click usage error as one line, like streamasr's own usage errors: what is
    wrong and which --help to read (not Click's usage line and boxed panel); exit 2.

    With no arguments a group has printed its help already (`streamasr models`).
    """
    from streamasr.commands.common import report_error

    code = int(getattr(exc, "exit_code", 2))
    if type(exc).__name__ == "NoArgsIsHelpError":
        return code
    format_message = getattr(exc, "format_message", None)
    message = format_message() if callable(format_message) else str(exc)
    if isinstance(exc, NoSuchOption):  # Click's guesses compared the dashes too
        message = _no_such_option(exc)
    message = " ".join(message.strip().rstrip(".").splitlines())
    report_error(f"{message}; see '{_help_path(exc, args)} --help'")
    return code


def _no_such_option(exc: NoSuchOption) -> str:
    """"No such option: --modl (did you mean --model?)", or without a guess when none is
    close (streamasr/commands/suggest.py)."""
    from streamasr.commands.suggest import close_options, did_you_mean

    ctx = exc.ctx
    names = [name for param in (ctx.command.get_params(ctx) if ctx else [])
             for name in (*param.opts, *param.secondary_opts)]  # fmt: skip
    return exc.message + did_you_mean(close_options(exc.option_name, names))


def _help_path(exc: typer.TyperException, args: list[str]) -> str:
    """The command whose --help answers the error: the one Click was parsing, else the
    command the line names (Click leaves out which when an option lacks its value)."""
    ctx = getattr(exc, "ctx", None)
    if ctx is not None:
        return str(ctx.command_path)
    named = next((arg for arg in args if not arg.startswith("-")), None)
    if named in {entry.name for entry in COMMANDS}:
        return f"streamasr {named}"
    return "streamasr"


def main() -> None:
    """Console-script entry point."""
    sys.exit(run())


if __name__ == "__main__":
    main()
