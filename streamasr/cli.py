"""The `streamasr` command: a Typer app whose commands live in streamasr/commands/."""

from __future__ import annotations

import typer

from streamasr import __version__
from streamasr.commands import bench as bench_commands
from streamasr.commands import file as file_commands
from streamasr.commands import latency as latency_commands
from streamasr.commands import mic as mic_commands
from streamasr.commands import models as models_commands

app = typer.Typer(
    name="streamasr",
    help="Streaming speech transcription: live partials, finals and honest latency figures.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
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


file_commands.register(app)
mic_commands.register(app)
bench_commands.register(app)
latency_commands.register(app)
models_commands.register(app)


def main() -> None:
    """Console-script entry point."""
    app()


if __name__ == "__main__":
    main()
