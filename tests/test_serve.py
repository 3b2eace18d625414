"""`streamasr serve`: a real server process on 127.0.0.1, real WebSocket clients.

The server must send, per utterance, exactly the events `streamasr file --format jsonl`
prints for the same audio with the same feed block and tail padding (the clocks aside): the
server's (100 ms, 0.3 s) or a session's own; `streamasr file --server` and
`streamasr.connect` must give what the local model gives; bad input must close only the
connection it came on, with a reason; limits, the token and SIGTERM must behave as
documented.
"""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import soundfile as sf
from serve_fixture import (
    REPO,
    ServerProcess,
    clip,
    comparable,
    file_events,
    http_get,
    pcm,
    read_until_summary,
    serve,
    stream_clip,
    wait_for,
)
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

import streamasr
from streamasr.errors import InputError

CLIPS = [clip(index) for index in range(4)]
#: The server's session defaults, as `streamasr file` options.
LIVE = ("--block-ms", "100", "--tail-padding", "0.3")
#: What a session sends to be decoded with `streamasr file`'s defaults instead.
FILE_SETTINGS = {"block_ms": "chunk", "tail_padding_s": 0.66}


@pytest.fixture(scope="module")
def reference() -> dict[str, list[dict[str, Any]]]:
    """`streamasr file --format jsonl` on the bundled clips, with the server's defaults."""
    return file_events(*CLIPS, options=LIVE)


@pytest.fixture(scope="module")
def file_defaults() -> dict[str, list[dict[str, Any]]]:
    """`streamasr file --format jsonl` with its own defaults (one chunk, 0.66 s)."""
    return file_events(*CLIPS[:2])


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    # --max-batch 1: texts are compared with `streamasr file`'s, and the bundled model is
    # int8, whose output depends on the streams batched with it (docs/performance.md)
    with serve(
        "--max-connections", "16", "--handshake-timeout-s", "2", "--max-frame-bytes", "65536",
        "--allow-origin", "http://captions.example", "--max-batch", "1",
    ) as running:
        yield running


def test_events_equal_file_command_two_files_one_connection(
    server: ServerProcess,
    reference: dict[str, list[dict[str, Any]]],
    file_defaults: dict[str, list[dict[str, Any]]],
) -> None:
    async def run() -> list[list[dict]]:
        async with connect(server.url) as ws:
            # fixed 100 ms feed blocks, whatever the message size (the default feeds each
            # message as it comes: 100 ms messages, test_serve_inline.py)
            first = await stream_clip(ws, CLIPS[0], frame_bytes=1000, block_ms=100)
            # the next utterance asks for its own feed block and tail padding
            second = await stream_clip(ws, CLIPS[1], frame_bytes=16000, **FILE_SETTINGS)
            return [first, second]

    first, second = asyncio.run(run())
    assert comparable(first) == comparable(reference[CLIPS[0]])
    assert comparable(second) == comparable(file_defaults[CLIPS[1]])
    assert comparable(second) != comparable(reference[CLIPS[1]])  # the settings took effect
    assert [event["type"] for event in first][-2:] == ["final", "summary"]


def test_delta_partials_equal_file_command(server: ServerProcess) -> None:
    async def run() -> list[dict]:
        async with connect(server.url) as ws:
            return await stream_clip(ws, CLIPS[0], partials="delta")

    expected = file_events(CLIPS[0], options=("--partials", "delta", *LIVE))[CLIPS[0]]
    events = asyncio.run(run())
    assert comparable(events) == comparable(expected)
    assert any("text_tail" in event for event in events)


