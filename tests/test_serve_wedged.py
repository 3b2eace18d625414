"""`serve` whose engine step never returns, then SIGTERM: the server ends on its own.

The engine thread is stuck in C (tests/hang_backend.py locks a mutex it holds), so the drain
could never end: every session of that step, and every flush, waits for it. The server gives
up once the step has run 5 s (ENGINE_WEDGED_S), says so in one line and exits 143, instead of
waiting for ever (before: still running 20 s after SIGTERM).

With --workers 2 the worker holding the step ends itself that way, and the parent exits the
same non-zero status saying a worker abandoned a wedged step (before: exit 0, "open sessions
were flushed", although that worker's sessions got no final).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from serve_fixture import REPO, pcm

CLIP = str(REPO / "models" / "tiny-en" / "test_wavs" / "0.wav")
HANG_GUARD_S = 30  # a hang guard only: the server gives up 5 s into the stuck step


@pytest.mark.parametrize("workers", [1, 2])
def test_sigterm_ends_a_server_whose_engine_step_never_returns(
    tmp_path: Path, workers: int
) -> None:
    marker = tmp_path / "hung"
    env = {**os.environ, "PYTHONPATH": f"{REPO / 'tests'}{os.pathsep}{REPO}",
           "STREAMASR_TEST_HANG_MARKER": str(marker), "STREAMASR_TEST_HANG_AT_S": "1"}
    server = subprocess.Popen(
        [sys.executable, "-m", "streamasr", "serve", "--backend", "hang_backend:BACKEND",
         "--model", "hang", "--port", "0", "--host", "127.0.0.1", "--workers", str(workers)],
        cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    lines: list[str] = []
    ports: list[int] = []

    def read() -> None:
        assert server.stderr is not None
        for line in server.stderr:
            lines.append(line)
            found = re.search(r"listening on ws://127\.0\.0\.1:(\d+)/ws", line)
            if found:
                ports.append(int(found.group(1)))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 60
        while not ports:
            assert time.monotonic() < deadline and server.poll() is None, "".join(lines)
            time.sleep(0.05)
        threading.Thread(target=lambda: asyncio.run(_send_clip(ports[0])), daemon=True).start()
        while not marker.exists():  # the engine thread is about to hang
            assert time.monotonic() < deadline and server.poll() is None, "".join(lines)
            time.sleep(0.05)
        server.send_signal(signal.SIGTERM)  # default --grace-s 30: the server does not wait it
        code = server.wait(HANG_GUARD_S)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    reader.join(5)
    said = [line for line in lines if "engine step has not returned" in line]
    assert code == 128 + signal.SIGTERM, "".join(lines)
    assert len(said) == 1 and "Traceback" not in "".join(lines), "".join(lines)
    if workers > 1:  # the parent's own last line: not "flushed"
        assert "stopped; open sessions were flushed" not in "".join(lines), "".join(lines)
        assert "abandoned a wedged engine step" in lines[-1], "".join(lines)


async def _send_clip(port: int) -> None:
    """A client streaming a clip, then waiting: the step that hangs is one of its own."""
    from websockets.asyncio.client import connect
    from websockets.exceptions import ConnectionClosed

    data, rate = pcm(CLIP)
    try:
        async with connect(f"ws://127.0.0.1:{port}/ws") as ws:
            await ws.send(json.dumps({"sample_rate": rate, "format": "s16le"}))
            for start in range(0, len(data), 3200):
                await ws.send(data[start : start + 3200])
            async for _message in ws:
                pass
    except (ConnectionClosed, OSError):
        pass  # the server went away: what this test is about
