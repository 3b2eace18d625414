"""`streamasr serve` as it is deployed: over TLS with a token from the environment, and as
several worker processes sharing one port."""

from __future__ import annotations

import asyncio
from typing import Any

from serve_fixture import (
    clip,
    file_events,
    http_get,
    read_until_summary,
    self_signed,
    serve,
    stream_clip,
    wait_for,
)
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

CLIPS = [clip(index) for index in range(4)]


def test_tls_and_token_from_the_environment(tmp_path: Any) -> None:
    import ssl

    cert, key = self_signed(tmp_path)
    context = ssl.create_default_context(cafile=str(cert))
    args = ("--certfile", str(cert), "--keyfile", str(key))
    with serve(*args, env={"STREAMASR_TOKEN": "from-env"}) as server:
        url = server.url.replace("ws://", "wss://")

        async def run() -> tuple[int, list[dict]]:
            try:
                async with connect(url, ssl=context):
                    pass
                refused = 0
            except InvalidStatus as exc:
                refused = exc.response.status_code
            headers = {"Authorization": "Bearer from-env"}
            async with connect(url, ssl=context, additional_headers=headers) as ws:
                return refused, await stream_clip(ws, CLIPS[3])

        refused, events = asyncio.run(run())
    assert refused == 401
    assert events[-1]["type"] == "summary" and events[-1]["text"]


def test_workers_share_the_port_and_the_metrics() -> None:
    reference = file_events(*CLIPS)
    # --max-batch 1: the bundled model is int8, whose output depends on the streams batched
    # with it (docs/performance.md#int8-batching); this test compares texts with `file`'s
    with serve("--workers", "2", "--max-connections", "8", "--max-batch", "1") as server:

        async def one(path: str) -> list[dict]:
            async with connect(server.url) as ws:
                return await stream_clip(ws, path, frame_bytes=640)

        async def run() -> list[list[dict]]:
            return await asyncio.gather(*(one(path) for path in CLIPS))

        results = asyncio.run(run())
        metrics = http_get(server.http + "/metrics")[1]
        assert server.stop() == 0
    for path, events in zip(CLIPS, results, strict=True):
        assert [e["text"] for e in events if e["type"] == "final"] == [
            e["text"] for e in reference[path] if e["type"] == "final"
        ]
    # the counters are summed over both workers, whichever one answered the scrape
    assert "streamasr_connections_total 4.0" in metrics
    audio = sum(events[-1]["audio_s"] for events in results)
    line = next(x for x in metrics.splitlines() if x.startswith("streamasr_audio_seconds_total"))
    assert abs(float(line.split()[-1]) - audio) < 1e-3


def test_workers_count_connections_together() -> None:
    """--max-connections is the whole server's with --workers, whichever worker the kernel
    hands a connection to: 8 held open are all admitted (a fixed share of 4 per worker
    refused any beyond an even split), the 9th is refused; a killed worker's connections
    give their slots back, and its socket leaves the port, so the other takes all 8."""
    import json
    import os
    import signal
    from pathlib import Path

    from websockets.exceptions import ConnectionClosed

    config = json.dumps({"sample_rate": 16000, "format": "s16le", "channels": 1})
    with serve("--workers", "2", "--max-connections", "8") as server:

        async def hold(count: int) -> list[Any]:
            held = [await connect(server.url) for _ in range(count)]
            for ws in held:
                await ws.send(config)
            return held

        async def refused() -> int | None:
            try:
                async with connect(server.url) as extra:
                    await extra.recv()
            except ConnectionClosed as exc:
                return exc.rcvd.code if exc.rcvd else None
            return None

        async def finish(held: list[Any]) -> int:
            """End each held session; the count that ended with a summary."""
            summaries = 0
            for ws in held:
                try:
                    await ws.send(json.dumps({"type": "end"}))
                    summaries += (await read_until_summary(ws))[-1]["type"] == "summary"
                except ConnectionClosed:
                    pass
                await ws.close()
            return summaries

        def sockets(pid: int) -> int:
            """The process's open sockets (a descriptor may close while they are read)."""
            count = 0
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                try:
                    count += os.readlink(fd).startswith("socket:")
                except OSError:
                    continue
            return count

        def at_capacity() -> bool:
            return http_get(server.http + "/readyz")[0] == 503

        async def run() -> tuple[Any, ...]:
            held = await hold(8)
            full = await asyncio.to_thread(wait_for, at_capacity)
            ninth = await refused()
            whole = await finish(held)
            held = await hold(8)
            await asyncio.to_thread(wait_for, at_capacity)
            workers = [int(child) for task in Path(f"/proc/{server.process.pid}/task")
                       .glob("*/children") for child in task.read_text().split()]
            os.kill(max(workers, key=sockets), signal.SIGKILL)  # the one with most sessions
            survived = await finish(held)
            await asyncio.to_thread(wait_for, lambda: not at_capacity())
            after = await hold(8)
            still_full = await asyncio.to_thread(wait_for, at_capacity)
            ninth_after = await refused()
            return full, ninth, whole, len(workers), survived, still_full, ninth_after, \
                await finish(after)

        full, ninth, whole, workers, survived, still_full, ninth_after, served = asyncio.run(run())
    assert workers == 2
    assert full and ninth == 1013 and whole == 8
    assert survived <= 4  # the killed worker's sessions (at least half) are gone
    assert still_full and ninth_after == 1013 and served == 8