def test_concurrent_clients_each_get_their_own_text(
    server: ServerProcess, reference: dict[str, list[dict[str, Any]]]
) -> None:
    async def one(path: str) -> list[dict]:
        async with connect(server.url) as ws:
            return await stream_clip(ws, path, frame_bytes=640)

    async def run() -> list[list[dict]]:
        return await asyncio.gather(*(one(path) for path in CLIPS))

    results = asyncio.run(run())
    for path, events in zip(CLIPS, results, strict=True):
        assert {event["source"] for event in events} == {path}
        expected = reference[path]
        assert [e["text"] for e in events if e["type"] == "final"] == [
            e["text"] for e in expected if e["type"] == "final"
        ]
        assert events[-1]["audio_s"] == expected[-1]["audio_s"]


def _closed_with(coro: Any) -> tuple[int | None, str]:
    """Run a client coroutine that should be closed by the server: its code and reason."""

    async def run() -> tuple[int | None, str]:
        try:
            await coro
        except ConnectionClosed as exc:
            if exc.rcvd is None:
                return None, ""
            return exc.rcvd.code, exc.rcvd.reason
        return None, "not closed"

    return asyncio.run(run())


async def _send_then_read(url: str, *messages: str | bytes) -> None:
    async with connect(url) as ws:
        for message in messages:
            await ws.send(message)
        while True:
            await ws.recv()


CONFIG = json.dumps({"sample_rate": 16000, "format": "s16le", "channels": 1})
MALFORMED = {
    "bad config JSON": ((CONFIG[:-3],), 1007, "JSON"),
    "config not an object": (("[16000]",), 1007, "object"),
    "unknown config key": ((json.dumps({"sample_rate": 16000, "rate": 1}),), 1007, "rate"),
    "audio before the config": ((b"\x00\x00" * 10,), 1003, "config"),
    "odd-length s16le": ((CONFIG, b"\x00" * 3), 1007, "whole number"),
    "text where audio expected": ((CONFIG, "hello"), 1003, "binary audio"),
    "oversized frame": ((CONFIG, b"\x00" * 70000), 1009, ""),
    "unknown format": ((json.dumps({"sample_rate": 16000, "format": "mp3"}),), 1007, "s16le"),
    "negative block": ((json.dumps({"sample_rate": 16000, "block_ms": -100}),), 1007,
                       "block_ms must be a number from 10 to"),
    "huge block": ((json.dumps({"sample_rate": 16000, "block_ms": 1e300}),), 1007, "block_ms"),
    "block not a number": ((json.dumps({"sample_rate": 16000, "block_ms": "320"}),), 1007,
                           '"chunk"'),
    "huge padding": ((json.dumps({"sample_rate": 16000, "tail_padding_s": 1e9}),), 1007,
                     "tail_padding_s must be a number from 0 to 2 s"),
    "padding not a number": ((json.dumps({"sample_rate": 16000, "tail_padding_s": [1]}),),
                             1007, "tail_padding_s"),
}


def test_each_malformed_input_closes_only_its_connection(
    server: ServerProcess, reference: dict[str, list[dict[str, Any]]]
) -> None:
    async def bystander() -> list[dict]:
        async with connect(server.url) as ws:
            return await stream_clip(ws, CLIPS[2], frame_bytes=640, block_ms=100)

    async def bad(messages: tuple[str | bytes, ...]) -> tuple[int | None, str]:
        try:
            await _send_then_read(server.url, *messages)
        except ConnectionClosed as exc:
            return (exc.rcvd.code, exc.rcvd.reason) if exc.rcvd else (None, "")
        return None, "not closed"

    async def run() -> tuple[list[dict], list[tuple[int | None, str]]]:
        good = asyncio.create_task(bystander())
        closes = await asyncio.gather(*(bad(case[0]) for case in MALFORMED.values()))
        return await good, closes

    good, closes = asyncio.run(run())
    for (name, (_, code, words)), (got_code, reason) in zip(
        MALFORMED.items(), closes, strict=True
    ):
        assert got_code == code, (name, got_code, reason)
        assert reason, name
        assert words in reason, (name, reason)
    assert comparable(good) == comparable(reference[CLIPS[2]])


