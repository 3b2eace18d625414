#!/usr/bin/env python
"""A bounded load run against `streamasr serve` on this machine (127.0.0.1 only).

    python scripts/serve_load.py --clients 8 --utterances 3            # starts its own server
    python scripts/serve_load.py --url ws://127.0.0.1:6006/ws --clients 16 --realtime
    python scripts/serve_load.py --clients 16 --realtime --workers 2     # two processes

N clients connect at once; each streams bundled clips (utterance after utterance over one
connection) and measures, per utterance: the time from its end message to the summary
(the wait for the last final), the wall-clock first-token latency the server reports for
real-time sessions, and whether the text equals a run with one client. Then the server's
/metrics: audio and compute seconds, streams per batched step. Prints one JSON object.

Bounded: at most 64 clients, 20 utterances each, and --limit-s seconds in all; traffic goes
only to a loopback address.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import soundfile as sf

REPO = Path(__file__).resolve().parent.parent
CLIPS = sorted((REPO / "models" / "tiny-en" / "test_wavs").glob("*.wav"))
LOOPBACK = ("127.0.0.1", "localhost", "::1")
MAX_CLIENTS = 64
MAX_UTTERANCES = 20
BLOCK_S = 0.1


def percentile(values: list[float], share: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(share * len(ordered)))], 4)


async def client(url: str, index: int, utterances: int, realtime: bool) -> list[dict[str, Any]]:
    from websockets.asyncio.client import connect

    rows = []
    async with connect(url, max_size=None) as ws:
        for number in range(utterances):
            path = CLIPS[(index + number) % len(CLIPS)]
            data, rate = sf.read(path, dtype="int16")
            await ws.send(json.dumps({"sample_rate": rate, "source": path.name,
                                      "realtime": realtime}))
            events: list[dict[str, Any]] = []

            async def read(collected: list[dict[str, Any]] = events) -> float:
                while True:
                    record = json.loads(await ws.recv())
                    collected.append(record)
                    if record["type"] == "summary":
                        return time.perf_counter()

            reader = asyncio.create_task(read())
            step = int(BLOCK_S * rate)
            started = time.perf_counter()
            for position in range(0, len(data), step):
                await ws.send(data[position : position + step].tobytes())
                if realtime:
                    due = started + (position + step) / rate
                    await asyncio.sleep(max(0.0, due - time.perf_counter()))
            ended = time.perf_counter()
            await ws.send(json.dumps({"type": "end"}))
            summary_at = await reader
            first = [e for e in events if e["type"] == "first_token"]
            rows.append({
                "clip": path.name,
                "text": events[-1]["text"],
                "audio_s": events[-1]["audio_s"],
                "end_to_summary_s": summary_at - ended,
                "first_token_wall_latency_s": first[0]["wall_latency_s"] if first else None,
            })
    return rows


def metric(text: str, name: str) -> float:
    match = re.search(rf"^{re.escape(name)} (\S+)$", text, re.M)
    return float(match.group(1)) if match else 0.0


def read_metrics(http: str) -> str:
    with urllib.request.urlopen(http + "/metrics", timeout=30) as response:
        return str(response.read().decode())


def start_server(args: argparse.Namespace) -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen(
        [sys.executable, "-m", "streamasr", "serve", "--model", args.model, "--port", "0",
         "--max-connections", str(MAX_CLIENTS), "--max-batch", str(args.max_batch),
         "--workers", str(args.workers)],
        cwd=REPO, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
    )
    assert process.stderr is not None
    for line in process.stderr:
        match = re.search(r"listening on (ws://127\.0\.0\.1:\d+/ws)", line)
        if match:
            return process, match.group(1)
    raise SystemExit("the server did not start")


async def run(args: argparse.Namespace, url: str) -> dict[str, Any]:
    baseline = {}
    for row in await client(url, 0, len(CLIPS), False):
        baseline[row["clip"]] = row["text"]
    http = url.replace("ws://", "http://").rsplit("/", 1)[0]
    before = await asyncio.to_thread(read_metrics, http)
    started = time.perf_counter()
    results = await asyncio.wait_for(
        asyncio.gather(
            *(client(url, index, args.utterances, args.realtime) for index in range(args.clients)),
            return_exceptions=True,
        ),
        args.limit_s,
    )
    wall = time.perf_counter() - started
    rows = [row for result in results if isinstance(result, list) for row in result]
    errors = [repr(result) for result in results if isinstance(result, BaseException)]
    waits = [row["end_to_summary_s"] for row in rows]
    firsts = [row["first_token_wall_latency_s"] for row in rows
              if row["first_token_wall_latency_s"] is not None]
    after = await asyncio.to_thread(read_metrics, http)

    def delta(name: str) -> float:
        return metric(after, name) - metric(before, name)

    steps = delta("streamasr_batch_streams_count")
    audio = sum(row["audio_s"] for row in rows)
    return {
        "clients": args.clients,
        "utterances": len(rows),
        "errors": errors,
        "realtime": args.realtime,
        "audio_s": round(audio, 2),
        "wall_s": round(wall, 2),
        "x_real_time": round(audio / wall, 2) if wall else None,
        "text_as_one_client": sum(row["text"] == baseline[row["clip"]] for row in rows),
        "end_to_summary_s": {"p50": percentile(waits, 0.5), "p90": percentile(waits, 0.9),
                             "max": percentile(waits, 1.0)},
        "first_token_wall_latency_s": {"p50": percentile(firsts, 0.5),
                                       "p90": percentile(firsts, 0.9)},
        "server_compute_s": round(delta("streamasr_compute_seconds_total"), 2),
        "server_audio_s": round(delta("streamasr_audio_seconds_total"), 2),
        "streams_per_step": round(delta("streamasr_batch_streams_sum") / steps, 2)
        if steps else None,
        "mean_end_to_summary_s": round(statistics.mean(waits), 3) if waits else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="ws://127.0.0.1:PORT/ws; default: start a server")
    parser.add_argument("--model", default="tiny-en", help="model of the server started here")
    parser.add_argument("--max-batch", type=int, default=32, help="of the server started here")
    parser.add_argument("--workers", type=int, default=1, help="of the server started here")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--utterances", type=int, default=3, help="per client")
    parser.add_argument("--realtime", action="store_true", help="send at live speed")
    parser.add_argument("--limit-s", type=float, default=120.0, help="the whole run, at most")
    args = parser.parse_args()
    if not 1 <= args.clients <= MAX_CLIENTS:
        parser.error(f"--clients: 1 to {MAX_CLIENTS}")
    if not 1 <= args.utterances <= MAX_UTTERANCES:
        parser.error(f"--utterances: 1 to {MAX_UTTERANCES}")
    if not 0 < args.limit_s <= 600:
        parser.error("--limit-s: more than 0, at most 600")
    process = None
    url = args.url
    if url is None:
        process, url = start_server(args)
    elif urlparse(url).hostname not in LOOPBACK:
        parser.error("--url: load runs go to this machine only (127.0.0.1, localhost, ::1)")
    try:
        print(json.dumps(asyncio.run(run(args, url)), indent=2))
    finally:
        if process is not None:
            process.terminate()
            process.wait(60)


if __name__ == "__main__":
    main()
