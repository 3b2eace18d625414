"""Commands whose modules are imported only when that command runs.

A command module pulls in what its command needs (bench: datasets and workers; models: the
download stack; serve: the server), and Typer's option parsing costs a little more for each
option it has to know about. `streamasr file` should pay for `file` alone, so the root group
starts with a light placeholder per command (its name and one-line help, enough for the
top-level --help and for completing command names) and swaps in the real command, built by
the module's own `register(app)`, the moment a command line names it.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

import typer
import typer.main
from typer import _click
from typer.core import TyperCommand, TyperGroup


@dataclass(frozen=True)
class LazyCommand:
    """One entry of the command table: where a command lives and what --help says of it."""

    name: str
    module: str  # a streamasr.commands module with register(app)
    help: str  # the first paragraph of the command's own help (tests compare them)


class LazyGroup(TyperGroup):
    """The root group: placeholders for --help, the real command once a line names it."""

    table: tuple[LazyCommand, ...] = ()

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        for entry in self.table:
            if entry.name not in self.commands:
                self.commands[entry.name] = _Placeholder(entry)

    def resolve_command(
        self, ctx: _click.Context, args: list[str]
    ) -> tuple[str | None, _click.Command | None, list[str]]:
        name, command, rest = super().resolve_command(ctx, args)
        if name is not None and isinstance(command, _Placeholder):
            command = self.load(name)
        return name, command, rest

    def load(self, name: str) -> _click.Command:
        """The real command `name` (its module imported and registered now, once)."""
        command = self.commands[name]
        if not isinstance(command, _Placeholder):
            return command
        app = typer.Typer()
        importlib.import_module(command.entry.module).register(app)
        built = typer.main.get_group(app).commands
        for entry in self.table:  # a module may register several (mic: mic and devices)
            if entry.module == command.entry.module and entry.name in built:
                self.commands[entry.name] = built[entry.name]
        return self.commands[name]


class _Placeholder(TyperCommand):
    """A command's name and help, standing in until the command is run."""

    def __init__(self, entry: LazyCommand) -> None:
        super().__init__(name=entry.name, help=entry.help)
        self.entry = entry


def lazy_group(table: tuple[LazyCommand, ...]) -> type[LazyGroup]:
    """A LazyGroup class over `table` (Typer builds the group from a class, not an object)."""
    return type("StreamAsrGroup", (LazyGroup,), {"table": table})
