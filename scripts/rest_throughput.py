#!/usr/bin/env python
"""Throughput of `streamasr serve`'s OpenAI REST API beside `streamasr file` (127.0.0.1 only).

    python scripts/rest_throughput.py                      # starts its own server
    python scripts/rest_throughput.py --clients 1,4,16 --rounds 2 --model tiny-en
    python scripts/rest_throughput.py --url http://127.0.0.1:6006 --token TOKEN

For each client count N, N clients upload the bundled clips (models/tiny-en/test_wavs) to
POST /v1/audio/transcriptions at once, each every clip `--rounds` times, one upload after
another; the figure is audio seconds per wall second over the whole level. `streamasr
file` decodes the same clips (listed `--rounds` times) in one process: its figure is the
audio over the sum of its per-file wall times (the model's load left out, as the server
has loaded it already). Prints the CPU model and the load average before and after, and
says whether every upload's text equalled `file`'s (with the server's --max-batch above
1, an int8 model's text may differ: docs/performance.md). Timings are reported, never
checked.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import soundfile as sf

from streamasr.bench.report import cpu_model

REPO = Path(__file__).resolve().parent.parent
CLIPS = sorted(str(p.relative_to(REPO)) for p in (REPO / "models/tiny-en/test_wavs").glob("*.wav"))
#: The server's session defaults, as `streamasr file` options (uploads are decoded so).
LIVE = ("--block-ms", "100", "--tail-padding", "0.3")
MAX_CLIENTS = 64


@contextmanager
def own_server(model: str, max_batch: int) -> Iterator[str]:
    """`streamasr serve` on a free loopback port; its base URL."""
    command = [sys.executable, "-m", "streamasr", "serve", "--model", model, "--port", "0",
               "--host", "127.0.0.1", "--max-connections", str(MAX_CLIENTS + 4),
               "--max-batch", str(max_batch)]  # fmt: skip
    process = subprocess.Popen(command, cwd=REPO, stderr=subprocess.PIPE, text=True)
    assert process.stderr is not None
    try:
        for line in process.stderr:
            match = re.search(r"listening on ws://127\.0\.0\.1:(\d+)/ws", line)
            if match:
                yield f"http://127.0.0.1:{match.group(1)}"
                return
        raise SystemExit("the server did not start")
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(60)


@contextmanager
def given_server(url: str) -> Iterator[str]:
    yield url.rstrip("/")


def file_reference(model: str, rounds: int) -> tuple[dict[str, str], float, float]:
    """`streamasr file` on the clips: (text per clip, audio seconds, summed wall seconds)."""
    done = subprocess.run(
        [sys.executable, "-m", "streamasr", "file", *CLIPS * rounds, "--model", model,
         "--format", "jsonl", *LIVE],
        cwd=REPO, capture_output=True, text=True, check=True,
    )  # fmt: skip
    texts: dict[str, str] = {}
    finals: list[str] = []
    audio_s = wall_s = 0.0
    for line in done.stdout.splitlines():
        record = json.loads(line)
        if record["type"] == "final" and record["text"].strip():
            finals.append(record["text"].strip())
        elif record["type"] == "summary":
            texts[record["source"]] = " ".join(finals)
            finals = []
            audio_s += record["audio_s"]
            wall_s += record["wall_s"]
    return texts, audio_s, wall_s


async def level(base: str, token: str | None, clients: int, rounds: int,
                expected: dict[str, str]) -> tuple[float, float, bool]:  # fmt: skip
    """N clients at once: (audio seconds, wall seconds, every text equal to file's)."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    data = {clip: (REPO / clip).read_bytes() for clip in CLIPS}
    durations = {clip: sf.info(REPO / clip).duration for clip in CLIPS}
    same = True

    async def client(http: httpx.AsyncClient) -> float:
        nonlocal same
        audio_s = 0.0
        for clip in CLIPS * rounds:
            response = await http.post(
                base + "/v1/audio/transcriptions", headers=headers,
                files={"file": (Path(clip).name, data[clip])}, data={"model": "tiny-en"},
            )  # fmt: skip
            response.raise_for_status()
            same = same and response.json()["text"] == expected[clip]
            audio_s += durations[clip]
        return audio_s

    limits = httpx.Limits(max_connections=clients)
    async with httpx.AsyncClient(timeout=300, limits=limits) as http:
        start = time.perf_counter()
        audio = await asyncio.gather(*(client(http) for _ in range(clients)))
        wall = time.perf_counter() - start
    return sum(audio), wall, same


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="a running server's base URL (else one is started)")
    parser.add_argument("--token", help="its token (serve --token-file)")
    parser.add_argument("--model", default="tiny-en")
    parser.add_argument("--clients", default="1,4,16", help="client counts, comma-separated")
    parser.add_argument("--rounds", type=int, default=2, help="times each client sends each clip")
    parser.add_argument("--max-batch", type=int, default=32, help="the started server's")
    args = parser.parse_args()
    counts = [int(n) for n in args.clients.split(",")]
    if not all(1 <= n <= MAX_CLIENTS for n in counts) or not 1 <= args.rounds <= 20:
        parser.error(f"clients 1 to {MAX_CLIENTS}, rounds 1 to 20")
    if args.url and not re.match(r"https?://(127\.0\.0\.1|localhost|\[::1\])[:/]", args.url):
        parser.error("--url must be a loopback address")
    print(f"CPU: {cpu_model()}, {os.cpu_count()} cores; load average before: "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")  # fmt: skip
    expected, file_audio_s, file_wall_s = file_reference(args.model, args.rounds)
    print(f"streamasr file {' '.join(LIVE)}: {file_audio_s:.1f} s audio in {file_wall_s:.2f} s "
          f"= {file_audio_s / file_wall_s:.1f} audio s per wall s (one process, one stream)")
    server = given_server(args.url) if args.url else own_server(args.model, args.max_batch)
    with server as base:
        for clients in counts:
            audio_s, wall_s, same = asyncio.run(
                level(base, args.token, clients, args.rounds, expected)
            )
            print(f"REST, {clients:>2} concurrent uploads: {audio_s:.1f} s audio in "
                  f"{wall_s:.2f} s = {audio_s / wall_s:.1f} audio s per wall s; "
                  f"texts {'equal' if same else 'NOT all equal'} to file's")  # fmt: skip
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