def _too_big_count(server: ServerProcess) -> float:
    metrics = http_get(server.http + "/metrics")[1]
    line = 'streamasr_dropped_connections_total{reason="frame_too_big"} '
    found = [x for x in metrics.splitlines() if x.startswith(line)]
    return float(found[0].split()[-1]) if found else 0.0


def test_an_oversized_message_the_server_refuses_is_counted(server: ServerProcess) -> None:
    """The server closes with 1009 and counts it, whether or not the client answers."""
    before = _too_big_count(server)
    code, _ = _closed_with(_send_then_read(server.url, CONFIG, b"\x00" * 70000))
    assert code == 1009
    # a raw client that sends one oversized frame and never reads the close
    key = "dGhlIHNhbXBsZSBub25jZQ=="
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as raw:
        raw.sendall(f"GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: "
                    f"Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13"
                    "\r\n\r\n".encode())  # fmt: skip
        assert raw.recv(4096).startswith(b"HTTP/1.1 101")
        mask = b"\x01\x02\x03\x04"
        text = CONFIG.encode()
        raw.sendall(bytes([0x81, 0x80 | len(text)]) + mask
                    + bytes(b ^ mask[i % 4] for i, b in enumerate(text)))  # fmt: skip
        size = 70000
        raw.sendall(bytes([0x82, 0x80 | 127]) + size.to_bytes(8, "big") + mask + bytes(size))
    assert wait_for(lambda: _too_big_count(server) == before + 2, 10), _too_big_count(server)


def test_config_never_sent_and_handshake_never_completed(server: ServerProcess) -> None:
    async def silent() -> None:
        async with connect(server.url) as ws:
            await ws.recv()

    code, reason = _closed_with(silent())
    assert code == 1008 and "no config within 2 s" in reason
    # a TCP connection that never sends its HTTP request is closed by the server
    received = b""
    with socket.create_connection(("127.0.0.1", server.port), timeout=60) as raw:
        while chunk := raw.recv(1024):
            received += chunk
    assert received == b"" or received.startswith(b"HTTP/1.1 4"), received
    status, _ = http_get(server.http + "/healthz")
    assert status == 200


def test_origin_check(server: ServerProcess) -> None:
    async def run(origin: str) -> int:
        try:
            async with connect(server.url, origin=origin) as ws:
                events = await stream_clip(ws, CLIPS[1])
                assert events[-1]["type"] == "summary"
                return 101
        except InvalidStatus as exc:
            return int(exc.response.status_code)

    assert asyncio.run(run("http://captions.example")) == 101
    assert asyncio.run(run("http://elsewhere.example")) == 403


def test_http_routes_and_metrics(server: ServerProcess) -> None:
    async def one() -> list[dict]:
        async with connect(server.url) as ws:
            return await stream_clip(ws, CLIPS[3])

    asyncio.run(one())
    assert http_get(server.http + "/healthz") == (200, "ok\n")
    assert http_get(server.http + "/readyz") == (200, "ready\n")
    status, page = http_get(server.http + "/")
    assert status == 200 and "<script src=\"app.js\">" in page
    for name in ("app.js", "worklet.js"):
        assert http_get(f"{server.http}/{name}")[0] == 200
    assert http_get(server.http + "/nothing")[0] == 404
    status, metrics = http_get(server.http + "/metrics")
    assert status == 200
    for name in (
        "streamasr_active_sessions",
        "streamasr_audio_seconds_total",
        "streamasr_compute_seconds_total",
        "streamasr_first_token_latency_seconds_bucket",
        "streamasr_refused_connections_total",
        "streamasr_dropped_connections_total",
        "streamasr_batch_streams_bucket",
    ):
        assert name in metrics, name
    audio = [line for line in metrics.splitlines() if line.startswith("streamasr_audio_seconds_t")]
    assert float(audio[0].split()[-1]) > 2.0


