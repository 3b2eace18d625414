"""`streamasr serve --wyoming`: a real server process, the `wyoming` package's own client.

The client does what Home Assistant's Wyoming integration does: `describe` for the
service's info, then per voice command `transcribe`, `audio-start`, the audio in chunks,
`audio-stop`, and reads until the `transcript`. The transcript must be the finals
`streamasr file` prints for the same audio with the server's live settings (100 ms blocks,
as the chunks are, and 0.3 s of tail padding), joined; bad input must end only the
connection it came on, with one error event, while a Wyoming and a WebSocket session beside
it go on; SIGTERM must send an open utterance's transcript before the server exits 0.
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile as sf
from serve_fixture import (
    REPO,
    ServerProcess,
    clip,
    comparable,
    file_events,
    http_get,
    serve,
    stream_clip,
    wait_for,
)
from websockets.asyncio.client import connect

pytest.importorskip("wyoming")

from wyoming.asr import Transcribe, Transcript  # noqa: E402
from wyoming.audio import AudioChunk, AudioStart, AudioStop  # noqa: E402
from wyoming.client import AsyncTcpClient  # noqa: E402
from wyoming.event import Event, async_read_event, async_write_event  # noqa: E402
from wyoming.info import Describe, Info  # noqa: E402

CLIPS = [clip(index) for index in range(4)]
#: The server's session defaults, as `streamasr file` options.
LIVE = ("--block-ms", "100", "--tail-padding", "0.3")
READ_LIMIT_S = 60.0


@pytest.fixture(scope="module")
def reference() -> dict[str, list[dict[str, Any]]]:
    return file_events(*CLIPS, options=LIVE)


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    # --max-batch 1: texts are compared with `streamasr file`'s, and the bundled model is
    # int8, whose output depends on the streams batched with it (docs/performance.md)
    with serve("--wyoming", "tcp://127.0.0.1:0", "--max-batch", "1", "--max-frame-bytes",
               "65536") as running:  # fmt: skip
        yield running


def wyoming_port(server: ServerProcess) -> int:
    """The Wyoming port the server printed (it prints it before the WebSocket line)."""
    for line in server.stderr_lines:
        match = re.search(r"wyoming on tcp://127\.0\.0\.1:(\d+)", line)
        if match:
            return int(match.group(1))
    raise AssertionError("no wyoming line:\n" + "".join(server.stderr_lines))


def text_of(events: list[dict[str, Any]]) -> str:
    """The utterance's finals joined, as the transcript carries them."""
    return " ".join(e["text"] for e in events if e["type"] == "final" and e["text"])


def interleaved(path: str) -> tuple[np.ndarray, int]:
    """A clip's int16 samples, frames x channels, and its rate."""
    data, rate = sf.read(REPO / path, dtype="int16", always_2d=True)
    return data, rate


class Command:
    """One voice command over its own connection, as Home Assistant sends it."""

    def __init__(self, port: int, frames: np.ndarray, rate: int, width: int = 2) -> None:
        self.port = port
        self.frames = frames  # samples x channels, of the dtype `width` says
        self.rate = rate
        self.width = width
        self.client = AsyncTcpClient("127.0.0.1", port)

    @property
    def channels(self) -> int:
        return int(self.frames.shape[1])

    async def start(self) -> None:
        await self.client.connect()
        await self.client.write_event(Transcribe(language="en").event())
        await self.client.write_event(
            AudioStart(rate=self.rate, width=self.width, channels=self.channels).event()
        )

    async def send(self, start_s: float = 0.0, end_s: float | None = None) -> None:
        """Audio from start_s to end_s in 100 ms chunks (the server's feed block)."""
        step = self.rate // 10
        first = round(start_s * self.rate)
        last = len(self.frames) if end_s is None else round(end_s * self.rate)
        for at in range(first, last, step):
            block = self.frames[at : min(at + step, last)]
            await self.client.write_event(
                AudioChunk(rate=self.rate, width=self.width, channels=self.channels,
                           audio=block.tobytes()).event()  # fmt: skip
            )

    async def stop(self) -> list[Event]:
        await self.client.write_event(AudioStop().event())
        return await self.read_to_end()

    async def read_to_end(self) -> list[Event]:
        """Events until the server closes the connection after the transcript stream."""
        events: list[Event] = []
        while True:
            event = await asyncio.wait_for(self.client.read_event(), READ_LIMIT_S)
            if event is None:
                return events
            events.append(event)
            if event.type == "transcript-stop":
                await self.client.disconnect()
                return events

    async def run(self) -> list[Event]:
        await self.start()
        await self.send()
        return await self.stop()


