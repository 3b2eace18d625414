"""Ctrl-C and SIGTERM stop a download at once, keep what arrived, and say how to resume.

Why: a download from a slow mirror is the longest thing streamasr does without output of its
own; a user who gives up must get the terminal back within a second or two, with a `.part`
file the next pull resumes from, never a half-installed model. Each case is a real
`streamasr models pull` process against a real HTTP server on 127.0.0.1 that trickles bytes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_store import ArchiveServer, build_archive

# the server sends one byte per TRICKLE_S, so a pull never finishes during the test
TRICKLE_S = 0.002


@pytest.fixture()
def trickling() -> Iterator[ArchiveServer]:
    srv = ArchiveServer()
    srv.state.trickle_s = TRICKLE_S
    yield srv
    srv.close()


def start_pull(home: Path, url: str) -> subprocess.Popen[str]:
    env = dict(os.environ, STREAMASR_HOME=str(home))
    return subprocess.Popen(
        [sys.executable, "-m", "streamasr", "models", "pull", "slow-model", "--url", url],
        env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
        # pytest may itself run with SIGINT ignored (a background job): give the child defaults
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def wait_for_part(home: Path, proc: subprocess.Popen[str], min_bytes: int = 200) -> Path:
    """The .part file once some bytes have arrived (the download is really under way)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        parts = list(home.glob("*.part"))
        if parts and parts[0].stat().st_size >= min_bytes:
            return parts[0]
        time.sleep(0.05)
    raise AssertionError("the download never started")


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_stops_a_download_at_once_and_keeps_the_part_to_resume(
    tmp_path: Path, trickling: ArchiveServer, sig: signal.Signals, code: int
) -> None:
    home = tmp_path / "cache"
    url = trickling.serve("/slow.tar.bz2", build_archive())
    proc = start_pull(home, url)
    part = wait_for_part(home, proc)
    sent = time.monotonic()
    proc.send_signal(sig)
    try:
        _, stderr = proc.communicate(timeout=10)
    finally:
        proc.kill()
    took_s = time.monotonic() - sent
    assert proc.returncode == code, stderr
    assert took_s < 3.0, f"took {took_s:.2f} s to stop"
    assert "Traceback" not in stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    # the bytes that arrived stay for the next pull to resume from; nothing is installed
    assert part.exists() and part.stat().st_size > 0
    assert not (home / "slow-model").exists()
