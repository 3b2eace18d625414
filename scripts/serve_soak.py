#!/usr/bin/env python
"""Soak `streamasr serve`: many short sessions, some broken off, then look for leaks.

    python scripts/serve_soak.py --sessions 10000 --concurrency 16
    python scripts/serve_soak.py --sessions 300                     # the test's size

Starts a server on 127.0.0.1 (one worker, so its memory is one process's) and runs
`--sessions` WebSocket sessions, `--concurrency` at a time. Each connects, streams one
second of a bundled clip and leaves in one of these ways, in a fixed rotation:

- `complete` (6 in 10): sends the end message, reads to the summary, closes normally;
- `close` (1 in 10): closes mid-utterance without the end message;
- `drop` (1 in 10): aborts the TCP connection mid-utterance (no close frame);
- `garbage` (1 in 10): a config that is not JSON, audio before the config, or PCM of odd
  length, in turn; the server must close it with 1007, 1003, 1007;
- `raw_tcp` (1 in 10): random bytes on a bare TCP connection (no WebSocket handshake).

Along the way it reads the server's resident memory (VmRSS) and open descriptors from
/proc, and at the end waits for the server's /metrics to settle and compares its counters
with what was done: no session left open, every WebSocket connection counted, every
completed utterance counted, every broken-off session in its close reason. Prints one JSON
object with the CPU model and load average; `leaks` lists what did not add up (empty: none).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import random
import re
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

import soundfile as sf

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # this checkout, installed or not

from streamasr.bench.report import cpu_model  # noqa: E402

CLIPS = sorted((REPO / "models" / "tiny-en" / "test_wavs").glob("*.wav"))
ROTATION = ("complete", "complete", "close", "complete", "drop", "complete", "garbage",
            "complete", "raw_tcp", "complete")
GARBAGE = ("bad_json", "audio_first", "odd_pcm")
EXPECTED_CLOSE = {"bad_json": 1007, "audio_first": 1003, "odd_pcm": 1007}
SESSION_S = 1.0
FRAME_S = 0.1
MAX_SESSIONS = 100_000
SETTLE_S = 30.0


def load_average() -> list[float]:
    return [round(value, 2) for value in os.getloadavg()]


def process_memory(pid: int) -> dict[str, int]:
    """Resident memory (kB) and open descriptors of a process, from /proc."""
    status = Path(f"/proc/{pid}/status").read_text()
    match = re.search(r"^VmRSS:\s+(\d+) kB", status, re.M)
    return {"rss_kb": int(match.group(1)) if match else -1,
            "fds": len(os.listdir(f"/proc/{pid}/fd"))}


def growth(points: list[dict[str, Any]], warmup: int) -> dict[str, Any]:
    """RSS growth per session after the first `warmup` sessions.

    `median_interval_kb`: the median over the intervals between readings. A leak grows
    every interval alike; the allocator's one-off steps (a larger batch than before makes
    the engine grow its buffers) move one interval only, so the median sees through them.
    """
    later = [p for p in points if p["sessions"] >= warmup]
    rates = [(b["rss_kb"] - a["rss_kb"]) / (b["sessions"] - a["sessions"])
             for a, b in itertools.pairwise(later) if b["sessions"] > a["sessions"]]
    overall = None
    if len(later) > 1 and later[-1]["sessions"] > later[0]["sessions"]:
        overall = (later[-1]["rss_kb"] - later[0]["rss_kb"]) / (
            later[-1]["sessions"] - later[0]["sessions"])
    return {"from_sessions": later[0]["sessions"] if later else None,
            "median_interval_kb": round(statistics.median(rates), 2) if rates else None,
            "overall_kb": round(overall, 2) if overall is not None else None,
            "intervals": len(rates)}


def mb(point: dict[str, Any]) -> float:
    return round(point["rss_kb"] / 1024, 1)


def read_metrics(http: str) -> str:
    with urllib.request.urlopen(http + "/metrics", timeout=30) as response:
        return str(response.read().decode())


def metric(text: str, name: str, labels: str = "") -> float:
    match = re.search(rf"^{re.escape(name + labels)} (\S+)$", text, re.M)
    return float(match.group(1)) if match else 0.0


def one_second(index: int) -> tuple[bytes, int]:
    data, rate = sf.read(CLIPS[index % len(CLIPS)], dtype="int16")
    return data[: int(SESSION_S * rate)].tobytes(), rate


class Soak:
    """Runs the sessions and tallies what each did."""

    def __init__(self, url: str, realtime: bool) -> None:
        self.url = url
        self.host, port = url.split("//", 1)[1].split("/", 1)[0].rsplit(":", 1)
        self.port = int(port)
        self.realtime = realtime
        self.audio = [one_second(index) for index in range(len(CLIPS))]
        self.done: Counter[str] = Counter()
        self.errors: list[str] = []

    async def session(self, index: int) -> None:
        kind = ROTATION[index % len(ROTATION)]
        try:
            if kind == "raw_tcp":
                await self.raw_tcp(index)
            elif kind == "garbage":
                await self.garbage(index)
            else:
                await self.speak(index, kind)
            self.done[kind] += 1
        except Exception as exc:  # counted and listed: the run goes on
            self.errors.append(f"session {index} ({kind}): {exc!r}"[:300])

    async def send_audio(self, ws: Any, data: bytes, rate: int, share: float) -> None:
        step = int(FRAME_S * rate) * 2
        stop = int(len(data) * share) // 2 * 2
        started = time.perf_counter()
        for position in range(0, stop, step):
            await ws.send(data[position : min(position + step, stop)])
            if self.realtime:
                due = started + (position + step) / 2 / rate
                await asyncio.sleep(max(0.0, due - time.perf_counter()))

    async def speak(self, index: int, kind: str) -> None:
        from websockets.asyncio.client import connect

        data, rate = self.audio[index % len(self.audio)]
        ws = await connect(self.url, max_size=None, open_timeout=60)
        try:
            await ws.send(json.dumps({"sample_rate": rate, "source": f"soak-{index}"}))
            if kind == "complete":
                await self.send_audio(ws, data, rate, 1.0)
                await ws.send(json.dumps({"type": "end"}))
                while json.loads(await ws.recv())["type"] != "summary":
                    pass
                await ws.close()
            elif kind == "close":
                await self.send_audio(ws, data, rate, 0.5)
                await ws.close()
            else:  # drop: the TCP connection goes, no close frame
                await self.send_audio(ws, data, rate, 0.5)
                ws.transport.abort()
        finally:
            if kind != "drop":
                await ws.close()

    async def garbage(self, index: int) -> None:
        from websockets.asyncio.client import connect
        from websockets.exceptions import ConnectionClosed

        what = GARBAGE[(index // len(ROTATION)) % len(GARBAGE)]
        data, rate = self.audio[index % len(self.audio)]
        async with connect(self.url, max_size=None, open_timeout=60) as ws:
            if what == "bad_json":
                await ws.send("{sample_rate: 16000,")
            elif what == "audio_first":
                await ws.send(data[:3200])
            else:
                await ws.send(json.dumps({"sample_rate": rate}))
                await ws.send(data[:3201])
            try:
                while True:
                    await asyncio.wait_for(ws.recv(), 60)
            except ConnectionClosed:
                pass
            code = ws.close_code
        if code != EXPECTED_CLOSE[what]:
            raise RuntimeError(f"{what}: closed with {code}, expected {EXPECTED_CLOSE[what]}")
        self.done[f"garbage_{what}"] += 1

    async def raw_tcp(self, index: int) -> None:
        _, writer = await asyncio.open_connection(self.host, self.port)
        writer.write(random.Random(index).randbytes(512))
        await writer.drain()
        writer.close()
        await writer.wait_closed()


def start_server(args: argparse.Namespace) -> tuple[subprocess.Popen[str], str, list[str]]:
    """The server, its URL and its stderr lines (read all along: a full pipe would stall it)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "streamasr", "serve", "--model", args.model, "--port", "0",
         "--host", "127.0.0.1", "--max-connections", str(args.concurrency * 2 + 8),
         "--workers", "1"],
        cwd=REPO, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
    )
    assert process.stderr is not None
    for line in process.stderr:
        match = re.search(r"listening on (ws://127\.0\.0\.1:\d+/ws)", line)
        if match:
            lines: list[str] = []
            threading.Thread(target=lines.extend, args=(process.stderr,), daemon=True).start()
            return process, match.group(1), lines
    raise SystemExit("serve_soak: the server did not start")


