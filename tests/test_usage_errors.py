"""Usage errors Click finds (unknown option, missing argument, missing value) read like
streamasr's own: one `error:` line naming the --help to read, exit 2; `-h` is `--help`.

Each case runs the CLI in a fresh process, as a user does.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
WAV = str(ROOT / "models" / "tiny-en" / "test_wavs" / "1.wav")
NARROW = dict(os.environ, COLUMNS="40")  # Click's panel would wrap; one line must stay one


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "streamasr.cli", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=120, env=NARROW,
        stdin=subprocess.DEVNULL,
    )


@pytest.mark.parametrize(
    ("args", "says", "help_of"),
    [
        (["file", WAV, "--no-such-option"], "No such option: --no-such-option", "file"),
        (["file"], "Missing argument 'paths'", "file"),
        (["file", WAV, "--partials"], "Option '--partials' requires an argument", "file"),
        (["file", WAV, "--threads", "abc"], "Invalid value for '--threads'", "file"),
        (["models", "pull"], "Missing argument 'name'", "models pull"),
        (["models", "list", "--format", "xml"], "--format 'xml' is not known", None),
        (["no-such-command"], "No such command 'no-such-command'", ""),
    ],
)
def test_a_usage_error_is_one_line_and_exit_2(
    args: list[str], says: str, help_of: str | None
) -> None:
    done = cli(*args)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("error: ") and says in lines[0]
    if help_of is not None:  # Click's errors point at the help of the command it was parsing
        assert lines[0].endswith(f"see '{' '.join(['streamasr', help_of]).strip()} --help'")
    for box in ("╭", "│", "Usage:", "Traceback"):
        assert box not in done.stderr
    assert done.stdout == ""


@pytest.mark.parametrize(
    "args", [["-h"], ["file", "-h"], ["models", "list", "-h"], ["serve", "-h"]]
)
def test_dash_h_prints_the_help_like_help(args: list[str]) -> None:
    short = cli(*args)
    long = cli(*args[:-1], "--help")
    assert short.returncode == long.returncode == 0, short.stderr
    assert "Usage: streamasr" in short.stdout
    assert short.stdout == long.stdout


@pytest.mark.parametrize(
    ("args", "guess"),
    [
        (["file", WAV, "--bogus"], None),  # Click offered --gpu, --verbose
        (["file", WAV, "--verbos"], "(did you mean --verbose?)"),
        (["file", WAV, "--modl", "x"], "(did you mean --model?)"),
        (["serve", "--prot", "1"], "(did you mean --port?)"),
        (["file", WAV, "--rule", "1"], "(did you mean --rule1, --rule2 or --rule3?)"),
        (["models", "pull", "en", "--forse"], "(did you mean --force?)"),
    ],
)
def test_an_unknown_option_is_offered_only_options_close_to_it(
    args: list[str], guess: str | None
) -> None:
    done = cli(*args)
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.splitlines()
    if guess is None:
        assert "did you mean" not in line and "Possible" not in line, line
    else:
        assert guess in line, line