def transcript(events: list[Event]) -> str:
    found = [Transcript.from_event(e).text for e in events if Transcript.is_type(e.type)]
    assert len(found) == 1, [e.type for e in events]
    return found[0]


def chunks(events: list[Event]) -> list[str]:
    return [e.data["text"] for e in events if e.type == "transcript-chunk"]


def test_describe_gives_the_model_and_its_language(server: ServerProcess) -> None:
    async def run() -> Event | None:
        async with AsyncTcpClient("127.0.0.1", wyoming_port(server)) as client:
            await client.write_event(Describe().event())
            return await asyncio.wait_for(client.read_event(), READ_LIMIT_S)

    event = asyncio.run(run())
    assert event is not None and Info.is_type(event.type)
    info = Info.from_event(event)
    (program,) = info.asr
    assert program.installed and program.supports_transcript_streaming
    (model,) = program.models
    assert model.name == "tiny-en" and model.languages == ["en"] and model.installed


def test_transcripts_equal_file_command_concurrent_commands(
    server: ServerProcess, reference: dict[str, list[dict[str, Any]]]
) -> None:
    port = wyoming_port(server)

    async def run() -> list[list[Event]]:
        commands = [Command(port, *interleaved(path)) for path in CLIPS]
        return await asyncio.gather(*(command.run() for command in commands))

    for path, events in zip(CLIPS, asyncio.run(run()), strict=True):
        expected = text_of(reference[path])
        assert expected
        assert transcript(events) == expected, path
        types = [e.type for e in events]
        assert types[0] == "transcript-start" and types[-2:] == ["transcript", "transcript-stop"]
        # the chunks stream the partials' new text; without revisions they add up to it
        if reference[path][-1]["revisions"] == 0:
            assert "".join(chunks(events)) == expected, path
        assert chunks(events), path


def test_other_rate_width_and_channels(
    server: ServerProcess, reference: dict[str, list[dict[str, Any]]], tmp_path: Path
) -> None:
    """22050 Hz stereo 16-bit against `streamasr file` on the same WAV; 32-bit mono holds
    the 16-bit samples exactly, so its transcript is the clip's."""
    data, rate = interleaved(CLIPS[1])
    mono = data[:, 0].astype(np.float64)
    times = np.arange(round(len(mono) * 22050 / rate)) * (rate / 22050)
    resampled = np.interp(times, np.arange(len(mono)), mono)
    stereo = np.stack([resampled, resampled * 0.5], axis=1).round().astype(np.int16)
    wav = tmp_path / "stereo22050.wav"
    sf.write(wav, stereo, 22050, subtype="PCM_16")
    expected_stereo = text_of(file_events(str(wav), options=LIVE)[str(wav)])
    wide = data.astype(np.int32) << 16
    port = wyoming_port(server)

    async def run() -> list[list[Event]]:
        return await asyncio.gather(
            Command(port, stereo, 22050).run(), Command(port, wide, rate, width=4).run()
        )

    stereo_events, wide_events = asyncio.run(run())
    assert expected_stereo
    assert transcript(stereo_events) == expected_stereo
    assert transcript(wide_events) == text_of(reference[CLIPS[1]])


def _header(event: dict[str, Any]) -> bytes:
    return json.dumps(event).encode() + b"\n"


CHUNK_FORMAT = {"rate": 16000, "width": 2, "channels": 1}
#: name: (bytes sent, words in the error text, its code, the dropped-connections reason)
HOSTILE = {
    "huge payload_length": (
        _header({"type": "audio-chunk", "data": CHUNK_FORMAT, "payload_length": 2_000_000_000}),
        "payload_length 2000000000 is over", "frame-too-big", "frame_too_big",
    ),
    "huge data_length": (
        _header({"type": "transcribe", "data_length": 1 << 40}),
        "data_length", "frame-too-big", "frame_too_big",
    ),
    "invalid JSON": (b'{"type": "describe", \n', "not valid UTF-8 JSON", "invalid-event",
                     "invalid_input"),
    "chunk before audio-start": (
        _header({"type": "audio-chunk", "data": CHUNK_FORMAT, "payload_length": 4}) + b"\0" * 4,
        "audio-chunk before audio-start", "unexpected-event", "unexpected_message",
    ),
    "over-long header line": (b'{"type": "' + b"x" * 200_000, "header line longer than",
                              "frame-too-big", "frame_too_big"),
    "chunk of half a sample": (
        _header({"type": "audio-start", "data": CHUNK_FORMAT})
        + _header({"type": "audio-chunk", "data": CHUNK_FORMAT, "payload_length": 3}) + b"\0" * 3,
        "not a whole number of 2-byte sample frames", "bad-audio", "invalid_input",
    ),
}  # fmt: skip


