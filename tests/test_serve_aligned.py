"""`serve --schedule aligned`: live clients at different phases step together on one clock.

Four clients stream four clips at live speed, started a quarter chunk apart, to a real
server. Each session's events equal `streamasr file`'s for the same feed blocks: the
schedule changes when a step runs and with whom, never what it computes, on the fp32
tiny-random-bpe (the int8 tiny-en picks one activation scale per batch, so a batch's
company can change a token: tests/test_bench_hardening.py shows it). Each
summary reports its steps' wait for the tick, below one chunk plus a round, and the rounds
batch the clients: fewer engine steps than stream steps.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator

import pytest
from serve_fixture import (
    ServerProcess,
    clip,
    comparable,
    file_events,
    http_get,
    pcm,
    read_until_summary,
    serve,
)
from websockets.asyncio.client import connect

LIVE = ("--block-ms", "100", "--tail-padding", "0.3")  # the server's defaults
FRAME_BYTES = 3200  # 100 ms of 16 kHz int16, as a microphone page sends
MODEL = "tiny-random-bpe"  # fp32, and its tokens vary: batching changes none of them
CHUNK_S = 0.32  # the model's chunk: the step clock's period


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    with serve("--schedule", "aligned", model=MODEL) as running:
        yield running


def metric(text: str, name: str) -> float:
    match = re.search(rf"^{name} (\S+)$", text, re.MULTILINE)
    assert match, f"{name} missing from /metrics"
    return float(match.group(1))


async def live_client(url: str, path: str, delay_s: float) -> list[dict]:
    await asyncio.sleep(delay_s)
    data, rate = pcm(path)
    async with connect(url) as ws:
        await ws.send(json.dumps({"sample_rate": rate, "source": path}))
        for start in range(0, len(data), FRAME_BYTES):
            await ws.send(data[start : start + FRAME_BYTES])
            await asyncio.sleep(0.1)
        await ws.send(json.dumps({"type": "end"}))
        return await read_until_summary(ws)


def test_aligned_clients_batch_together_and_decode_as_file(server: ServerProcess) -> None:
    paths = [clip(index) for index in range(4)]
    reference = file_events(*paths, options=LIVE, model=MODEL)
    assert any(event["type"] == "partial" for events in reference.values() for event in events)

    async def run() -> list[list[dict]]:
        return list(await asyncio.gather(*(
            live_client(server.url, path, index * CHUNK_S / 4) for index, path in enumerate(paths)
        )))

    before = http_get(server.http + "/metrics")[1]
    sessions = asyncio.run(run())
    after = http_get(server.http + "/metrics")[1]
    for path, events in zip(paths, sessions, strict=True):
        assert comparable(events) == comparable(reference[path])
        summary = events[-1]
        assert summary["type"] == "summary"
        assert 0 <= summary["align_wait_ms"] <= summary["align_wait_max_ms"]
        assert summary["align_wait_max_ms"] < (CHUNK_S + 0.3) * 1000
    rounds = metric(after, "streamasr_batch_streams_count") - metric(
        before, "streamasr_batch_streams_count")
    steps = metric(after, "streamasr_batch_streams_sum") - metric(
        before, "streamasr_batch_streams_sum")
    assert rounds * 1.5 < steps, (rounds, steps)  # most rounds step several clients


def test_an_unknown_schedule_is_refused_in_one_line() -> None:
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "streamasr", "serve", "--schedule", "soon"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "--schedule 'soon': use aligned or ready" in done.stderr
    assert "Traceback" not in done.stderr
