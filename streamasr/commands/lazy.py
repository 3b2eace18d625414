"""Commands whose modules are imported only when that command runs.

A command module pulls in what its command needs (bench: datasets and workers; models: the
download stack; serve: the server), and Typer's option parsing costs a little more for each
option it has to know about. `streamasr file` should pay for `file` alone, so the root group
starts with a light placeholder per command (its name and one-line help, enough for the
top-level --help and for completing command names) and swaps in the real command, built by
the module's own `register(app)`, the moment a command line names it.

Installed backend plugins are imported for their options only when the command line may use
one: the command is built first with the built-in engines' options, and built again with the
plugins' when a token on the line is not one of its options (a plugin's option, or --help,
which lists them all) or when the shell asks for completions.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import typer
import typer.main
from typer import _click
from typer.core import TyperCommand, TyperGroup

from streamasr.commands import help_layout


@dataclass(frozen=True)
class LazyCommand:
    """One entry of the command table: where a command lives and what --help says of it."""

    name: str
    module: str  # a streamasr.commands module with register(app)
    help: str  # the first paragraph of the command's own help (tests compare them)


_plugins_wanted = True


def plugin_options_wanted() -> bool:
    """Whether option groups built now include installed plugins' options (commands/options.py
    asks; False only while LazyGroup builds a command the first time)."""
    return _plugins_wanted


@contextmanager
def _plugin_options(wanted: bool) -> Iterator[None]:
    global _plugins_wanted
    saved, _plugins_wanted = _plugins_wanted, wanted
    try:
        yield
    finally:
        _plugins_wanted = saved


class LazyGroup(TyperGroup):
    """The root group: placeholders for --help, the real command once a line names it."""

    table: tuple[LazyCommand, ...] = ()

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        self._without_plugins: set[str] = set()
        for entry in self.table:
            if entry.name not in self.commands:
                self.commands[entry.name] = _Placeholder(entry)

    def resolve_command(
        self, ctx: _click.Context, args: list[str]
    ) -> tuple[str | None, _click.Command | None, list[str]]:
        name, command, rest = super().resolve_command(ctx, args)
        if name is not None and isinstance(command, _Placeholder):
            command = self.load(name, plugins=ctx.resilient_parsing)
        if name is not None and name in self._without_plugins and _unknown_option(command, rest):
            command = self.load(name, plugins=True)
        return name, command, rest

    def load(self, name: str, plugins: bool = True) -> _click.Command:
        """The real command `name`: its module imported and registered now, once, and once
        more with the plugins' options when they are wanted and were left out."""
        command = self.commands[name]
        if not isinstance(command, _Placeholder) and not (
            plugins and name in self._without_plugins
        ):
            return command
        entry = next(e for e in self.table if e.name == name)
        app = typer.Typer()
        with _plugin_options(plugins):
            importlib.import_module(entry.module).register(app)
            built = typer.main.get_group(app).commands
        for other in self.table:  # a module may register several (mic: mic and devices)
            if other.module == entry.module and other.name in built:
                help_layout.assign_panels(built[other.name])
                self.commands[other.name] = built[other.name]
                if plugins:
                    self._without_plugins.discard(other.name)
                else:
                    self._without_plugins.add(other.name)
        return self.commands[name]


def _unknown_option(command: _click.Command | None, args: Sequence[str]) -> bool:
    """Whether a token that looks like an option is not one of `command`'s own (--help is
    not: its listing should show every option)."""
    if command is None:
        return False
    known = {opt for param in command.params for opt in (*param.opts, *param.secondary_opts)}
    for token in args:
        if token == "--":
            return False
        if token.startswith("-") and token != "-" and token.partition("=")[0] not in known:
            return True
    return False


class _Placeholder(TyperCommand):
    """A command's name and help, standing in until the command is run."""

    def __init__(self, entry: LazyCommand) -> None:
        super().__init__(name=entry.name, help=entry.help)
        self.entry = entry


def lazy_group(table: tuple[LazyCommand, ...]) -> type[LazyGroup]:
    """A LazyGroup class over `table` (Typer builds the group from a class, not an object)."""
    return type("StreamAsrGroup", (LazyGroup,), {"table": table})