def test_capacity_refusal_token_and_back_pressure(
    tmp_path: Any, reference: dict[str, list[dict[str, Any]]]
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("s3cret\n")
    # a client that sends faster than the engine decodes is slowed down, not dropped
    queue = ("--max-queued-audio-s", "0.4")
    with serve("--max-connections", "1", "--token-file", str(token_file), *queue) as server:
        headers = {"Authorization": "Bearer s3cret"}

        async def run() -> tuple[Any, ...]:
            refusals = []
            for extra in ({}, {"Authorization": "Bearer wrong"}):
                try:
                    async with connect(server.url, additional_headers=extra):
                        pass
                except InvalidStatus as exc:
                    refusals.append(exc.response.status_code)
            async with connect(server.url, additional_headers=headers) as holder:
                await holder.send(CONFIG)
                ready = await asyncio.to_thread(http_get, server.http + "/readyz")
                try:
                    async with connect(server.url + "?token=s3cret") as second:
                        await second.recv()
                    refused: tuple[int | None, str] = (None, "")
                except ConnectionClosed as exc:
                    refused = (exc.rcvd.code, exc.rcvd.reason) if exc.rcvd else (None, "")
                await holder.send(json.dumps({"type": "end"}))
                summary = await read_until_summary(holder)
            # once the slot is free again, a token in the query (as the page sends it) works
            free = await asyncio.to_thread(
                wait_for, lambda: http_get(server.http + "/readyz")[0] == 200
            )
            assert free
            async with connect(server.url + "?token=s3cret") as third:
                events = await stream_clip(third, CLIPS[1], frame_bytes=32000)
            return refusals, ready, refused, summary, events

        refusals, ready, refused, summary, events = asyncio.run(run())
        assert refusals == [401, 401]
        assert ready[0] == 503 and "capacity" in ready[1]
        assert refused[0] == 1013 and "capacity" in refused[1]
        assert summary[-1]["type"] == "summary" and summary[-1]["audio_s"] == 0
        assert comparable(events) == comparable(reference[CLIPS[1]])
        metrics = http_get(server.http + "/metrics")[1]
        assert 'streamasr_refused_connections_total{reason="capacity"} 1.0' in metrics
        assert 'streamasr_refused_connections_total{reason="auth"} 2.0' in metrics


def test_idle_flushes_then_sigterm_flushes_open_session_and_exits_0(
    reference: dict[str, list[dict[str, Any]]]
) -> None:
    with serve("--grace-s", "1", "--idle-timeout-s", "5") as server:
        data, rate = pcm(CLIPS[1])

        async def idle() -> tuple[list[dict], int | None, str]:
            async with connect(server.url) as ws:
                await ws.send(json.dumps({"sample_rate": rate, "source": CLIPS[1]}))
                await ws.send(data)  # and then nothing: no end, no more audio
                events = []
                try:
                    while True:
                        events.append(json.loads(await ws.recv()))
                except ConnectionClosed as exc:
                    assert exc.rcvd is not None
                    return events, exc.rcvd.code, exc.rcvd.reason

        events, code, reason = asyncio.run(idle())
        assert code == 1001 and "idle" in reason
        assert comparable(events) == comparable(reference[CLIPS[1]])

        data, rate = pcm(CLIPS[0])

        async def run() -> tuple[list[dict], int | None, str]:
            async with connect(server.url) as ws:
                await ws.send(json.dumps({"sample_rate": rate, "source": CLIPS[0]}))
                await ws.send(data)  # all the audio, but no end: the session stays open
                events = [json.loads(await ws.recv())]  # decoding has begun
                server.process.send_signal(signal.SIGTERM)
                try:
                    while True:
                        events.append(json.loads(await ws.recv()))
                except ConnectionClosed as exc:
                    assert exc.rcvd is not None
                    return events, exc.rcvd.code, exc.rcvd.reason

        events, code, reason = asyncio.run(run())
        assert server.stop() == 0
    assert code == 1001 and "shutting down" in reason
    assert comparable(events) == comparable(reference[CLIPS[0]])
    assert wait_for(lambda: any("stopped" in line for line in server.stderr_lines), 5)


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("--max-batch", "0"), "--max-batch 0"),
        (("--idle-timeout-s", "nan"), "--idle-timeout-s"),
        (("--keyfile", "key.pem"), "--keyfile needs --certfile"),
        (("--certfile", "missing.pem"), "cannot load the certificate"),
        (("--token-file", "missing-token"), "--token-file missing-token"),
        (("--port", "70000"), "--port 70000"),
        (("--workers", "0"), "--workers 0"),
    ],
)
def test_bad_server_options_are_usage_errors(args: tuple[str, ...], words: str) -> None:
    from typer.testing import CliRunner

    from streamasr.cli import app

    result = CliRunner().invoke(app, ["serve", "--model", "tiny-en", *args])
    assert result.exit_code == 2, result.output
    assert words in result.output


