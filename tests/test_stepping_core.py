"""The one stepping core (streamasr/session/batch.py) and the scheduler's event objects.

A stream stepped alone (the driver's way) and the same stream stepped through the batched
core make the same events; `streamasr serve`'s scheduler hands its connection event
objects (the summary last), and the WebSocket adapter turns them into the JSON lines
`streamasr file --format jsonl` writes. Real sherpa-onnx on the bundled tiny-en model.
"""

from __future__ import annotations

import asyncio
import io
import json
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

import streamasr
from streamasr.audio import FileSource
from streamasr.output.render import JsonlRenderer
from streamasr.server.metrics import Metrics
from streamasr.server.protocol import SessionConfig
from streamasr.server.scheduler import Delivered, Scheduler
from streamasr.server.wire import WireEncoder
from streamasr.session.batch import step_all
from streamasr.session.events import WIRE_VERSION, Event, Final, Partial, StreamSummary
from streamasr.session.stream import StreamOptions, StreamSession

TINY_EN = Path(__file__).resolve().parents[1] / "models" / "tiny-en"


def _tokens(events: Sequence[object]) -> list[tuple[str, str, tuple[str, ...]]]:
    return [(e.kind, e.text, tuple(e.tokens)) for e in events if isinstance(e, (Partial, Final))]


def _clip(name: str = "0.wav") -> np.ndarray:
    source = FileSource(str(TINY_EN / "test_wavs" / name))
    try:
        return np.concatenate(list(source.blocks(0.1)))
    finally:
        source.close()


def test_a_stream_alone_and_through_the_batched_core_make_the_same_events() -> None:
    model = streamasr.open_model(str(TINY_EN), threads=1)
    audio = _clip()
    blocks = [audio[i : i + 1600] for i in range(0, len(audio), 1600)]
    alone = list(model.stream(blocks, 16000))  # the driver: StreamSession.feed, step_alone
    session = StreamSession(model.recognizer, 16000, "batched", StreamOptions())
    batched: list[Event] = []
    for block in blocks:
        session.accept(block)
        batched.extend(step_all(model.recognizer, [session], time.perf_counter)[0])
    session.end_input()
    batched.extend(step_all(model.recognizer, [session], time.perf_counter)[0])
    batched.extend(session.close())
    assert _tokens(batched) == _tokens(alone)
    assert any(isinstance(e, Final) and e.text for e in alone)
    assert session.summary().compute_s > 0  # the batched steps' time was shared out


def test_the_scheduler_delivers_event_objects_the_adapter_writes_the_file_lines() -> None:
    model = streamasr.open_model(str(TINY_EN), threads=1)
    audio = _clip()
    config = SessionConfig(sample_rate=16000, format="f32le", source="clip")
    delivered: list[Delivered] = []

    async def serve_one() -> None:
        scheduler = Scheduler(model.recognizer, StreamOptions(), Metrics(), 4, 0.0)
        task = asyncio.create_task(scheduler.run())
        try:
            utterance = await scheduler.open(config, delivered.extend, lambda reason: None)
            for start in range(0, len(audio), 1600):
                scheduler.add_audio(utterance, audio[start : start + 1600])
                await asyncio.sleep(0)
            await asyncio.wait_for(scheduler.end(utterance), 60)
        finally:
            task.cancel()
            scheduler.close()

    asyncio.run(serve_one())
    assert delivered and isinstance(delivered[-1], StreamSummary)
    events = delivered[:-1]
    assert all(isinstance(e, Event) for e in events)
    size = round(StreamSession(model.recognizer, 16000, "x", StreamOptions()).block_s * 16000)
    blocks = [audio[i : i + size] for i in range(0, len(audio), size)]
    assert _tokens(events) == _tokens(list(model.stream(blocks, 16000)))

    # the adapter's records are what JsonlRenderer writes, with the wire version first
    records = WireEncoder(config).records(delivered)
    text = io.StringIO()
    renderer = JsonlRenderer(text, "full", WIRE_VERSION)
    renderer.begin("clip")
    for item in delivered:
        renderer.end(item) if isinstance(item, StreamSummary) else renderer.event(item)
    written = [json.loads(line) for line in text.getvalue().splitlines()]
    assert records == written
    assert all(next(iter(record)) == "v" and record["v"] == WIRE_VERSION for record in records)
    assert records[-1]["type"] == "summary" and records[-1]["source"] == "clip"
