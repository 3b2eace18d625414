"""`streamasr serve` feeds blocks that only buffer audio on its event loop: a batch job (a
trip to the engine thread) is made per engine step, not per message, and the events stay
exactly those of `streamasr file` with the same feed blocks."""

from __future__ import annotations

import asyncio
import json
import re

from serve_fixture import clip, comparable, file_events, http_get, pcm, read_until_summary, serve
from websockets.asyncio.client import connect

SETTINGS = ("--block-ms", "100", "--tail-padding", "0.3")
FRAME_BYTES = 3200  # 100 ms of 16 kHz s16le: one message per feed block


def jobs(metrics: str) -> float:
    """Batch jobs the scheduler ran (each observes its stream count once)."""
    match = re.search(r"^streamasr_batch_streams_count (\S+)$", metrics, re.MULTILINE)
    assert match, "streamasr_batch_streams_count missing from /metrics"
    return float(match.group(1))


def test_one_job_per_engine_step_and_events_equal_file() -> None:
    path = clip(0)  # 3.36 s: 34 messages, 11 engine steps with 0.3 s padding
    reference = file_events(path, options=SETTINGS)[path]
    with serve(*SETTINGS, "--max-batch", "8") as server:

        async def run() -> list[dict]:
            data, rate = pcm(path)
            async with connect(server.url) as ws:
                await ws.send(json.dumps({"sample_rate": rate, "source": path}))
                for start in range(0, len(data), FRAME_BYTES):
                    await ws.send(data[start : start + FRAME_BYTES])
                    await asyncio.sleep(0.1)  # live speed, as a microphone sends
                await ws.send(json.dumps({"type": "end"}))
                return await read_until_summary(ws)

        before = jobs(http_get(server.http + "/metrics")[1])
        events = asyncio.run(run())
        made = jobs(http_get(server.http + "/metrics")[1]) - before
    assert comparable(events) == comparable(reference)
    messages = -(-len(pcm(path)[0]) // FRAME_BYTES)
    # a job per message before; now at most one per engine step and one to end
    assert 0 < made * 2 < messages, (made, messages)
