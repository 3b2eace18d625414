"""The deployment recipe in scripts/deploy/haproxy.cfg, run as shipped: two `serve`
instances behind a real HAProxy on 127.0.0.1. Connections spread over both; stopping one
(SIGTERM) lets its open session finish with its finals, and new connections reach the
other."""

from __future__ import annotations

import asyncio
from typing import Any

from haproxy_fixture import haproxy, metric, ready
from serve_fixture import (
    ServerProcess,
    clip,
    file_events,
    pcm,
    read_until_summary,
    serve,
    stream_clip,
    wait_for,
)
from websockets.asyncio.client import connect


def active(server: ServerProcess) -> float:
    return metric(server, "streamasr_active_sessions")


def accepted(server: ServerProcess) -> float:
    return metric(server, "streamasr_connections_total")


def finals(events: list[dict[str, Any]]) -> list[str]:
    return [e["text"] for e in events if e["type"] == "final"]


def test_two_instances_behind_haproxy_spread_and_drain() -> None:
    clips = [clip(index) for index in range(4)]
    reference = file_events(*clips)
    # --max-batch 1: each text is exactly `streamasr file`'s (int8 batching aside, docs/serve.md)
    with serve("--max-batch", "1") as a, serve("--max-batch", "1") as b, haproxy(a, b) as port:
        url = f"ws://127.0.0.1:{port}/ws"

        async def one(path: str) -> list[dict]:
            async with connect(url) as ws:
                return await stream_clip(ws, path, frame_bytes=3200)

        async def spread() -> list[list[dict]]:
            return await asyncio.gather(*(one(path) for path in clips))

        results = asyncio.run(spread())
        for path, events in zip(clips, results, strict=True):
            assert finals(events) == finals(reference[path])
        assert accepted(a) >= 1 and accepted(b) >= 1
        assert accepted(a) + accepted(b) == 4

        # a session open on one instance when it is told to stop
        async def drained() -> tuple[list[dict], int | None, ServerProcess, list[dict]]:
            data, rate = pcm(clips[0])
            async with connect(url) as ws:
                await ws.send(f'{{"sample_rate": {rate}, "format": "s16le", "channels": 1,'
                              f' "source": "{clips[0]}"}}')
                half = len(data) // 2 & ~1
                await ws.send(data[:half])
                assert wait_for(lambda: active(a) + active(b) == 1)
                stopped = a if active(a) == 1 else b
                stopped.process.send_signal(15)
                # the stopping instance takes no new connections but lets this one finish
                assert wait_for(lambda: not ready(stopped.http))
                await ws.send(data[half:])
                await ws.send('{"type": "end"}')
                events = await read_until_summary(ws)
                await ws.close()
                code = ws.close_code
            # a new connection after the stop reaches the instance still running
            async with connect(url) as again:
                after = await stream_clip(again, clips[1])
            return events, code, stopped, after

        events, code, stopped, after = asyncio.run(drained())
        assert finals(events) == finals(reference[clips[0]])
        assert events[-1]["type"] == "summary"
        assert code in (1000, 1001)
        assert stopped.process.wait(60) == 0
        assert finals(after) == finals(reference[clips[1]])
