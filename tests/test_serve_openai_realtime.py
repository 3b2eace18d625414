"""OpenAI's Realtime transcription API on `streamasr serve`, driven by the official `openai`
package's realtime connection against a real server on 127.0.0.1.

Each `.completed` transcript must be a final `streamasr file` prints for the same audio with
the matching settings, word for word and in order; hostile input gets one `error` event and
the connection goes on, with a concurrent session undisturbed; the server's stop flushes the
open utterance's transcript before the close; a realtime session may publish to a room.
"""

from __future__ import annotations

import asyncio
import base64
import json
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile as sf
from room_clients import publisher_gone, ws_view
from serve_fixture import REPO, ServerProcess, clip, file_events, serve
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

pytest.importorskip("openai")
from openai import AsyncOpenAI  # noqa: E402

# the SDK's session types know only OpenAI's 24 kHz: its model of a 16 kHz session warns
pytestmark = pytest.mark.filterwarnings("ignore:Pydantic serializer warnings")

#: The server's session defaults, as `streamasr file` options (tests/test_serve.py).
LIVE = ("--block-ms", "100", "--tail-padding", "0.3")
RATE = 24000
CHUNK_S = 0.1  # one append: 100 ms, the server's feed block
COMPLETED = "conversation.item.input_audio_transcription.completed"
DELTA = "conversation.item.input_audio_transcription.delta"
TOKEN = "rt-s3cret"


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    # --max-batch 1: texts are compared with `streamasr file`'s (docs/performance.md)
    with serve("--max-batch", "1") as running:
        yield running