async def settle(http: str) -> str:
    """The /metrics text once no session is open (or after SETTLE_S)."""
    end = time.monotonic() + SETTLE_S
    while True:
        text = await asyncio.to_thread(read_metrics, http)
        if metric(text, "streamasr_active_sessions") == 0 or time.monotonic() > end:
            return text
        await asyncio.sleep(0.2)


async def run(args: argparse.Namespace, pid: int, url: str) -> dict[str, Any]:
    soak = Soak(url, args.realtime)
    http = url.replace("ws://", "http://").rsplit("/", 1)[0]
    points = [{"sessions": 0, **process_memory(pid)}]
    every = max(1, args.sessions // args.points)
    started = time.perf_counter()
    counter = iter(range(args.sessions))
    finished = 0

    async def worker() -> None:
        nonlocal finished
        for index in counter:
            await soak.session(index)
            finished += 1
            if finished % every == 0:
                points.append({"sessions": finished, **process_memory(pid)})

    await asyncio.gather(*(worker() for _ in range(args.concurrency)))
    wall = time.perf_counter() - started
    text = await settle(http)
    end = {"sessions": args.sessions, "settled": True, **process_memory(pid)}
    websocket_sessions = args.sessions - soak.done["raw_tcp"] - sum(
        1 for error in soak.errors if "(raw_tcp)" in error)
    garbage = Counter({what: soak.done[f"garbage_{what}"] for what in GARBAGE})
    expected = {
        "streamasr_active_sessions": 0,
        "streamasr_connections_total": websocket_sessions,
        "streamasr_utterances_total": soak.done["complete"],
        'streamasr_dropped_connections_total{reason="invalid_input"}':
            garbage["bad_json"] + garbage["odd_pcm"],
        'streamasr_dropped_connections_total{reason="unexpected_message"}':
            garbage["audio_first"],
    }
    found = {name: metric(text, name) for name in expected}
    leaks = [f"{name}: {found[name]:g}, expected {value}" for name, value in expected.items()
             if found[name] != value]
    warmup = int(args.sessions * args.warmup_share)
    warm = next((p for p in points if p["sessions"] >= warmup), points[-1])
    return {
        "sessions": args.sessions,
        "concurrency": args.concurrency,
        "realtime": args.realtime,
        "kinds": dict(sorted(soak.done.items())),
        "errors": soak.errors[:20],
        "error_count": len(soak.errors),
        "wall_s": round(wall, 1),
        "sessions_per_s": round(args.sessions / wall, 1),
        "metrics": found,
        "expected": expected,
        "leaks": leaks,
        "server_audio_s": round(metric(text, "streamasr_audio_seconds_total"), 1),
        "session_audio_bytes": int(SESSION_S * 16000) * 2,
        "rss_mb": {"start": mb(points[0]), "after_warmup": mb(warm),
                   "warmup_sessions": warm["sessions"], "end": mb(end)},
        "rss_growth_per_session": growth([*points, end], warmup),
        "fds": {"start": points[0]["fds"], "end": end["fds"]},
        "points": [*points, end],
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "load_average": {"before": args.load_before, "after": load_average()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--concurrency", type=int, default=16, help="sessions at a time")
    parser.add_argument("--points", type=int, default=10, help="memory readings on the way")
    parser.add_argument("--warmup-share", type=float, default=0.2,
                        help="share of the sessions before memory growth is judged")
    parser.add_argument("--model", default="tiny-en")
    parser.add_argument("--realtime", action="store_true", help="send the second at live speed")
    args = parser.parse_args()
    if not 1 <= args.sessions <= MAX_SESSIONS:
        parser.error(f"--sessions: 1 to {MAX_SESSIONS}")
    if not 1 <= args.concurrency <= 256:
        parser.error("--concurrency: 1 to 256")
    if not 1 <= args.points <= 100:
        parser.error("--points: 1 to 100")
    if not 0 <= args.warmup_share < 1:
        parser.error("--warmup-share: 0 to less than 1")
    args.load_before = load_average()
    process, url, log_lines = start_server(args)
    try:
        result = asyncio.run(run(args, process.pid, url))
    finally:
        process.terminate()
        process.wait(60)
    result["server_exit"] = process.returncode
    result["server_log_lines"] = len(log_lines)
    result["server_log_tail"] = [line.rstrip()[:200] for line in log_lines[-5:]]
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