# -- clients: `streamasr file --server` and `streamasr.connect` -----------------------------


def run_file(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "streamasr", "file", *args],
        cwd=REPO, capture_output=True, text=True,
    )


def test_file_with_server_prints_what_file_prints(
    server: ServerProcess, file_defaults: dict[str, list[dict[str, Any]]]
) -> None:
    # the server's defaults (100 ms, 0.3 s) are not file's: the client sends its own
    paths = CLIPS[:2]
    done = run_file(*paths, "--server", server.url, "--format", "jsonl")
    assert done.returncode == 0, done.stderr
    remote: dict[str, list[dict]] = {path: [] for path in paths}
    for line in done.stdout.splitlines():
        record = json.loads(line)
        remote[record["source"]].append(record)
    for path in paths:
        assert comparable(remote[path]) == comparable(file_defaults[path])
    text = run_file(CLIPS[0], "--server", server.url, "--format", "text", *LIVE)
    local_text = run_file(CLIPS[0], "--model", "tiny-en", "--format", "text", *LIVE)
    assert text.stdout == local_text.stdout and text.stdout.strip()


def test_file_with_server_refuses_model_options_and_says_unreachable(
    server: ServerProcess,
) -> None:
    refused = run_file(CLIPS[0], "--server", server.url, "--chunk", "32")
    assert refused.returncode == 2 and "--chunk is the server's setting" in refused.stderr
    unreachable = run_file(CLIPS[0], "--server", "ws://127.0.0.1:1/ws")
    assert unreachable.returncode == 1 and "cannot connect" in unreachable.stderr


def test_connect_streams_like_open_model(server: ServerProcess) -> None:
    audio, rate = sf.read(REPO / CLIPS[1], dtype="float32")
    local_model = streamasr.open_model("tiny-en")
    chunk = round(local_model.session(rate).block_s * rate)  # the feed block asked for
    local_blocks = [audio[start : start + chunk] for start in range(0, len(audio), chunk)]
    local = [event.to_dict() for event in local_model.stream(local_blocks, rate, CLIPS[1])]
    # any block size: the server cuts the audio into feed blocks of one chunk itself
    blocks = [audio[start : start + 1234] for start in range(0, len(audio), 1234)]
    with streamasr.connect(server.url) as remote_model:
        remote = [event.to_dict() for event in remote_model.stream(blocks, rate, CLIPS[1])]
        summary = remote_model.transcribe(audio, rate, CLIPS[1])  # same connection, again
    assert comparable(remote) == comparable(local)
    assert summary.text == local_model.transcribe(audio, rate).text and summary.text
    assert [final.text for final in summary.finals] == [
        event["text"] for event in local if event["type"] == "final"
    ]
    # a setting the server does not take (as `file --server --block-ms 5` sends it): an
    # input error with the server's reason, and the next connection is served
    with streamasr.connect(server.url) as remote_model:
        remote_model.settings = {"block_ms": 5, "tail_padding_s": 0.3}
        with pytest.raises(InputError, match="block_ms must be a number from 10 to"):
            remote_model.transcribe(audio, rate)
        remote_model.settings = {}  # the server's own settings
        assert remote_model.transcribe(audio, rate).text
