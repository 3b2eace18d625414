"""A command pays only for itself: `streamasr file` does not import the other commands.

Why: every import is start-up time a user waits for before the first word, and the issue's
bar is the whole `streamasr file` process against a bare sherpa-onnx script. The command
table in cli.py keeps each command's module (and what it pulls in: bench's datasets and
workers, the server, the download stack with its progress bars) out of every other command.
Installed backend plugins are imported only when the command line may use one of their
options (or asks for --help, which lists them). Checked in a fresh process, the way a user
starts it, with the energy test engine installed as a plugin.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer.main
from plugin_site import energy_plugin_site
from typer.testing import CliRunner

from streamasr.cli import COMMANDS, app

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
WAV = REPO / "models" / "tiny-en" / "test_wavs" / "0.wav"

#: Modules of other commands, and what only they need; none may load for `file`.
NOT_FOR_FILE = (
    "streamasr.commands.bench",
    "streamasr.commands.serve",
    "streamasr.commands.models",
    "streamasr.commands.mic",
    "streamasr.commands.latency",
    "streamasr.bench",
    "streamasr.server",
    "streamasr.distribution.install",
    "streamasr.distribution.download",
    "rich.progress",
    "http.client",
    # Typer converts option values through pydantic; streamasr/commands/coerce.py does the
    # plain ones itself (~6 MB of resident memory less)
    "pydantic",
    "pydantic_core",
)

CHILD = """
import json, sys
from streamasr.cli import run
code = run(sys.argv[2:])
with open(sys.argv[1], "w") as out:
    json.dump(sorted(sys.modules), out)
sys.exit(code)
"""


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The energy engine (tests/energy_backend.py) installed as the plugin `energy`."""
    return energy_plugin_site(tmp_path_factory.mktemp("site"))


def _modules_after(
    tmp_path: Path, site: Path, *args: str
) -> tuple[subprocess.CompletedProcess, set[str]]:
    """Run one command line in a fresh interpreter; the modules it had imported at the end."""
    record = tmp_path / "modules.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(map(str, (site, HERE, REPO))))
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(record), *args],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done, set(json.loads(record.read_text()))


def _loaded(modules: set[str], name: str) -> bool:
    return any(m == name or m.startswith(name + ".") for m in modules)


@pytest.mark.parametrize("args", [("file", str(WAV)), ("file", "--help")],
                         ids=["file-run", "file-help"])
def test_file_does_not_import_the_other_commands(
    tmp_path: Path, site: Path, args: tuple[str, ...]
) -> None:
    done, modules = _modules_after(tmp_path, site, *args)
    assert "streamasr.commands.file" in modules  # the check below looks at a real run
    assert [name for name in NOT_FOR_FILE if _loaded(modules, name)] == []
    if "--help" in args:  # the engine options still come from the registry, plugins too
        assert "--chunk" in done.stdout and "--att-context-size" in done.stdout
        assert "--frame-ms" in done.stdout and "energy_backend" in modules
    else:
        assert done.stdout.strip()  # the transcript
        assert "energy_backend" not in modules  # no option of its on the line: not imported


def test_top_level_help_lists_every_command_with_its_own_help() -> None:
    result = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    group = typer.main.get_group(app)
    for entry in COMMANDS:
        assert entry.name in result.output
        assert entry.help in result.output
        real = group.load(entry.name)  # type: ignore[attr-defined]
        assert not real.hidden
        first_paragraph = " ".join((real.help or "").split("\n\n")[0].split())
        assert first_paragraph == entry.help, entry.name