@pytest.fixture(scope="module")
def talk(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three bundled clips with a second of silence between, as 24 kHz PCM16."""
    import soxr

    parts = []
    for index in range(3):
        data, rate = sf.read(REPO / clip(index), dtype="float32")
        parts += [soxr.resample(data, rate, RATE), np.zeros(RATE, np.float32)]
    path = tmp_path_factory.mktemp("audio") / "talk24k.wav"
    sf.write(path, np.concatenate(parts), RATE, subtype="PCM_16")
    return path


def pcm16(path: Path | str) -> tuple[bytes, int]:
    data, rate = sf.read(REPO / path, dtype="int16")
    return data.tobytes(), rate


def chunks(data: bytes, rate: int) -> list[str]:
    """The audio as base64 appends of CHUNK_S each."""
    size = int(rate * CHUNK_S) * 2
    return [base64.b64encode(data[i : i + size]).decode() for i in range(0, len(data), size)]


def finals(path: Path | str, *options: str) -> list[str]:
    """The texts of `streamasr file PATH --format jsonl OPTIONS`'s finals."""
    events = file_events(str(path), options=(*LIVE, *options))[str(path)]
    return [event["text"] for event in events if event["type"] == "final"]


def client(server: ServerProcess, api_key: str = "unused") -> AsyncOpenAI:
    return AsyncOpenAI(
        base_url=server.http + "/v1", api_key=api_key,
        websocket_base_url=f"ws://127.0.0.1:{server.port}/v1",
    )  # fmt: skip


def session(rate: int = RATE, turn_detection: Any = "server", **more: Any) -> dict[str, Any]:
    """A transcription session update; turn_detection "server" leaves it out (the default)."""
    audio_in: dict[str, Any] = {"format": {"type": "audio/pcm", "rate": rate}}
    if turn_detection != "server":
        audio_in["turn_detection"] = turn_detection
    return {"type": "transcription", "audio": {"input": audio_in}, **more}


async def transcribe(
    server: ServerProcess, data: bytes, rate: int, update: dict[str, Any] | None, until: int = 1
) -> list[dict[str, Any]]:
    """Stream `data` over the SDK's realtime connection in 100 ms appends, then commit (the
    rest of the last turn, as a client ends); the server events as dicts until `until`
    completions came."""
    events: list[dict[str, Any]] = []
    async with client(server).realtime.connect(extra_query={"intent": "transcription"}) as rt:
        if update is not None:
            await rt.session.update(session=update)  # type: ignore[arg-type]
        for audio in chunks(data, rate):
            await rt.input_audio_buffer.append(audio=audio)
        await rt.input_audio_buffer.commit()
        while sum(event["type"] == COMPLETED for event in events) < until:
            event = await asyncio.wait_for(rt.recv(), 60)
            events.append(event.to_dict())
    return events


def kinds_of(records: list[dict[str, Any]], kind: str) -> int:
    return sum(record["type"] == kind for record in records)


def completed(events: list[dict[str, Any]]) -> list[str]:
    return [event["transcript"] for event in events if event["type"] == COMPLETED]


def check_items(events: list[dict[str, Any]], vad: bool) -> None:
    """Each item is committed once before it completes, its deltas spell its transcript
    (no finishing asked), and speech events come only with server_vad."""
    committed: list[str] = []
    deltas: dict[str, str] = {}
    for event in events:
        kind = event["type"]
        if kind == "input_audio_buffer.committed":
            assert event["item_id"] not in committed
            committed.append(event["item_id"])
        elif kind == DELTA:
            deltas[event["item_id"]] = deltas.get(event["item_id"], "") + event["delta"]
        elif kind == COMPLETED:
            assert event["item_id"] in committed
            assert deltas.get(event["item_id"], "") == event["transcript"]
        elif kind.startswith("input_audio_buffer.speech_"):
            assert vad
    assert [e["type"] for e in events[:1]] == ["session.created"]


def test_deltas_only_append() -> None:
    """A partial that revises sent text sends nothing until one extends the sent text
    again; the completed transcript is the final's (finished) text."""
    from streamasr.server.realtime_events import Turns
    from streamasr.session.events import Final, Partial

    def partial(text: str) -> Partial:
        return Partial(seq=1, audio_s=1.0, wall_s=0.0, segment=0, text=text)

    ids = iter(range(100))
    turns = Turns(lambda kind: f"{kind}_{next(ids)}")
    turns.begin(0.0, vad=False)
    texts = ("THE", "THE CAT", "THE CAP", "THE CAP IS", "THE CAT IS HERE")
    events = turns.translate([partial(text) for text in texts])
    assert [event["delta"] for event in events] == ["THE", " CAT", " IS HERE"]
    final = Final(seq=2, audio_s=2.0, wall_s=0.0, segment=0, text="The cat is here.",
                  start_s=0.1, end_s=1.5)  # fmt: skip
    done = turns.translate([final])
    assert [event["type"] for event in done] == ["input_audio_buffer.committed", COMPLETED]
    assert done[1]["transcript"] == "The cat is here." and done[1]["usage"]["seconds"] == 2.0
    assert {event["item_id"] for event in events + done} == {"item_0"}


def test_sdk_transcribes_turns_like_file(server: ServerProcess, talk: Path) -> None:
    """server_vad (the default): each final of `streamasr file` is one `.completed`."""
    expected = finals(talk)
    assert len(expected) == 3
    data, rate = pcm16(talk)
    events = asyncio.run(transcribe(server, data, rate, None, until=len(expected)))
    assert completed(events) == expected
    check_items(events, vad=True)
    reference = file_events(str(talk), options=LIVE)[str(talk)]
    kinds = [event["type"] for event in events]
    assert kinds.count("input_audio_buffer.speech_started") == 3
    assert kinds.count("input_audio_buffer.speech_stopped") == kinds_of(reference, "endpoint")


def test_silence_duration_is_rule2(server: ServerProcess, talk: Path) -> None:
    """silence_duration_ms is the trailing-silence rule: the endpoints of `--rule2 0.6`."""
    expected = file_events(str(talk), options=(*LIVE, "--rule2", "0.6"))[str(talk)]
    update = session(turn_detection={"type": "server_vad", "silence_duration_ms": 600})
    data, rate = pcm16(talk)
    texts = [e["text"] for e in expected if e["type"] == "final"]
    events = asyncio.run(transcribe(server, data, rate, update, until=len(texts)))
    assert events[1]["type"] == "session.updated"
    assert events[1]["session"]["audio"]["input"]["turn_detection"]["silence_duration_ms"] == 600
    assert completed(events) == texts
    stops = [e["audio_end_ms"] for e in events if e["type"] == "input_audio_buffer.speech_stopped"]
    assert stops == [round(e["audio_s"] * 1000) for e in expected if e["type"] == "endpoint"]


def test_client_commits_without_turn_detection(server: ServerProcess) -> None:
    """turn_detection null, 16 kHz: each commit is one item, `file --no-endpoint`'s final."""
    data0, rate = pcm16(clip(0))
    data1, _ = pcm16(clip(1))
    expected = finals(clip(0), "--no-endpoint") + finals(clip(1), "--no-endpoint")

    async def run() -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        connection = client(server).realtime.connect(extra_query={"intent": "transcription"})
        async with connection as rt:
            await rt.session.update(session=session(16000, None))  # type: ignore[arg-type]
            for data in (data0, data1):
                for audio in chunks(data, rate):
                    await rt.input_audio_buffer.append(audio=audio)
                await rt.input_audio_buffer.commit()
                done = len(completed(events)) + 1
                while len(completed(events)) < done:
                    events.append((await asyncio.wait_for(rt.recv(), 60)).to_dict())
        return events

    events = asyncio.run(run())
    assert completed(events) == expected
    check_items(events, vad=False)
    updated = events[1]["session"]["audio"]["input"]
    assert updated["turn_detection"] is None and updated["format"]["rate"] == 16000


def raw(server: ServerProcess, query: str = "?intent=transcription", **kw: Any) -> Any:
    return connect(f"ws://127.0.0.1:{server.port}/v1/realtime{query}", **kw)


async def next_event(ws: Any) -> dict[str, Any]:
    return dict(json.loads(await asyncio.wait_for(ws.recv(), 30)))


HOSTILE: list[tuple[str | bytes, str]] = [
    ("not json", "invalid_json"),
    (b"\x00\x01binary", "invalid_message"),
    (json.dumps({"type": "response.create"}), "invalid_value"),
    (json.dumps(["no", "type"]), "missing_required_parameter"),
    (json.dumps({"type": "input_audio_buffer.append", "audio": "@@ not base64 @@"}),
     "invalid_value"),
    (json.dumps({"type": "input_audio_buffer.append", "audio": "AA=="}), "invalid_value"),
    (json.dumps({"type": "input_audio_buffer.commit"}), "input_audio_buffer_commit_empty"),
    (json.dumps({"type": "session.update", "session": session(44100)}), "invalid_value"),
    (json.dumps({"type": "session.update", "session": {"type": "realtime"}}), "invalid_value"),
    (json.dumps({"type": "input_audio_buffer.append",  # 12 s: over --max-queued-audio-s
                 "audio": base64.b64encode(bytes(RATE * 2 * 12)).decode()}), "audio_too_large"),
]  # fmt: skip


def test_hostile_input_gets_one_error_each_and_others_go_on(server: ServerProcess) -> None:
    """Each bad message is one `error` event (OpenAI's shape, the client's event_id) and
    the connection goes on: it then transcribes; a message over --max-frame-bytes closes
    only its own connection (1009). A concurrent SDK session is undisturbed."""
    data, rate = pcm16(clip(0))
    expected = finals(clip(0))

    async def hostile() -> None:
        async with raw(server) as ws:
            assert (await next_event(ws))["type"] == "session.created"
            for message, code in HOSTILE:
                await ws.send(message)
                event = await next_event(ws)
                assert event["type"] == "error", (message, event)
                assert event["error"]["code"] == code and event["error"]["message"]
                assert event["error"]["type"] == "invalid_request_error"
            await ws.send(json.dumps({"type": "input_audio_buffer.commit", "event_id": "e7"}))
            assert (await next_event(ws))["error"]["event_id"] == "e7"
            # still served: default settings (24 kHz, server_vad)
            for audio in chunks(pcm16(clip(1))[0], 16000):  # 16 kHz bytes read as 24 kHz
                await ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": audio}))
            await ws.send(json.dumps({"type": "input_audio_buffer.commit"}))
            while (await next_event(ws))["type"] != COMPLETED:
                pass
        async with raw(server) as ws:
            await next_event(ws)
            with pytest.raises(ConnectionClosed) as closed:
                await ws.send("x" * (2 << 20))
                await next_event(ws)
            assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009

    async def both() -> list[dict[str, Any]]:
        normal = asyncio.create_task(transcribe(server, data, rate, session(rate)))
        await hostile()
        return await normal

    assert completed(asyncio.run(both())) == expected


def test_clear_drops_the_buffer(server: ServerProcess) -> None:
    """input_audio_buffer.clear: the audio not yet final is dropped; the next is transcribed."""
    data0, rate = pcm16(clip(0))
    data1, _ = pcm16(clip(1))

    async def run() -> list[dict[str, Any]]:
        async with raw(server) as ws:
            await next_event(ws)
            update = {"type": "session.update", "session": session(16000, None)}
            await ws.send(json.dumps(update))
            for data in (data0, data1):
                for audio in chunks(data, rate):
                    await ws.send(json.dumps({"type": "input_audio_buffer.append",
                                              "audio": audio}))  # fmt: skip
                kind = "input_audio_buffer.clear" if data is data0 else "input_audio_buffer.commit"
                await ws.send(json.dumps({"type": kind}))
            events = [await next_event(ws)]
            while events[-1]["type"] != COMPLETED:
                events.append(await next_event(ws))
            return events

    events = asyncio.run(run())
    assert "input_audio_buffer.cleared" in [event["type"] for event in events]
    assert completed(events) == finals(clip(1), "--no-endpoint")


def test_tokens_in_header_or_query(tmp_path: Path) -> None:
    """With --token-file: the SDK's Bearer key, X-API-Key, ?api_key= or ?token=; others get
    401; a page from an origin not in --allow-origin 403; an intent but transcription 400."""
    (tmp_path / "token").write_text(TOKEN + "\n")
    allowed = "http://captions.example"
    with serve("--token-file", str(tmp_path / "token"), "--allow-origin", allowed) as running:

        async def run() -> None:
            for query, headers in (
                (f"?intent=transcription&api_key={TOKEN}", {}),
                (f"?intent=transcription&token={TOKEN}", {}),
                ("?intent=transcription", {"X-API-Key": TOKEN}),
            ):
                async with raw(running, query, additional_headers=headers) as ws:
                    assert (await next_event(ws))["type"] == "session.created"
            connection = client(running, TOKEN).realtime.connect(
                extra_query={"intent": "transcription"}
            )
            async with connection as rt:
                assert (await rt.recv()).type == "session.created"
            with pytest.raises(InvalidStatus) as refused:
                async with raw(running, additional_headers={"X-API-Key": "wrong"}):
                    pass
            assert refused.value.response.status_code == 401
            for origin, status in ((allowed, 101), ("http://elsewhere.example", 403)):
                try:
                    async with raw(running, f"?token={TOKEN}", origin=origin) as ws:
                        assert (await next_event(ws))["type"] == "session.created"
                        seen = 101
                except InvalidStatus as exc:
                    seen = exc.response.status_code
                assert seen == status
            with pytest.raises(InvalidStatus) as other:
                async with raw(running, f"?intent=conversation&token={TOKEN}"):
                    pass
            assert other.value.response.status_code == 400

        asyncio.run(run())


def test_a_realtime_session_publishes_to_a_room(server: ServerProcess, talk: Path) -> None:
    """`room` and `sentence_case` in the session: the `.completed` texts are the finals of
    `file --sentence-case`, and the room's viewers get the same finals."""
    data, rate = pcm16(talk)
    update = session(room="rt-room", sentence_case=True)
    events = asyncio.run(transcribe(server, data, rate, update, until=3))
    assert events[1]["session"]["room"] == "rt-room"
    feed = f"ws://127.0.0.1:{server.port}/rooms/rt-room/ws"
    seen = asyncio.run(ws_view(feed, publisher_gone))
    expected = finals(talk, "--sentence-case")
    assert [event["text"] for event in seen.finals] == completed(events) == expected
    assert expected != finals(talk)


def test_beta_update_and_bad_settings(server: ServerProcess) -> None:
    """The beta `transcription_session.update` is answered in its own shape; a setting that
    cannot be served is one error naming it, and the settings stay as they were."""

    async def run() -> list[dict[str, Any]]:
        async with raw(server) as ws:
            events = [await next_event(ws)]
            beta = {"input_audio_format": "pcm16", "turn_detection": None,
                    "input_audio_transcription": {"model": "whisper-1", "language": "en"}}
            for update in (
                {"type": "transcription_session.update", "session": beta},
                {"type": "session.update", "session": {"room": "no spaces"}},
                {"type": "session.update", "session": session(turn_detection={
                    "type": "server_vad", "silence_duration_ms": -5})},
                {"type": "session.update", "session": {"type": "transcription"}},
            ):  # fmt: skip
                await ws.send(json.dumps(update))
                events.append(await next_event(ws))
            return events

    created, beta, room, silence, same = asyncio.run(run())
    assert beta["type"] == "transcription_session.updated"
    assert beta["session"]["input_audio_format"] == "pcm16"
    assert beta["session"]["turn_detection"] is None
    assert beta["session"]["input_audio_transcription"]["language"] == "en"
    assert room["error"]["param"] == "session.room"
    assert silence["error"]["param"].endswith("silence_duration_ms")
    assert same["type"] == "session.updated"
    assert same["session"]["audio"]["input"]["turn_detection"] is None
    assert created["session"]["audio"]["input"]["turn_detection"] == {"type": "server_vad"}


def test_capacity_and_stop_flush_the_open_utterance() -> None:
    """At --max-connections: one error event, close 1013. SIGTERM: the open utterance's
    `.completed` comes before the close (1001), and the server exits 0."""
    data, rate = pcm16(clip(0))
    expected = finals(clip(0), "--no-endpoint")
    with serve("--max-batch", "1", "--max-connections", "1", "--grace-s", "0") as running:

        async def run() -> tuple[list[dict[str, Any]], int | None]:
            events: list[dict[str, Any]] = []
            async with raw(running) as ws:
                events.append(await next_event(ws))
                update = {"type": "session.update", "session": session(16000, None)}
                await ws.send(json.dumps(update))
                async with raw(running) as second:
                    refused = await next_event(second)
                    assert refused["type"] == "error"
                    assert refused["error"]["code"] == "capacity"
                    with pytest.raises(ConnectionClosed) as full:
                        await next_event(second)
                    assert full.value.rcvd is not None and full.value.rcvd.code == 1013
                for audio in chunks(data, rate):
                    await ws.send(json.dumps({"type": "input_audio_buffer.append",
                                              "audio": audio}))  # fmt: skip
                while not events or events[-1]["type"] != DELTA:
                    events.append(await next_event(ws))
                running.process.send_signal(signal.SIGTERM)
                try:
                    while True:
                        events.append(await next_event(ws))
                except ConnectionClosed as closed:
                    return events, closed.rcvd.code if closed.rcvd else None

        events, code = asyncio.run(run())
        assert completed(events) == expected
        assert code == 1001
        assert running.stop() == 0
