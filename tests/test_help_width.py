"""Every command's -h fits an 80-column terminal (issue 45: help that fits a terminal), and
--help at 120 columns says the same.

At COLUMNS=80 no line is wider than 80, nothing is cut with an ellipsis, every option's and
argument's help column keeps at least 40 characters, and the whole help is under 120 lines.
At COLUMNS=120 `--help` shows the same panels, holding the same options, and the same words.
The top level, every command and each `models` subcommand are rendered.
"""

from __future__ import annotations

import re
from collections import Counter

import pytest
from typer.testing import CliRunner

from streamasr.cli import COMMANDS, app

WIDTH = 80
WIDE = 120
HELP_COLUMN_MIN = 40
LINES_MAX = 120
#: An option's or argument's row in a panel: the border, the names (and type), two spaces,
#: its help.
ROW = re.compile(r"^│ (?:\*  )?(?:-|\[?[A-Z])\S.*?\S  +(?=\S)")
PANEL = re.compile(r"^╭─ (.+?) ─")
FRAME = re.compile(r"[│╭╮╰╯─]")


def _help(command: tuple[str, ...], flag: str = "-h", width: int = WIDTH) -> str:
    done = CliRunner().invoke(app, [*command, flag], env={"COLUMNS": str(width), "TERM": "dumb"})
    assert done.exit_code == 0, done.output
    return done.output


def _commands() -> list[tuple[str, ...]]:
    """The top level, every command, and each subcommand of a group (models list, ...)."""
    import typer.main
    from typer.core import TyperGroup

    root = typer.main.get_command(app)
    found: list[tuple[str, ...]] = [()]
    for entry in COMMANDS:
        found.append((entry.name,))
        command = root.load(entry.name)  # type: ignore[attr-defined]
        if isinstance(command, TyperGroup):
            found += [(entry.name, name) for name in command.commands]
    return found


def _panels(text: str) -> list[tuple[str, list[str]]]:
    """Each panel's title and the names in its first column (options, arguments, commands),
    as -h shows them; a name wrapped onto a second line is still one name."""
    panels: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        title = PANEL.match(line)
        if title:
            panels.append((title.group(1), []))
        elif line.startswith("│ ") and line[2:3] != " " and panels:
            cell = re.split(r" {2,}", line[2:].removeprefix("*  ").strip("│ "))[0]
            panels[-1][1].extend(re.findall(r"-{1,2}[\w-]+|\[?[A-Z][A-Z_]*\]?(?:\.\.\.)?|"
                                            r"^[a-z]\w*$", cell))  # fmt: skip
    return panels


def _words(text: str) -> Counter[str]:
    return Counter(FRAME.sub(" ", text).split())


@pytest.mark.parametrize("command", _commands(), ids=lambda c: " ".join(c) or "streamasr")
def test_help_fits_80_columns(command: tuple[str, ...]) -> None:
    text = _help(command)
    lines = text.splitlines()
    assert len(lines) < LINES_MAX, (command, len(lines))
    rows = 0
    for line in lines:
        assert len(line) <= WIDTH, (command, line)
        assert "…" not in line, (command, line)
        row = ROW.match(line)
        if row:
            rows += 1
            assert WIDTH - 2 - row.end() >= HELP_COLUMN_MIN, (command, line)
    assert rows, "no option rows found: the pattern no longer matches the layout"


@pytest.mark.parametrize("command", _commands(), ids=lambda c: " ".join(c) or "streamasr")
def test_help_at_120_columns_says_what_dash_h_says(command: tuple[str, ...]) -> None:
    short, wide = _help(command), _help(command, "--help", WIDE)
    assert max(len(line) for line in wide.splitlines()) > WIDTH  # it did use the width
    assert _panels(wide) == _panels(short)
    assert _words(wide) == _words(short)


def test_the_panel_reader_sees_every_option() -> None:
    """The comparison above is only as good as its reader: on file's help it must find the
    options of every kind (short and long names, a negative form, one with a metavar)."""
    panels = dict(_panels(_help(("file",))))
    assert panels["Arguments"] == ["PATHS..."]
    for panel, name in [("Model and engine", "-m"), ("Model and engine", "--engine-option"),
                        ("Endpoints and feed", "--no-endpoint"), ("Remote", "--ray")]:  # fmt: skip
        assert name in panels[panel], (panel, panels[panel])


@pytest.mark.parametrize(
    ("command", "usage"),
    [
        (("file",), "streamasr file [OPTIONS] PATHS..."),
        (("bench",), "streamasr bench [OPTIONS] DATASET"),
        (("models", "pull"), "streamasr models pull [OPTIONS] NAME"),
        (("models", "default"), "streamasr models default [OPTIONS] [NAME]"),
    ],
)
def test_the_usage_line_names_arguments_as_people_write_them(
    command: tuple[str, ...], usage: str
) -> None:
    """PATHS..., not Typer's `{paths}...`, which reads like a set or a format string."""
    first = next(line for line in _help(command).splitlines() if "Usage:" in line)
    assert first.split("Usage:", 1)[1].strip() == usage