def _dropped(server: ServerProcess, reason: str) -> float:
    line = f'streamasr_dropped_connections_total{{reason="{reason}"}} '
    found = [x for x in http_get(server.http + "/metrics")[1].splitlines() if x.startswith(line)]
    return float(found[0].split()[-1]) if found else 0.0


@pytest.mark.parametrize("case", list(HOSTILE))
def test_hostile_input_ends_only_its_connection(
    server: ServerProcess, reference: dict[str, list[dict[str, Any]]], case: str
) -> None:
    sent, words, code, reason = HOSTILE[case]
    port = wyoming_port(server)
    before = _dropped(server, reason)

    async def hostile() -> list[Event]:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(sent)
        await writer.drain()
        events = []
        while (event := await asyncio.wait_for(async_read_event(reader), READ_LIMIT_S)):
            events.append(event)
        writer.close()
        return events

    async def run() -> tuple[list[Event], list[Event], list[dict]]:
        # a command in progress on its own connection while the hostile one comes and goes
        bystander = Command(port, *interleaved(CLIPS[2]))
        await bystander.start()
        await bystander.send(0.0, 0.8)
        bad = await hostile()
        await bystander.send(0.8)
        good = await bystander.stop()
        async with connect(server.url) as ws:  # and the WebSocket side still serves
            ws_events = await stream_clip(ws, CLIPS[3], frame_bytes=3200)
        return bad, good, ws_events

    bad, good, ws_events = asyncio.run(run())
    # one error event (after the stream's start, where audio-start came), then the close
    assert [e.type for e in bad if e.type != "transcript-start"] == ["error"], bad
    assert words in bad[-1].data["text"], bad[-1].data
    assert bad[-1].data["code"] == code
    assert transcript(good) == text_of(reference[CLIPS[2]])
    assert comparable(ws_events) == comparable(reference[CLIPS[3]])
    assert _dropped(server, reason) == before + 1


def test_unknown_events_are_dropped_as_the_protocol_asks(server: ServerProcess) -> None:
    """A newer client's event this server does not know ends nothing."""

    async def run() -> list[Event]:
        reader, writer = await asyncio.open_connection("127.0.0.1", wyoming_port(server))
        for event in (Event("some-future-event", {"x": 1}, b"\0" * 8), Event("ping"),
                      Describe().event()):  # fmt: skip
            await async_write_event(event, writer)
        events = [await asyncio.wait_for(async_read_event(reader), READ_LIMIT_S)
                  for _ in range(2)]  # fmt: skip
        writer.close()
        return [event for event in events if event is not None]

    assert [event.type for event in asyncio.run(run())] == ["pong", "info"]


def test_capacity_refusal_and_sigterm_sends_the_open_transcript(
    reference: dict[str, list[dict[str, Any]]],
) -> None:
    """At --max-connections a Wyoming client is refused with an error event; SIGTERM with
    an utterance open (all audio sent, no audio-stop) sends its transcript once the grace
    period ends, then the server exits 0."""
    with serve("--wyoming", "tcp://127.0.0.1:0", "--max-connections", "1", "--grace-s", "1",
               "--max-batch", "1") as server:  # fmt: skip
        port = wyoming_port(server)

        async def refused() -> list[Event]:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            events = []
            while (event := await asyncio.wait_for(async_read_event(reader), READ_LIMIT_S)):
                events.append(event)
            writer.close()
            return events

        async def run() -> tuple[list[Event], list[Event]]:
            command = Command(port, *interleaved(CLIPS[0]))
            await command.start()
            await command.send()  # and no audio-stop
            refusal = await refused()
            events = []
            while not chunks(events):  # decoding has begun
                event = await asyncio.wait_for(command.client.read_event(), READ_LIMIT_S)
                assert event is not None
                events.append(event)
            server.process.send_signal(signal.SIGTERM)
            return refusal, [*events, *await command.read_to_end()]

        refusal, events = asyncio.run(run())
        assert server.stop() == 0
    assert [e.type for e in refusal] == ["error"] and refusal[0].data["code"] == "capacity"
    assert "--max-connections" in refusal[0].data["text"]
    assert transcript(events) == text_of(reference[CLIPS[0]])
    assert events[-1].type == "transcript-stop"
    assert wait_for(lambda: any("stopped" in line for line in server.stderr_lines), 5)


