#!/usr/bin/env python
"""Fan-out load on a `streamasr serve` room: 1 publisher, many viewers (127.0.0.1 only).

    python scripts/room_load.py --viewers 500 --duration-s 30     # starts its own server
    python scripts/room_load.py --viewers 50 --sse-share 1.0      # SSE viewers only

Starts a server (one worker), then runs the same talk twice: the bundled clips streamed at
live speed (100 ms messages) for --duration-s, one utterance per clip, as a publisher to a
room, first with no viewer (the baseline), then with --viewers viewers (WebSocket, and a
--sse-share of Server-Sent Events), spread over --procs client processes so the clients'
own Python work does not all fall on one core.

Per event (partial or final) and viewer, the lag from the publisher's receipt of the event
to the viewer's (both on the system's monotonic clock); viewers that lost, repeated or
reordered an event, or were closed early. Server: CPU seconds of the viewer run beyond the
baseline (per viewer and per minute of talk), and resident memory before and after the
viewers connected (per viewer). The lag includes the client processes' own delays; on a
loaded machine they show. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import soundfile as sf

sys.path.insert(0, str(Path(__file__).resolve().parent))
from serve_load import CLIPS, REPO, cpu_model, cpu_seconds, percentile  # noqa: E402

ROOM = "load"
BLOCK_S = 0.1
MAX_VIEWERS = 2000
CONNECT_AT_ONCE = 50


def rss_kib(pid: int) -> int:
    match = re.search(r"^VmRSS:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text(), re.M)
    return int(match.group(1)) if match else 0


def start_server(model: str, viewers: int) -> tuple[subprocess.Popen[str], int]:
    process = subprocess.Popen(
        [sys.executable, "-m", "streamasr", "serve", "--model", model, "--port", "0",
         "--max-viewers", str(viewers)],
        cwd=REPO, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    assert process.stderr is not None
    for line in process.stderr:
        match = re.search(r"listening on ws://127\.0\.0\.1:(\d+)/ws", line)
        if match:
            return process, int(match.group(1))
    raise SystemExit("the server did not start")


async def publish(port: int, duration_s: float, ready: Any, run: str) -> dict[tuple, float]:
    """Stream clips at live speed to the room; when each partial/final came back."""
    from websockets.asyncio.client import connect

    seen: dict[tuple, float] = {}
    clips = [(path.name, sf.read(path, dtype="int16")) for path in CLIPS]
    async with connect(f"ws://127.0.0.1:{port}/ws", max_size=None) as ws:
        started = time.monotonic()
        number = 0
        while time.monotonic() - started < duration_s:
            name, (data, rate) = clips[number % len(clips)]
            source = f"{run}-{number}-{name}"
            await ws.send(json.dumps({"sample_rate": rate, "source": source, "room": ROOM,
                                      "room_source": True, "realtime": True}))  # fmt: skip
            if number == 0:
                await asyncio.to_thread(ready)  # the room exists: viewers may come
            number += 1

            async def read() -> None:
                while True:
                    record = json.loads(await ws.recv())
                    if record["type"] in ("partial", "final"):
                        seen[(record["source"], record["seq"], record["type"])] = time.monotonic()
                    if record["type"] == "summary":
                        return

            reader = asyncio.create_task(read())
            step = int(BLOCK_S * rate)
            begun = time.monotonic()
            for position in range(0, len(data), step):
                await ws.send(data[position : position + step].tobytes())
                due = begun + (position + step) / rate
                await asyncio.sleep(max(0.0, due - time.monotonic()))
            await ws.send(json.dumps({"type": "end"}))
            await reader
    return seen


async def view_all(port: int, count: int, sse_share: float, connected: Any) -> list[dict]:
    """`count` viewers of the room until its publisher leaves; per viewer what came when."""
    from websockets.asyncio.client import connect

    gate = asyncio.Semaphore(CONNECT_AT_ONCE)
    opened = 0

    def arrived() -> None:
        nonlocal opened
        opened += 1
        if opened == count:
            connected.set()

    async def ws_viewer() -> dict:
        got: list[tuple] = []
        async with gate:
            ws = await connect(f"ws://127.0.0.1:{port}/rooms/{ROOM}/ws", max_size=None)
        arrived()
        closed = None
        try:
            while True:
                record = json.loads(await ws.recv())
                now = time.monotonic()
                if record["type"] == "status" and record["publisher"] is False:
                    break
                if "room_seq" in record:
                    got.append((record["source"], record["seq"], record["type"],
                                record["room_seq"], now))  # fmt: skip
        except Exception as exc:  # noqa: BLE001 - counted as a viewer closed early
            closed = repr(exc)
        await ws.close()
        return {"kind": "ws", "events": got, "closed": closed}

    async def sse_viewer() -> dict:
        got: list[tuple] = []
        async with gate:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(f"GET /rooms/{ROOM}/events HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            while (await reader.readline()).strip():
                pass
        arrived()
        closed = None
        while True:
            line = await reader.readline()
            if not line:
                closed = "eof"
                break
            if not line.startswith(b"data: "):
                continue
            now = time.monotonic()
            record = json.loads(line[6:])
            if record["type"] == "close" or (
                record["type"] == "status" and record["publisher"] is False
            ):
                closed = None if record["type"] == "status" else record["reason"]
                break
            if "room_seq" in record:
                got.append((record["source"], record["seq"], record["type"],
                            record["room_seq"], now))  # fmt: skip
        writer.close()
        return {"kind": "sse", "events": got, "closed": closed}

    sse = round(count * sse_share)
    tasks = [sse_viewer() for _ in range(sse)] + [ws_viewer() for _ in range(count - sse)]
    return list(await asyncio.gather(*tasks))


def viewer_process(port: int, count: int, sse_share: float, connected: Any, out: Any) -> None:
    out.put(asyncio.run(view_all(port, count, sse_share, connected)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--viewers", type=int, default=500)
    parser.add_argument("--sse-share", type=float, default=0.5)
    parser.add_argument("--duration-s", type=float, default=30.0)
    parser.add_argument("--procs", type=int, default=4, help="viewer client processes")
    parser.add_argument("--model", default="tiny-en")
    args = parser.parse_args()
    if not 1 <= args.viewers <= MAX_VIEWERS or not 0 <= args.sse_share <= 1:
        raise SystemExit(f"--viewers 1-{MAX_VIEWERS}, --sse-share 0-1")
    process, port = start_server(args.model, args.viewers)
    pid = process.pid
    try:
        # the baseline: the same talk, no viewer
        cpu0 = cpu_seconds(pid) or 0.0
        asyncio.run(publish(port, args.duration_s, lambda: None, "base"))
        base_cpu = (cpu_seconds(pid) or 0.0) - cpu0
        rss_before = rss_kib(pid)
        ctx = multiprocessing.get_context("spawn")
        out = ctx.Queue()
        events = [ctx.Event() for _ in range(args.procs)]
        shares = [args.viewers // args.procs + (i < args.viewers % args.procs)
                  for i in range(args.procs)]  # fmt: skip
        children: list[Any] = []

        def ready() -> None:
            for share, event in zip(shares, events, strict=True):
                if share:
                    child = ctx.Process(
                        target=viewer_process, args=(port, share, args.sse_share, event, out)
                    )
                    child.start()
                    children.append(child)
            for share, event in zip(shares, events, strict=True):
                if share and not event.wait(120):
                    raise SystemExit("viewers did not connect within 120 s")
            nonlocal_state["rss_after"] = rss_kib(pid)
            nonlocal_state["cpu_start"] = cpu_seconds(pid) or 0.0

        nonlocal_state: dict[str, float] = {}
        seen = asyncio.run(publish(port, args.duration_s, ready, "room"))
        cpu_run = (cpu_seconds(pid) or 0.0) - nonlocal_state["cpu_start"]
        viewers = [row for _ in children for row in out.get(timeout=120)]
        for child in children:
            child.join(30)
    finally:
        process.terminate()
        process.wait(60)
    lags: list[float] = []
    broken = {"closed_early": 0, "missing": 0, "repeated_or_reordered": 0}
    for viewer in viewers:
        if viewer["closed"]:
            broken["closed_early"] += 1
        seqs = [row[3] for row in viewer["events"]]
        if seqs != sorted(set(seqs)):
            broken["repeated_or_reordered"] += 1
        for source, seq, kind, _, at in viewer["events"]:
            sent = seen.get((source, seq, kind))
            if sent is not None:
                lags.append(at - sent)
    # per live event, from the first viewer's receipt to the last's: the fan-out's own
    # spread, on no publisher's clock (the baseline's finals came to each viewer from the
    # room's history as it joined)
    receipts: dict[tuple, list[float]] = {}
    for viewer in viewers:
        for source, seq, kind, _, at in viewer["events"]:
            if (source, seq, kind) in seen:
                receipts.setdefault((source, seq, kind), []).append(at)
    spreads = [max(times) - min(times) for times in receipts.values()]
    finals_expected = {key for key in seen if key[2] == "final"}
    for viewer in viewers:
        got = {row[:3] for row in viewer["events"] if row[2] == "final"}
        if not finals_expected <= got:
            broken["missing"] += 1
    minutes = args.duration_s / 60
    load = os.getloadavg()
    print(json.dumps({
        "viewers": len(viewers),
        "sse_viewers": sum(v["kind"] == "sse" for v in viewers),
        "talk_s": args.duration_s,
        "events_published": len(seen),
        "deliveries": len(lags),
        "lag_ms": {"min": _ms(min(lags, default=None)), "p50": _ms(percentile(lags, 0.5)),
                   "p90": _ms(percentile(lags, 0.9)),
                   "p99": _ms(percentile(lags, 0.99)), "max": _ms(max(lags, default=None))},
        "spread_ms": {"p50": _ms(percentile(spreads, 0.5)), "p99": _ms(percentile(spreads, 0.99)),
                      "max": _ms(max(spreads, default=None))},
        "viewers_broken": broken,
        "server_cpu_s": {"baseline": round(base_cpu, 2), "with_viewers": round(cpu_run, 2),
                         "per_viewer_per_talk_minute_ms": round(
                             1000 * (cpu_run - base_cpu) / len(viewers) / minutes, 2)},
        "server_rss_kib": {"before_viewers": rss_before,
                           "with_viewers": nonlocal_state["rss_after"],
                           "per_viewer": round((nonlocal_state["rss_after"] - rss_before)
                                               / len(viewers), 1)},
        "client_procs": args.procs,
        "load_average_1_5_15": [round(x, 2) for x in load],
        "cpus": os.cpu_count(),
        "cpu_model": cpu_model(),
    }, indent=1))  # fmt: skip


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(1000 * seconds, 1)


if __name__ == "__main__":
    main()
