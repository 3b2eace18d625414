"""A real `streamasr serve` process on 127.0.0.1 and the helpers its tests share."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import soundfile as sf

REPO = Path(__file__).resolve().parent.parent
WAVS = REPO / "models" / "tiny-en" / "test_wavs"
MODEL = "tiny-en"
START_LIMIT_S = 120.0  # a loaded machine may take this long to import and load the model

# what differs between two runs of the same audio: the clocks
CLOCK_FIELDS = ("wall_s", "compute_s", "rtf", "first_token_wall_latency_s", "wall_latency_s",
                "align_wait_ms", "align_wait_max_ms")


@dataclass
class ServerProcess:
    process: subprocess.Popen[str]
    port: int
    stderr_lines: list[str] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/ws"

    @property
    def http(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self, signum: int = signal.SIGTERM, timeout_s: float = 60.0) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signum)
        return self.process.wait(timeout_s)


@contextmanager
def serve(
    *args: str, env: dict[str, str] | None = None, model: str = MODEL
) -> Iterator[ServerProcess]:
    """Start `python -m streamasr serve --port 0 ARGS`, yield it once it listens, stop it."""
    command = [sys.executable, "-m", "streamasr", "serve", "--model", model, "--port", "0",
               "--host", "127.0.0.1", *args]
    process = subprocess.Popen(
        command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env={**os.environ, **(env or {})},
    )
    assert process.stderr is not None
    lines: list[str] = []
    found = threading.Event()
    port: list[int] = []

    def read() -> None:
        assert process.stderr is not None
        for line in process.stderr:
            lines.append(line)
            match = re.search(r"listening on wss?://127\.0\.0\.1:(\d+)/ws", line)
            if match and not port:
                port.append(int(match.group(1)))
                found.set()
        found.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    found.wait(START_LIMIT_S)
    if not port:
        process.kill()
        raise RuntimeError("server did not start:\n" + "".join(lines))
    server = ServerProcess(process, port[0], lines)
    try:
        yield server
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        reader.join(5)


def clip(index: int) -> str:
    """A bundled clip's path as the tests name it (relative to the repository)."""
    return f"models/tiny-en/test_wavs/{index}.wav"


def pcm(path: str) -> tuple[bytes, int]:
    """The clip's samples as s16le bytes, and its rate."""
    data, rate = sf.read(REPO / path, dtype="int16")
    return data.tobytes(), rate


def file_events(
    *paths: str, options: tuple[str, ...] = (), model: str = MODEL
) -> dict[str, list[dict[str, Any]]]:
    """What `streamasr file PATHS --format jsonl OPTIONS` prints, per source."""
    done = subprocess.run(
        [sys.executable, "-m", "streamasr", "file", *paths, "--model", model, "--format",
         "jsonl", *options],
        cwd=REPO, capture_output=True, text=True, check=True,
    )
    events: dict[str, list[dict[str, Any]]] = {path: [] for path in paths}
    for line in done.stdout.splitlines():
        record = json.loads(line)
        events[record["source"]].append(record)
    return events


def comparable(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Events without the fields a clock decides, nor the wire's version (`v`: the server's
    records carry it, `file --format jsonl` does not)."""
    drop = (*CLOCK_FIELDS, "v")
    return [{k: v for k, v in record.items() if k not in drop} for record in records]


async def stream_clip(ws: Any, path: str, frame_bytes: int = 3200, **config: Any) -> list[dict]:
    """One utterance over an open connection: config, frames, end; the events to the summary."""
    data, rate = pcm(path)
    await ws.send(json.dumps({"sample_rate": rate, "format": "s16le", "channels": 1,
                              "source": path, **config}))
    for start in range(0, len(data), frame_bytes):
        await ws.send(data[start : start + frame_bytes])
    await ws.send(json.dumps({"type": "end"}))
    return await read_until_summary(ws)


async def read_until_summary(ws: Any) -> list[dict]:
    events = []
    while True:
        record = json.loads(await ws.recv())
        events.append(record)
        if record["type"] == "summary":
            return events


def self_signed(folder: Path) -> tuple[Path, Path]:
    """A certificate and key for 127.0.0.1 in `folder` (openssl), for the TLS tests."""
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key


def http_get(url: str) -> tuple[int, str]:
    """Status and body of a GET (an HTTP error status is returned, not raised)."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def audio_fed_s(http: str) -> float | None:
    """The server's streamasr_audio_seconds_total: audio fed to its engine (None: /metrics
    does not show it, as before the first audio)."""
    metrics = http_get(f"{http}/metrics")[1]
    match = re.search(r"^streamasr_audio_seconds_total (\S+)$", metrics, re.MULTILINE)
    return float(match.group(1)) if match else None


def wait_for(condition: Any, limit_s: float = 30.0) -> bool:
    """Poll `condition()` until true or `limit_s` passes (for states, never for timings)."""
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.05)
    return bool(condition())
