"""The parts of `streamasr serve` that need no server: the protocol, limits, the token, the
slow-client rule."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from streamasr.audio import to_mono
from streamasr.backends.base import EndpointOptions
from streamasr.errors import InputError, UsageError
from streamasr.server.connection import Connection
from streamasr.server.limits import Security, ServerLimits, check_limits, load_token
from streamasr.server.protocol import (
    CLOSE_INVALID,
    CLOSE_UNSUPPORTED,
    MAX_REASON_BYTES,
    ProtocolError,
    SessionConfig,
    close_reason,
    decode_frame,
    is_end,
    parse_config,
)
from streamasr.session.stream import StreamOptions

SERVER_RULES = EndpointOptions()


def test_config_defaults_and_session_settings() -> None:
    config = parse_config(json.dumps({"sample_rate": 8000}), SERVER_RULES)
    assert config == SessionConfig(8000)
    ruled = parse_config(
        json.dumps({"sample_rate": 16000, "rule2_s": 0.5, "partials": "delta"}), SERVER_RULES
    )
    assert ruled.endpoint == EndpointOptions(rule2_s=0.5) and ruled.partials == "delta"


def test_session_feed_block_and_tail_padding() -> None:
    base = StreamOptions(block_s=0.1, tail_padding_s=0.3)
    assert SessionConfig(16000).stream_options(base) == base  # not given: the server's
    chunk = parse_config(
        json.dumps({"sample_rate": 16000, "block_ms": "chunk", "tail_padding_s": 0}), SERVER_RULES
    )
    assert chunk.stream_options(base) == StreamOptions(block_s=None, tail_padding_s=0.0)
    own = parse_config(json.dumps({"sample_rate": 16000, "block_ms": 250}), SERVER_RULES, 500)
    assert own.stream_options(base) == StreamOptions(block_s=0.25, tail_padding_s=0.3)
    # a block per message: cut at the server's feed block, so its options are the server's
    per_message = parse_config(json.dumps({"sample_rate": 16000, "block_ms": "message"}),
                               SERVER_RULES)
    assert per_message.block_ms == "message" and per_message.stream_options(base) == base
    with pytest.raises(ProtocolError, match="from 10 to 500 ms"):  # the server's queue limit
        parse_config(json.dumps({"sample_rate": 16000, "block_ms": 501}), SERVER_RULES, 500)


def test_file_over_server_sends_its_own_block_and_padding() -> None:
    from streamasr.commands.options import ModelOptions
    from streamasr.commands.remote import session_settings

    assert session_settings(ModelOptions()) == {"block_ms": "chunk", "tail_padding_s": 0.66}
    given = session_settings(ModelOptions(block_ms=100.0, tail_padding_s=0.3, rule2_s=0.5))
    assert given == {"block_ms": 100.0, "tail_padding_s": 0.3, "rule2_s": 0.5}


@pytest.mark.parametrize(
    "message",
    [
        "{", "[]", '{"sample_rate": 16000.5}', '{"sample_rate": true}', '{"sample_rate": 10}',
        '{"sample_rate": 16000, "channels": 0}', '{"sample_rate": 16000, "format": "s24le"}',
        '{"sample_rate": 16000, "rule1_s": -1}', '{"sample_rate": 16000, "rule1_s": NaN}',
        '{"sample_rate": 16000, "realtime": "yes"}', '{"sample_rate": 16000, "type": "end"}',
        '{"sample_rate": 16000, "source": 5}', "{}", '{"sample_rate": 16000, "extra": 1}',
        '{"sample_rate": 16000, "block_ms": -1}', '{"sample_rate": 16000, "block_ms": NaN}',
        '{"sample_rate": 16000, "block_ms": 9}', '{"sample_rate": 16000, "block_ms": 1e12}',
        '{"sample_rate": 16000, "block_ms": "frame"}', '{"sample_rate": 16000, "block_ms": null}',
        '{"sample_rate": 16000, "tail_padding_s": -0.1}',
        '{"sample_rate": 16000, "tail_padding_s": 2.5}',
        '{"sample_rate": 16000, "tail_padding_s": Infinity}',
        '{"sample_rate": 16000, "tail_padding_s": false}',
    ],
)
def test_bad_configs_close_with_1007(message: str) -> None:
    with pytest.raises(ProtocolError) as caught:
        parse_config(message, SERVER_RULES)
    assert caught.value.code == CLOSE_INVALID and caught.value.reason
    assert isinstance(caught.value, InputError)  # one exception tree


def test_binary_config_and_stray_text() -> None:
    with pytest.raises(ProtocolError) as caught:
        parse_config(b"\x00\x01", SERVER_RULES)
    assert caught.value.code == CLOSE_UNSUPPORTED
    assert is_end('{"type": "end"}')
    with pytest.raises(ProtocolError) as stray:
        is_end('{"sample_rate": 16000}')
    assert stray.value.code == CLOSE_UNSUPPORTED


def test_frames_decode_like_file_reads_them() -> None:
    rng = np.random.default_rng(0)
    stereo = rng.integers(-32768, 32767, size=(300, 2), dtype=np.int16)
    config = SessionConfig(16000, "s16le", 2)
    decoded = decode_frame(stereo.tobytes(), config)
    assert np.array_equal(decoded, to_mono(stereo.astype(np.float32) / 32768.0))
    floats = rng.standard_normal(100).astype(np.float32)
    f32 = SessionConfig(16000, "f32le")
    assert np.array_equal(decode_frame(floats.astype("<f4").tobytes(), f32), floats)
    for bad, fmt, channels in ((b"\x00" * 3, "s16le", 1), (b"\x00" * 6, "s16le", 2),
                               (np.float32([np.nan]).tobytes(), "f32le", 1)):
        with pytest.raises(ProtocolError) as caught:
            decode_frame(bad, SessionConfig(16000, fmt, channels))
        assert caught.value.code == CLOSE_INVALID


def test_close_reasons_fit_a_close_frame() -> None:
    long = "é" * 200
    assert len(close_reason(long).encode()) <= MAX_REASON_BYTES
    assert close_reason("short") == "short"


def test_limits_and_token(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert check_limits(ServerLimits()) == ServerLimits()
    with pytest.raises(UsageError, match="--max-connections 0"):
        check_limits(ServerLimits(max_connections=0))
    with pytest.raises(UsageError, match="--grace-s"):
        check_limits(ServerLimits(grace_s=float("inf")))
    monkeypatch.setenv("STREAMASR_TOKEN", " env-token ")
    assert load_token(None) == "env-token"
    token_file = tmp_path / "token"
    token_file.write_text("file-token\nignored\n")
    assert load_token(str(token_file)) == "file-token"
    token_file.write_text("\n")
    with pytest.raises(UsageError, match="empty"):
        load_token(str(token_file))
    security = Security(token="file-token")
    assert security.allows("file-token")
    assert not security.allows("file-toke") and not security.allows(None)
    assert Security().allows(None)


def test_a_client_that_does_not_read_is_closed_not_waited_for() -> None:
    async def run() -> Connection:
        server = SimpleNamespace(limits=ServerLimits(send_queue_events=16))
        connection = Connection(server, ws=None)  # type: ignore[arg-type]
        connection.deliver([f'{{"n": {n}}}' for n in range(16)])
        assert connection.stop_requested is None
        connection.deliver(['{"n": 16}'])
        return connection

    connection = asyncio.run(run())
    assert connection.stop_requested is not None
    assert connection.stop_requested.kind == "slow_client"
    assert connection.stop_requested.code == 1008
    assert "too slow" in connection.stop_requested.reason


class _SilentSocket:
    """A WebSocket whose client never sends anything."""

    remote_address = ("127.0.0.1", 0)
    close_code = None

    async def recv(self) -> str:
        await asyncio.sleep(3600)
        return ""


@pytest.mark.parametrize(
    ("limits", "waiting_for", "kind", "words"),
    [
        (ServerLimits(max_session_s=0.05), "idle", "session_limit", "--max-session-s"),
        (ServerLimits(idle_timeout_s=0.05), "idle", "idle", "--idle-timeout-s"),
        (ServerLimits(), "config", "handshake_timeout", "no config within 0.05 s"),
    ],
)
def test_limits_end_a_silent_connection(
    limits: ServerLimits, waiting_for: str, kind: str, words: str
) -> None:
    from streamasr.server.connection import Stop

    async def run() -> Stop:
        connection = Connection(SimpleNamespace(limits=limits), _SilentSocket())  # type: ignore[arg-type]
        timeout = 0.05 if waiting_for == "config" else limits.idle_timeout_s
        try:
            await connection._receive(timeout, waiting_for)
        except Stop as stop:
            return stop
        raise AssertionError("not stopped")

    stop = asyncio.run(run())
    assert stop.kind == kind and words in stop.reason
    assert stop.flush == (kind != "handshake_timeout")  # an open utterance gets its final


class _PacedSocket:
    """A WebSocket whose client sends `count` messages `gap_s` apart, then nothing."""

    remote_address = ("127.0.0.1", 0)
    close_code = None

    def __init__(self, count: int, gap_s: float) -> None:
        self.left = count
        self.gap_s = gap_s

    async def recv(self) -> bytes:
        if self.left == 0:
            await asyncio.sleep(3600)
        await asyncio.sleep(self.gap_s)
        self.left -= 1
        return b"\0\0"


def test_the_idle_limit_counts_from_the_last_message() -> None:
    """Messages that keep coming within the limit are all read, however long they go on;
    silence after them is what the limit ends."""
    from streamasr.server.connection import Stop

    limits = ServerLimits(idle_timeout_s=0.5)

    async def run() -> tuple[int, Stop]:
        connection = Connection(SimpleNamespace(limits=limits), _PacedSocket(16, 0.05))  # type: ignore[arg-type]
        received = 0
        try:
            while True:
                await connection._receive(limits.idle_timeout_s, "idle")
                received += 1
        except Stop as stop:
            return received, stop

    received, stop = asyncio.run(run())
    assert received == 16
    assert stop.kind == "idle"


def test_a_stop_request_ends_a_wait_for_a_message() -> None:
    """request_stop (shutdown, a slow client) ends a pending receive with that stop, and
    leaves the handler task uncancelled; a cancellation from elsewhere still cancels."""
    from streamasr.server.connection import Stop

    stop = Stop(1001, "server shutting down", "shutdown", flush=True)

    async def stopped() -> tuple[Stop, int]:
        connection = Connection(SimpleNamespace(limits=ServerLimits()), _SilentSocket())  # type: ignore[arg-type]
        asyncio.get_running_loop().call_later(0.01, connection.request_stop, stop)
        try:
            await connection._receive(30.0, "idle")
        except Stop as raised:
            task = asyncio.current_task()
            return raised, task.cancelling() if hasattr(task, "cancelling") else 0
        raise AssertionError("not stopped")

    raised, cancelling = asyncio.run(stopped())
    assert raised is stop
    assert cancelling == 0

    async def cancelled() -> bool:
        connection = Connection(SimpleNamespace(limits=ServerLimits()), _SilentSocket())  # type: ignore[arg-type]
        receiving = asyncio.ensure_future(connection._receive(30.0, "idle"))
        await asyncio.sleep(0.01)
        receiving.cancel()
        with pytest.raises(asyncio.CancelledError):
            await receiving
        return receiving.cancelled()

    assert asyncio.run(cancelled())

    async def stopped_before() -> Stop:
        """A stop requested while the handler was busy: the next receive raises it."""
        connection = Connection(SimpleNamespace(limits=ServerLimits()), _SilentSocket())  # type: ignore[arg-type]
        connection.request_stop(stop)
        try:
            await connection._receive(30.0, "idle")
        except Stop as raised:
            return raised
        raise AssertionError("not stopped")

    assert asyncio.run(stopped_before()) is stop


def test_a_stop_while_a_final_is_awaited_leaves_it_to_the_flush() -> None:
    """A stop that comes while the handler waits for an utterance's end must not cancel the
    scheduler's future: the stop's flush awaits that same future for the last final."""
    from streamasr.server.connection import Stop

    stop = Stop(1001, "server shutting down", "shutdown", flush=True)

    async def run() -> bool:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        scheduler = SimpleNamespace(end=lambda utterance: done)
        server = SimpleNamespace(limits=ServerLimits(), scheduler=scheduler)
        connection = Connection(server, _SilentSocket())  # type: ignore[arg-type]
        connection.utterance = object()  # type: ignore[assignment]
        loop.call_later(0.01, connection.request_stop, stop)
        with pytest.raises(Stop):
            await connection._finish_utterance()
        return done.cancelled()

    assert not asyncio.run(run())


def test_copies_of_one_stop_signal_count_once(monkeypatch: pytest.MonkeyPatch) -> None:
    import signal

    from streamasr.server import app
    from streamasr.server.limits import Security
    from streamasr.session.stream import StreamOptions

    now = [100.0]
    monkeypatch.setattr(app.time, "monotonic", lambda: now[0])
    server = app.StreamServer(None, StreamOptions(), ServerLimits(), Security())  # type: ignore[arg-type]
    stops: list[str] = []

    class Open:
        def request_stop(self, stop: Any) -> None:
            stops.append(stop.kind)

    server.connections.add(Open())  # type: ignore[arg-type]
    try:
        server.request_stop(signal.SIGTERM)
        now[0] += 0.2
        server.request_stop(signal.SIGTERM)  # the same stop, from another sender
        assert stops == [] and server.stop_signal == signal.SIGTERM
        now[0] += 2.0
        server.request_stop(signal.SIGINT)  # a second stop: the grace period ends now
        assert stops == ["shutdown"] and server.stop_signal == signal.SIGTERM
    finally:
        server.scheduler.close()


def test_serve_defaults_to_live_settings_unless_given() -> None:
    import click
    from click.core import ParameterSource

    from streamasr.commands.options import ModelOptions
    from streamasr.commands.serve import live_defaults

    with click.Context(click.Command("serve")) as context:
        live = live_defaults(ModelOptions())
        assert (live.block_ms, live.tail_padding_s) == (100.0, 0.3)
        # --tail-padding 0.66 given: kept, though it is file's default
        context.set_parameter_source("tail_padding_s", ParameterSource.COMMANDLINE)
        given = live_defaults(ModelOptions())
        assert (given.block_ms, given.tail_padding_s) == (100.0, 0.66)
    # set elsewhere (the user's config): kept
    assert live_defaults(ModelOptions(block_ms=320.0)).block_ms == 320.0


def test_serve_help_says_the_servers_own_feed_defaults() -> None:
    """serve's sessions default to a block per message (cut at 100 ms) and 0.3 s padding;
    its --help says so, and file's --help keeps file's wording."""
    env = {**os.environ, "COLUMNS": "200", "TERM": "dumb"}
    serve_help = subprocess.run(
        [sys.executable, "-m", "streamasr", "serve", "--help"],
        capture_output=True, text=True, env=env, timeout=120, check=True,
    ).stdout  # fmt: skip
    file_help = subprocess.run(
        [sys.executable, "-m", "streamasr", "file", "--help"],
        capture_output=True, text=True, env=env, timeout=120, check=True,
    ).stdout  # fmt: skip
    assert "default: each message as it comes, cut at 100 ms" in " ".join(serve_help.split())
    assert "default 0.3" in serve_help
    assert "default one chunk" in file_help and "default 100" not in file_help
