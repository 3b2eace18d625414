"""How `streamasr serve` feeds a session's audio, on one server with batches of up to 8:

- blocks that only buffer audio are fed on its event loop: a batch job is made per engine
  step, not per message, and the events stay exactly those of `streamasr file` with the same
  feed blocks (the server's defaults, 100 ms and 0.3 s);
- audio sent all at once (many jobs' worth, a session asking for `file`'s defaults) is
  decoded as `streamasr file` decodes it, and the server goes on (an utterance taken twice
  into one batched step once aborted the whole process).
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from serve_fixture import (
    WAVS,
    ServerProcess,
    audio_fed_s,
    clip,
    comparable,
    file_events,
    http_get,
    pcm,
    read_until_summary,
    serve,
    stream_clip,
)
from websockets.asyncio.client import connect

LIVE = ("--block-ms", "100", "--tail-padding", "0.3")  # the server's defaults
FRAME_BYTES = 3200  # 100 ms of 16 kHz s16le: one message per feed block


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    with serve("--max-batch", "8") as running:
        yield running


def jobs(metrics: str) -> float:
    """Batch jobs the scheduler ran (each observes its stream count once)."""
    match = re.search(r"^streamasr_batch_streams_count (\S+)$", metrics, re.MULTILINE)
    assert match, "streamasr_batch_streams_count missing from /metrics"
    return float(match.group(1))


def test_one_job_per_engine_step_and_events_equal_file(server: ServerProcess) -> None:
    path = clip(0)  # 3.36 s: 34 messages, 11 engine steps with 0.3 s padding
    reference = file_events(path, options=LIVE)[path]

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


def test_audio_sent_all_at_once_is_decoded_as_file_decodes_it(
    server: ServerProcess, tmp_path: Path
) -> None:
    clips = [sf.read(WAVS / f"{index}.wav", dtype="int16") for index in range(5)]
    audio = np.concatenate([data for data, _ in clips])
    path = tmp_path / "long.wav"
    sf.write(path, audio, 16000, subtype="PCM_16")
    blocks = len(audio) / (0.32 * 16000)
    assert blocks > 2 * 16  # feed blocks of one chunk: many jobs' worth
    expected = file_events(str(path))[str(path)]
    own = {"block_ms": "chunk", "tail_padding_s": 0.66}  # file's defaults, not the server's

    async def run() -> tuple[list[dict], list[dict]]:
        async with connect(server.url, max_size=None) as ws:
            first = await stream_clip(ws, str(path), frame_bytes=audio.nbytes, **own)
        async with connect(server.url, max_size=None) as ws:  # the server goes on
            second = await stream_clip(ws, clip(1))
        return first, second

    first, second = asyncio.run(run())
    assert server.process.poll() is None, "".join(server.stderr_lines)
    assert expected[-1]["type"] == "summary" and expected[-1]["text"]
    assert comparable(first) == comparable(expected)
    assert second[-1]["type"] == "summary" and second[-1]["text"]


def audio_seconds(server: ServerProcess) -> float:
    """Seconds of audio the server has fed to its engine (all sessions)."""
    fed = audio_fed_s(server.http)
    assert fed is not None, "streamasr_audio_seconds_total missing from /metrics"
    return fed


async def fed_before_end(server: ServerProcess, path: str, reaches: float, **config: object
                         ) -> tuple[float, list[dict]]:
    """Send a clip in 100 ms messages without the end message; once the engine has been fed
    `reaches` seconds of it (or 30 s passed), how much it was fed; then end, and the events."""
    data, rate = pcm(path)
    before = audio_seconds(server)
    async with connect(server.url) as ws:
        await ws.send(json.dumps({"sample_rate": rate, "source": path, **config}))
        for start in range(0, len(data), FRAME_BYTES):
            await ws.send(data[start : start + FRAME_BYTES])
        fed = 0.0
        for _ in range(300):
            fed = audio_seconds(server) - before
            if fed >= reaches - 1e-6:
                break
            await asyncio.sleep(0.1)
        await asyncio.sleep(0.5)  # anything more that would come
        fed = audio_seconds(server) - before
        await ws.send(json.dumps({"type": "end"}))
        return fed, await read_until_summary(ws)


def test_a_live_clients_last_short_message_is_fed_when_it_comes(server: ServerProcess) -> None:
    """By default each message is a feed block as it comes: a live client's last message,
    shorter than 100 ms, is in the engine before its end message (decoded then if it completes
    a chunk), where fixed 100 ms blocks kept it for the end; the events are the same."""
    path = clip(0)
    data, rate = pcm(path)
    short = len(data) % FRAME_BYTES // 2  # samples in the last message
    assert short, "the clip must end with a message shorter than 100 ms"
    whole_s, blocks_s = len(data) / 2 / rate, (len(data) // 2 - short) / rate
    reference = comparable(file_events(path, options=LIVE)[path])

    fed, events = asyncio.run(fed_before_end(server, path, whole_s))
    assert abs(fed - whole_s) < 1e-6, (fed, whole_s)
    assert comparable(events) == reference

    fed, events = asyncio.run(fed_before_end(server, path, blocks_s, block_ms=100))
    assert abs(fed - blocks_s) < 1e-6, (fed, blocks_s)  # the short rest waited for the end
    assert comparable(events) == reference
