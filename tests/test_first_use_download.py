"""A catalog model named on the command line but not pulled: asked for on a terminal, a one-line
error elsewhere. Downloads come from a real HTTP server on 127.0.0.1 standing in for the
release host ($STREAMASR_MIRROR), and are checksummed as every pull is.
"""

from __future__ import annotations

import io
import os
import pty
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import read_terminal
from test_store import ArchiveServer

from streamasr.distribution import catalog

REPO = Path(__file__).resolve().parent.parent
CLIP = REPO / "models" / "tiny-en" / "test_wavs" / "4.wav"
# a catalog model without a published checksum, so the stand-in archive is trusted on first use
ALIAS = "en-kroko"


@pytest.fixture()
def mirror(tmp_path: Path) -> Iterator[tuple[ArchiveServer, dict[str, str]]]:
    entry = catalog.lookup(ALIAS)
    assert entry.archive_sha256 is None
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:bz2") as tar:
        tar.add(REPO / "models" / "tiny-random-transducer", arcname=entry.name)
    server = ArchiveServer()
    server.serve("/" + entry.url.rsplit("/", 1)[1], buffer.getvalue())
    env = dict(os.environ, PYTHONPATH=str(REPO), STREAMASR_HOME=str(tmp_path / "cache"),
               STREAMASR_MIRROR=server.url("/"), COLUMNS="200")
    yield server, env
    server.close()


def on_a_terminal(env: dict[str, str], answer: bytes, *args: str) -> tuple[int, str, str]:
    """Run with stdin and stderr on a terminal (stdout piped); type `answer` at the prompt."""
    controller, terminal = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "streamasr", *args], stdin=terminal,
                            stderr=terminal, stdout=subprocess.PIPE, env=env)
    os.close(terminal)
    seen = b""
    deadline = time.monotonic() + 120
    while b"download it now?" not in seen and time.monotonic() < deadline:
        seen += os.read(controller, 4096)
    os.write(controller, answer)
    seen += read_terminal(controller)
    stdout = proc.communicate(timeout=120)[0].decode()
    os.close(controller)
    return proc.returncode, stdout, seen.decode(errors="replace")


def test_a_terminal_user_is_asked_and_the_model_is_pulled_then_used(mirror) -> None:
    server, env = mirror
    code, stdout, screen = on_a_terminal(env, b"y\n", "file", str(CLIP), "-f", "text",
                                         "--model", ALIAS)
    assert code == 0, screen
    assert f"{ALIAS} (sherpa-onnx-streaming-zipformer-en-kroko-2025-08-06, 55 MB)" in screen
    assert "recorded on first download" in screen or "sha256" in screen
    same = subprocess.run([sys.executable, "-m", "streamasr", "file", str(CLIP), "-f", "text",
                           "--model", "tiny-random-transducer"], env=env, capture_output=True,
                          text=True, timeout=120)
    assert stdout.strip() == same.stdout.strip() and stdout.strip()
    assert len([r for r in server.state.requests if r[0].endswith(".tar.bz2")]) == 1


def test_no_is_one_line_and_nothing_is_downloaded(mirror) -> None:
    server, env = mirror
    code, stdout, screen = on_a_terminal(env, b"n\n", "file", str(CLIP), "--model", ALIAS)
    assert code == 1 and stdout.strip() == ""
    assert f"run `streamasr models pull {ALIAS}`" in screen
    assert server.state.requests == []


def test_without_a_terminal_it_is_one_line_with_the_pull_command(mirror) -> None:
    server, env = mirror
    done = subprocess.run([sys.executable, "-m", "streamasr", "file", str(CLIP), "--model", ALIAS],
                          env=env, capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 1
    assert f"streamasr models pull {ALIAS}" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and server.state.requests == []
