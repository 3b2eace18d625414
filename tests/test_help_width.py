"""Every command's -h fits an 80-column terminal (issue 45: help that fits a terminal).

At COLUMNS=80 no line is wider than 80, nothing is cut with an ellipsis, every option's
help column keeps at least 40 characters, and `file -h` (the issue's measure) is under
120 lines. Every command and each `models` subcommand is rendered.
"""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

from streamasr.cli import COMMANDS, app

WIDTH = 80
HELP_COLUMN_MIN = 40
FILE_LINES_MAX = 120
#: An option's row in a panel: the border, the names (and type), two spaces, its help.
ROW = re.compile(r"^│ (?:\*  )?-\S.*?\S  +(?=\S)")


def _help(*command: str) -> str:
    done = CliRunner().invoke(app, [*command, "-h"], env={"COLUMNS": str(WIDTH), "TERM": "dumb"})
    assert done.exit_code == 0, done.output
    return done.output


def _commands() -> list[tuple[str, ...]]:
    """Every command, and each subcommand of a group (models list, pull, ...)."""
    import typer.main
    from typer.core import TyperGroup

    root = typer.main.get_command(app)
    found: list[tuple[str, ...]] = []
    for entry in COMMANDS:
        found.append((entry.name,))
        command = root.load(entry.name)  # type: ignore[attr-defined]
        if isinstance(command, TyperGroup):
            found += [(entry.name, name) for name in command.commands]
    return found


@pytest.mark.parametrize("command", _commands(), ids=" ".join)
def test_help_fits_80_columns(command: tuple[str, ...]) -> None:
    text = _help(*command)
    for line in text.splitlines():
        assert len(line) <= WIDTH, (command, line)
        assert "…" not in line, (command, line)
        row = ROW.match(line)
        if row:
            assert WIDTH - 2 - row.end() >= HELP_COLUMN_MIN, (command, line)


def test_file_help_is_under_120_lines() -> None:
    lines = _help("file").splitlines()
    assert len(lines) < FILE_LINES_MAX, len(lines)
