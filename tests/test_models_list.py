"""`models list` shows every model a command can run, and reads well at 80 columns.

Why: a user picks a model from this list; bundled models and models pulled under their own
name belong in it with what their files say, and a standard 80-column terminal must show one
readable line per model.
"""

from __future__ import annotations

import json
import os
import pty
import re
import subprocess
import sys
import tarfile
from pathlib import Path

from conftest import read_terminal

REPO = Path(__file__).resolve().parent.parent
MODELS = REPO / "models"


def streamasr(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, STREAMASR_HOME=str(home), PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "streamasr", *args], capture_output=True,
                          text=True, env=env, timeout=120)


def test_bundled_models_are_listed_with_what_their_files_say(tmp_path: Path) -> None:
    done = streamasr("models", "list", "--format", "json", home=tmp_path)
    assert done.returncode == 0, done.stderr
    rows = {row["name"]: row for row in json.loads(done.stdout)["models"]}
    tiny = rows["tiny-en"]
    assert tiny["installed"] == "bundled" and tiny["directory"] == str(MODELS / "tiny-en")
    assert (tiny["engine"], tiny["kind"], tiny["token_type"]) == ("sherpa-onnx", "transducer",
                                                                   "bpe")
    assert tiny["chunks"] == [16, 32] and tiny["chunk_label"] == "320/640 ms"
    assert rows["tiny-random-ctc"]["kind"] == "ctc"
    assert rows["tiny-random-cjkchar"]["token_type"] == "cjkchar"
    path = streamasr("models", "path", "tiny-en", home=tmp_path)
    assert path.returncode == 0 and path.stdout.strip() == str(MODELS / "tiny-en")


def test_a_model_pulled_under_its_own_name_is_described_from_its_files(tmp_path: Path) -> None:
    tarball = tmp_path / "my-ctc.tar.bz2"
    with tarfile.open(tarball, "w:bz2") as tar:
        tar.add(MODELS / "tiny-random-ctc", arcname="my-ctc")
    pulled = streamasr("models", "pull", "my-ctc", "--archive", str(tarball), home=tmp_path)
    assert pulled.returncode == 0, pulled.stderr
    rows = {r["name"]: r for r in json.loads(
        streamasr("models", "list", "--format", "json", home=tmp_path).stdout)["models"]}
    assert rows["my-ctc"]["installed"] == "yes"
    assert (rows["my-ctc"]["engine"], rows["my-ctc"]["kind"]) == ("sherpa-onnx", "ctc")


def test_an_80_column_terminal_gets_one_line_per_model(tmp_path: Path) -> None:
    controller, terminal = pty.openpty()
    env = dict(os.environ, STREAMASR_HOME=str(tmp_path), PYTHONPATH=str(REPO), COLUMNS="80",
               LINES="50", TERM="xterm")
    proc = subprocess.Popen([sys.executable, "-m", "streamasr", "models", "list"],
                            stdout=terminal, stderr=subprocess.DEVNULL, env=env)
    os.close(terminal)
    chunks = [read_terminal(controller)]
    proc.wait(timeout=60)
    os.close(controller)
    screen = re.sub(r"\x1b\[[0-9;]*m", "", b"".join(chunks).decode())
    lines = [line for line in screen.splitlines() if line.strip()]
    assert max(len(line) for line in lines) <= 80, screen
    for name in ("en-20M", "nemo-fastconformer-multi", "tiny-en", "tiny-random-ctc"):
        (row,) = [line for line in lines if line.split()[0] == name]
        assert "MB" in row or "bundled" in row, row


def test_the_footer_wraps_between_words_at_80_columns(tmp_path: Path) -> None:
    """The notes under the table, on an 80-column terminal: lines of at most 80 characters,
    broken between words (the terminal itself broke them inside words); piped, one line."""
    controller, terminal = pty.openpty()
    env = dict(os.environ, STREAMASR_HOME=str(tmp_path), PYTHONPATH=str(REPO), COLUMNS="80",
               TERM="xterm")
    proc = subprocess.Popen([sys.executable, "-m", "streamasr", "models", "list"],
                            stdout=subprocess.DEVNULL, stderr=terminal, env=env)
    os.close(terminal)
    chunks = [read_terminal(controller)]
    assert proc.wait(timeout=60) == 0
    os.close(controller)
    screen = re.sub(r"\x1b\[[0-9;]*m", "", b"".join(chunks).decode())
    notes = screen[screen.index("chunk: audio per encoder step") :].splitlines()
    assert len(notes) > 1 and max(len(line.rstrip()) for line in notes) <= 80, screen
    piped = streamasr("models", "list", home=tmp_path).stderr
    (line,) = [line for line in piped.splitlines() if line.startswith("chunk:")]
    assert " ".join(" ".join(notes).split()) == " ".join(line.split())