def test_a_second_sigterm_ends_the_drain_with_the_open_transcript(
    reference: dict[str, list[dict[str, Any]]],
) -> None:
    """SIGTERM with an utterance open (no audio-stop) and a long grace period: the drain
    waits; a second SIGTERM, later than a copy of the first would come, ends the Wyoming
    session as it does a WebSocket one: its transcript is sent, then the server exits 0."""
    from streamasr.server.app import DUPLICATE_SIGNAL_S

    with serve("--wyoming", "tcp://127.0.0.1:0", "--grace-s", "300", "--idle-timeout-s", "300",
               "--max-batch", "1") as server:  # fmt: skip
        port = wyoming_port(server)

        async def run() -> tuple[list[tuple[float, Event]], float]:
            command = Command(port, *interleaved(CLIPS[0]))
            await command.start()
            await command.send()  # and no audio-stop
            events: list[tuple[float, Event]] = []

            async def read() -> None:
                while (event := await command.client.read_event()) is not None:
                    events.append((time.monotonic(), event))
                    if event.type == "transcript-stop":
                        return

            reading = asyncio.create_task(read())
            while not chunks([event for _, event in events]):  # decoding has begun
                await asyncio.sleep(0.05)
            server.process.send_signal(signal.SIGTERM)
            await asyncio.sleep(DUPLICATE_SIGNAL_S + 1.0)
            second = time.monotonic()
            server.process.send_signal(signal.SIGTERM)
            await asyncio.wait_for(reading, READ_LIMIT_S)
            await command.client.disconnect()
            return events, second

        events, second = asyncio.run(run())
        assert server.process.wait(30) == 0  # not the grace period's end, nor an idle one
    ended = [at for at, event in events if Transcript.is_type(event.type)]
    assert ended and ended[0] >= second  # the first signal alone left the session open
    assert transcript([event for _, event in events]) == text_of(reference[CLIPS[0]])
    assert events[-1][1].type == "transcript-stop"


def test_idle_connection_gets_its_transcript_then_an_error(
    reference: dict[str, list[dict[str, Any]]],
) -> None:
    """All audio sent, no audio-stop, then nothing: after --idle-timeout-s the utterance
    is ended, its transcript sent, then one error event says why the connection ends."""
    with serve("--wyoming", "tcp://127.0.0.1:0", "--idle-timeout-s", "1",
               "--max-batch", "1") as server:  # fmt: skip
        port = wyoming_port(server)

        async def run() -> list[Event]:
            command = Command(port, *interleaved(CLIPS[3]))
            await command.start()
            await command.send()
            events = []
            while (event := await asyncio.wait_for(command.client.read_event(), READ_LIMIT_S)):
                events.append(event)
            return events

        events = asyncio.run(run())
    assert transcript(events) == text_of(reference[CLIPS[3]])
    assert [e.type for e in events][-3:] == ["transcript", "transcript-stop", "error"]
    assert events[-1].data["code"] == "idle" and "--idle-timeout-s" in events[-1].data["text"]


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("--wyoming", "http://127.0.0.1:10300"), "use tcp://HOST:PORT"),
        (("--wyoming", "tcp://127.0.0.1"), "use tcp://HOST:PORT"),
        (("--wyoming", "tcp://127.0.0.1:70000"), "PORT 0-65535"),
        (("--wyoming", "tcp://127.0.0.1:10300/x"), "use tcp://HOST:PORT"),
        (("--wyoming", "tcp://127.0.0.1:0", "--workers", "2"), "one process"),
    ],
)
def test_bad_wyoming_option_is_a_usage_error(args: tuple[str, ...], words: str) -> None:
    from typer.testing import CliRunner

    from streamasr.cli import app

    result = CliRunner().invoke(app, ["serve", "--model", "tiny-en", *args])
    assert result.exit_code == 2, result.output
    assert words in result.output
