"""Wyoming, Home Assistant's voice protocol, on a second TCP port of `streamasr serve`.

Why: Home Assistant's Assist reaches speech-to-text services through Wyoming (its "Wyoming
Protocol" integration), so a server that speaks it is a speech-to-text choice there with no
glue. This is one adapter over the server's scheduler, as ws_adapter.py is for the WebSocket
protocol: each `audio-start` ... `audio-stop` (after an optional `transcribe`) is one
utterance of the same engine, batched with the WebSocket sessions and finished (punctuation,
casing) as the server's defaults say; its finals joined are the `transcript`, and its
partials' new text the streaming `transcript-chunk`s.

The `wyoming` package's classes make the events and write them; its reader does not read
them here: it reads whatever `data_length` and `payload_length` a header claims (2 GB
claimed is 2 GB of memory) and swallows a bad frame without a word. So frames are read here
(header line, data, payload) with caps, built into wyoming's `Event`, and a frame past a
cap, invalid JSON, an event out of order or audio that cannot be read gets one `error`
event; only that connection ends. Event types this server does not know are dropped, as the
protocol asks of servers (a newer client may send more).

Wyoming has no authentication: the listener is for a trusted LAN, and is off unless
`serve --wyoming tcp://HOST:PORT` is given.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import io
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import numpy as np
import wyoming.asr as wyoming_asr
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.error import Error
from wyoming.event import Event, write_event
from wyoming.info import AsrModel, AsrProgram, Attribution, Describe, Info
from wyoming.ping import Ping, Pong

from streamasr.audio import MAX_CHANNELS, MAX_RATE_HZ, MIN_RATE_HZ
from streamasr.distribution.catalog import find
from streamasr.errors import InputError, StreamAsrError, UsageError
from streamasr.server import protocol
from streamasr.server.connection import FLUSH_TIMEOUT_S
from streamasr.server.protocol import SessionConfig
from streamasr.server.reach import bracketed
from streamasr.server.utterance import Delivered, Utterance
from streamasr.session.events import Final, Partial, StreamSummary
from streamasr.version import __version__

if TYPE_CHECKING:
    from streamasr.server.app import StreamServer

log = logging.getLogger("streamasr")

#: One event's header line (JSON); Home Assistant's are well under 1 KiB.
MAX_HEADER_BYTES = 64 << 10
#: Events written but not yet taken by a client before it is dropped as too slow.
MAX_UNSENT_BYTES = 1 << 20
#: After an error event, what a client still sends is read and dropped for this long (and
#: up to LINGER_BYTES): closing with unread bytes resets the connection, and the reset can
#: destroy the error event before the client reads it.
LINGER_S = 2.0
LINGER_BYTES = 4 << 20
#: Sample widths in bytes: unsigned 8-bit, signed 16-, 24- and 32-bit, little-endian (what
#: wyoming's own AudioChunkConverter takes).
WIDTHS = (1, 2, 3, 4)
PROGRAM = "streamasr"
#: The streaming transcript events, where the installed wyoming has them (1.7 and later).
STREAMING = all(
    hasattr(wyoming_asr, name) for name in ("TranscriptStart", "TranscriptChunk", "TranscriptStop")
) and "supports_transcript_streaming" in {f.name for f in dataclasses.fields(AsrProgram)}
USAGE = "use tcp://HOST:PORT, e.g. tcp://0.0.0.0:10300 (Home Assistant's usual Wyoming port)"


@dataclass(frozen=True)
class WyomingSetup:
    """Where `serve --wyoming` listens, and what to call once it does (the bound addresses:
    with PORT 0, the port picked)."""

    host: str
    port: int
    on_ready: Callable[[list[tuple[str, int]]], None] | None = None


def wyoming_setup(
    uri: str, on_ready: Callable[[list[tuple[str, int]]], None] | None = None
) -> WyomingSetup:
    """`--wyoming tcp://HOST:PORT` read, or a UsageError saying the form."""
    try:
        parts = urlsplit(uri)
        port = parts.port
    except ValueError:
        raise UsageError(f"--wyoming {uri}: {USAGE}, PORT 0-65535") from None
    if (
        parts.scheme != "tcp"
        or not parts.hostname
        or port is None
        or parts.path not in ("", "/")
        or parts.query
        or parts.fragment
        or parts.username is not None
    ):
        raise UsageError(f"--wyoming {uri}: {USAGE}")
    return WyomingSetup(parts.hostname, port, on_ready)


class WyomingInputError(Exception):
    """What a client sent cannot be served: one error event, then that connection ends."""

    def __init__(self, code: str, text: str, kind: str) -> None:
        super().__init__(text)
        self.code = code  # the error event's machine-readable code
        self.text = text
        self.kind = kind  # metrics label (streamasr_dropped_connections)


class _Stop(Exception):
    """The server ends this connection (shutdown, a limit, a slow client, the engine)."""

    def __init__(self, code: str, text: str, kind: str, flush: bool) -> None:
        super().__init__(text)
        self.code = code
        self.text = text
        self.kind = kind
        self.flush = flush  # end the open utterance and send its transcript first


class _Gone(Exception):
    """The client went away."""


async def read_event(reader: asyncio.StreamReader, max_bytes: int) -> Event | None:
    """One event, or None where the client closed between events.

    `reader`'s limit caps the header line; `max_bytes` caps its data and its payload."""
    try:
        line = await reader.readuntil(b"\n")
    except asyncio.IncompleteReadError as exc:
        if exc.partial.strip():
            raise _Gone() from None  # ended inside a header
        return None
    except asyncio.LimitOverrunError:
        raise WyomingInputError(
            "frame-too-big",
            f"event header line longer than {MAX_HEADER_BYTES} bytes; send one JSON object "
            "of at most that per line, with large data after it (data_length) and audio "
            "as its payload (payload_length)",
            "frame_too_big",
        ) from None
    header = _json_object(line, "event header line")
    kind = header.get("type")
    if not isinstance(kind, str) or not 0 < len(kind) <= 128:
        raise _invalid('event header: "type" must be a string of 1 to 128 characters')
    data = header.get("data")
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise _invalid('event header: "data" must be a JSON object')
    data_length = _length(header, "data_length", max_bytes)
    payload_length = _length(header, "payload_length", max_bytes)
    if data_length:
        data.update(_json_object(await reader.readexactly(data_length), "event data"))
    payload = await reader.readexactly(payload_length) if payload_length else None
    return Event(type=kind, data=data, payload=payload)


def _json_object(raw: bytes, what: str) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError
        raise _invalid(
            f"{what} is not valid UTF-8 JSON ({exc}); send each event as one JSON line, "
            'e.g. {"type": "describe"}'
        ) from None
    if not isinstance(value, dict):
        raise _invalid(f"{what} must be a JSON object")
    return value


def _length(header: dict[str, Any], key: str, max_bytes: int) -> int:
    value = header.get(key)
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _invalid(f"event header: {key} must be a whole number of bytes, 0 or more")
    if value > max_bytes:
        raise WyomingInputError(
            "frame-too-big",
            f"event header: {key} {value} is over this server's limit of {max_bytes} bytes "
            "(serve --max-frame-bytes); send audio in smaller chunks",
            "frame_too_big",
        )
    return value


def _invalid(text: str) -> WyomingInputError:
    return WyomingInputError("invalid-event", text, "invalid_input")


def _unexpected(text: str) -> WyomingInputError:
    return WyomingInputError("unexpected-event", text, "unexpected_message")


@dataclass(frozen=True)
class AudioFormat:
    """An audio stream's format, as its `audio-start` gives it."""

    rate: int
    width: int
    channels: int

    @classmethod
    def of(cls, event: Event) -> AudioFormat:
        data = event.data
        return cls(
            _whole(data, event.type, "rate", MIN_RATE_HZ, MAX_RATE_HZ),
            _whole(data, event.type, "width", 1, 4),
            _whole(data, event.type, "channels", 1, MAX_CHANNELS),
        )

    def decode(self, payload: bytes) -> np.ndarray:
        """Interleaved PCM as mono float32 (channels averaged, as `streamasr file` does;
        16-bit through the WebSocket protocol's own decoder)."""
        frame = self.width * self.channels
        if len(payload) % frame:
            raise WyomingInputError(
                "bad-audio",
                f"audio-chunk of {len(payload)} bytes is not a whole number of {frame}-byte "
                f"sample frames (width {self.width}, {self.channels} channel(s))",
                "invalid_input",
            )
        if self.width == 2:
            return protocol.decode_frame(payload, SessionConfig(self.rate, "s16le", self.channels))
        raw = np.frombuffer(payload, np.uint8)
        if self.width == 1:
            audio = (raw.astype(np.float32) - 128.0) / 128.0
        elif self.width == 3:
            bytes3 = raw.reshape(-1, 3).astype(np.int32)
            ints = bytes3[:, 0] | (bytes3[:, 1] << 8) | (bytes3[:, 2] << 16)
            ints = np.where(ints >= 1 << 23, ints - (1 << 24), ints)
            audio = ints.astype(np.float32) / float(1 << 23)
        else:
            audio = (np.frombuffer(payload, "<i4").astype(np.float64) / 2.0**31).astype(
                np.float32
            )
        if self.channels > 1:
            audio = audio.reshape(-1, self.channels).mean(axis=1, dtype=np.float32)
        return np.ascontiguousarray(audio, np.float32)


def _whole(data: dict[str, Any], event: str, key: str, low: int, high: int) -> int:
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise _invalid(f"{event}: {key} must be a whole number from {low} to {high}")
    return value


class ChunkStream:
    """Partials' new text as the append-only text of `transcript-chunk` events.

    Per segment, the text sent so far: a partial (or the final) that extends it sends what
    it adds; one that revises it sends nothing until a later one extends it again (a chunk
    cannot be taken back; the `transcript` event carries the result). A segment after text
    begins with a space, as the finals are joined."""

    def __init__(self) -> None:
        self._segment: int | None = None
        self._sent = ""
        self._before = False  # text was sent in an earlier segment

    def text(self, segment: int, text: str) -> str:
        if segment != self._segment:
            self._before = self._before or bool(self._sent)
            self._segment, self._sent = segment, ""
        if len(text) <= len(self._sent) or not text.startswith(self._sent):
            return ""
        new = text[len(self._sent) :]
        if not self._sent and self._before:
            new = " " + new
        self._sent = text
        return new


def frame(event: Event) -> bytes:
    """One event as written on the wire (by wyoming's own writer)."""
    buffer = io.BytesIO()
    write_event(event, buffer)
    return buffer.getvalue()


def languages(server: StreamServer) -> list[str]:
    """The model's languages: what it declares, else its released entry's, else a
    two-letter language at the end of its name (tiny-en: en)."""
    info = server.recognizer.info
    language = info.language
    if not language:
        entry = find(info.model_name)
        language = entry.language if entry is not None else ""
    if not language:
        tail = info.model_name.rsplit("-", 1)[-1]
        language = tail if len(tail) == 2 and tail.isalpha() and tail.islower() else ""
    return [part for part in language.split("+") if part]


def info_event(server: StreamServer) -> Event:
    """`info`: one speech-to-text program, this server, with its one model."""
    name = server.recognizer.info.model_name
    entry = find(name)
    model = AsrModel(
        name=name, attribution=Attribution(name="streamasr", url=entry.url if entry else ""),
        installed=True,
        description=server.recognizer.description, version=None,
        languages=languages(server),
    )  # fmt: skip
    fields: dict[str, Any] = {}
    if STREAMING:
        fields["supports_transcript_streaming"] = True
    program = AsrProgram(
        name=PROGRAM, attribution=Attribution(name="streamasr", url=""), installed=True,
        description="streamasr: streaming speech transcription", version=__version__,
        models=[model], **fields,
    )  # fmt: skip
    return Info(asr=[program]).event()


class WyomingConnection:
    """One Wyoming client: describe, transcribe, audio streams; until it closes."""

    def __init__(
        self, listener: WyomingListener, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        self.listener = listener
        self.server = listener.server
        self.limits = listener.server.limits
        self.reader = reader
        self.writer = writer
        self.peer = writer.get_extra_info("peername")
        self.started = time.monotonic()
        self.stop_requested: _Stop | None = None
        self._stopped = asyncio.Event()
        self.utterance: Utterance | None = None
        self.audio: AudioFormat | None = None
        self._finals: list[str] = []
        self._chunks = ChunkStream()

    def request_stop(self, stop: _Stop) -> None:
        """End the connection (from elsewhere on the loop: a stop, a slow client)."""
        if self.stop_requested is None:
            self.stop_requested = stop
            self._stopped.set()

    # -- writing ----------------------------------------------------------------------------

    def _write(self, *events: Event) -> None:
        if self.writer.is_closing():
            return
        self.writer.write(b"".join(frame(event) for event in events))
        if self.writer.transport.get_write_buffer_size() > MAX_UNSENT_BYTES:
            self.request_stop(
                _Stop(
                    "slow-client",
                    f"client too slow: {MAX_UNSENT_BYTES} bytes of events not read; read "
                    "events as they come",
                    "slow_client",
                    flush=False,
                )
            )

    async def _drain(self) -> None:
        try:
            await asyncio.wait_for(self.writer.drain(), FLUSH_TIMEOUT_S)
        except (ConnectionError, asyncio.TimeoutError):
            raise _Gone() from None

    def _deliver(self, items: list[Delivered]) -> None:
        """The scheduler's events for the open utterance: finals kept for the transcript,
        partials' new text streamed as transcript chunks."""
        chunks: list[Event] = []
        for item in items:
            if isinstance(item, StreamSummary):
                continue
            if isinstance(item, Final) and item.text:
                self._finals.append(item.text)
            if STREAMING and isinstance(item, (Partial, Final)):
                text = self._chunks.text(item.segment, item.text)
                if text:
                    chunks.append(wyoming_asr.TranscriptChunk(text=text).event())
        if chunks:
            self._write(*chunks)

    def _fail(self, reason: str) -> None:
        self.request_stop(_Stop("engine-error", reason, "engine_error", flush=False))

    # -- serving ----------------------------------------------------------------------------

    async def run(self) -> None:
        try:
            await self._serve()
        except WyomingInputError as exc:
            self.server.metrics.dropped.labels(exc.kind).inc()
            log.info("wyoming: closing %s: %s", self.peer, exc.text)
            await self._close_with_error(exc.code, exc.text)
        except _Stop as stop:
            await self._stop(stop)
        except (_Gone, ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            if self.utterance is not None:
                self.server.scheduler.discard(self.utterance)
                self.utterance = None
            self.writer.close()
            with contextlib.suppress(Exception):
                await self.writer.wait_closed()

    async def _serve(self) -> None:
        first = True
        while True:
            if self.listener.stopping and self.utterance is None:
                return  # drained
            timeout = self.limits.handshake_timeout_s if first else self.limits.idle_timeout_s
            event = await self._read(timeout)
            if event is None:
                return
            first = False
            await self._handle(event)

    async def _handle(self, event: Event) -> None:
        kind = event.type
        if Describe.is_type(kind):
            self._write(info_event(self.server))
        elif Ping.is_type(kind):
            text = event.data.get("text")
            self._write(Pong(text=text if isinstance(text, str) else None).event())
        elif kind == "select-program":  # wyoming 1.8 and later
            name = event.data.get("name")
            if name != PROGRAM:
                raise WyomingInputError(
                    "unknown-program",
                    f"select-program: no program {repr(name)[:80]} here; this server has "
                    f"{PROGRAM!r}",
                    "invalid_input",
                )
        elif wyoming_asr.Transcribe.is_type(kind):
            if self.utterance is not None:
                raise _unexpected("transcribe while audio streams; send audio-stop first")
            self._transcribe(event)
        elif AudioStart.is_type(kind):
            await self._audio_start(event)
        elif AudioChunk.is_type(kind):
            await self._audio_chunk(event)
        elif AudioStop.is_type(kind):
            if self.utterance is None:
                raise _unexpected("audio-stop without audio-start; send audio-start first")
            await self._finish()
        else:  # the protocol asks servers to drop what they do not know
            log.debug("wyoming: %s sent %r; dropped", self.peer, kind)
        await self._drain()

    def _transcribe(self, event: Event) -> None:
        """`transcribe`: its `name` must be this server's model (or program), if given;
        its `language` is the model's, whatever it says."""
        name = event.data.get("name")
        model = self.server.recognizer.info.model_name
        if name is not None and name not in (model, PROGRAM):
            shown = repr(name)[:80]
            raise WyomingInputError(
                "unknown-model",
                f"transcribe: no model {shown} here; this server has {model!r} (or leave "
                "name out)",
                "invalid_input",
            )

    async def _audio_start(self, event: Event) -> None:
        if self.utterance is not None:
            raise _unexpected("audio-start while audio streams; send audio-stop first")
        audio = AudioFormat.of(event)
        if self.listener.stopping:
            raise _Stop("shutting-down", "server shutting down; try again later", "shutdown",
                        flush=False)  # fmt: skip
        config = SessionConfig(sample_rate=audio.rate, source="wyoming")
        self._finals = []
        self._chunks = ChunkStream()
        try:
            self.utterance = await self.server.scheduler.open(config, self._deliver, self._fail)
        except InputError as exc:
            raise WyomingInputError("bad-audio", f"audio-start: {exc}", "invalid_input") from None
        self.audio = audio
        if STREAMING:
            self._write(wyoming_asr.TranscriptStart().event())

    async def _audio_chunk(self, event: Event) -> None:
        utterance, audio = self.utterance, self.audio
        if utterance is None or audio is None:
            raise _unexpected(
                "audio-chunk before audio-start; send audio-start (rate, width, channels) "
                "first, then the chunks, then audio-stop"
            )
        if AudioFormat.of(event) != audio:
            raise _invalid(
                f"audio-chunk format differs from audio-start's ({audio.rate} Hz, width "
                f"{audio.width}, {audio.channels} channel(s)); send every chunk in that format"
            )
        samples = audio.decode(event.payload or b"")
        self.server.scheduler.add_audio(utterance, samples)
        if utterance.queued_s > self.limits.max_queued_audio_s:
            # back-pressure: stop reading (the client's sends block) until decoded
            await self._until(utterance.drained.wait())

    async def _finish(self) -> None:
        """audio-stop: the rest decoded, then the transcript (and the stream's stop)."""
        utterance = self.utterance
        if utterance is None:
            return
        await self._until(self.server.scheduler.end(utterance))
        self._send_transcript()

    def _send_transcript(self) -> None:
        self.utterance = self.audio = None
        events = [wyoming_asr.Transcript(text=" ".join(self._finals)).event()]
        if STREAMING:
            events.append(wyoming_asr.TranscriptStop().event())
        self._write(*events)

    async def _until(self, awaitable: Awaitable[Any]) -> None:
        """Await `awaitable`, unless a stop is requested first (then raise it). A future
        (an utterance's end) is not cancelled then: the stop's flush awaits it again."""
        task = asyncio.ensure_future(awaitable)
        stop = asyncio.ensure_future(self._stopped.wait())
        try:
            await asyncio.wait({task, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
        if not task.done():
            if task is not awaitable:
                task.cancel()
            if self.stop_requested is not None:
                raise self.stop_requested
        task.result()

    async def _read(self, timeout_s: float) -> Event | None:
        """The next event (None: the client closed); a stop or a time limit raises _Stop."""
        session_left = self.limits.max_session_s - (time.monotonic() - self.started)
        wait_s = max(0.0, min(timeout_s, session_left))
        read = asyncio.ensure_future(read_event(self.reader, self.limits.max_frame_bytes))
        stop = asyncio.ensure_future(self._stopped.wait())
        try:
            done, _ = await asyncio.wait(
                {read, stop}, timeout=wait_s, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            stop.cancel()
        if read in done:
            return read.result()
        read.cancel()  # the connection ends: what it had half read does not matter
        read.add_done_callback(lambda task: task.cancelled() or task.exception())
        if self.stop_requested is not None:
            raise self.stop_requested
        if session_left <= timeout_s:
            raise _Stop(
                "session-limit",
                f"connection reached --max-session-s {self.limits.max_session_s:g} s",
                "session_limit", flush=True,
            )  # fmt: skip
        raise _Stop("idle", f"idle: no event for {timeout_s:g} s (--idle-timeout-s)", "idle",
                    flush=True)  # fmt: skip

    async def _stop(self, stop: _Stop) -> None:
        """End the connection: the open utterance finished and its transcript sent first
        where the stop says so; then an error event saying why, unless the server's stop
        is what ended it and its transcript went out."""
        if stop.kind != "shutdown":
            self.server.metrics.dropped.labels(stop.kind).inc()
        log.info("wyoming: closing %s: %s", self.peer, stop.text)
        utterance = self.utterance
        if stop.flush and utterance is not None:
            try:
                await asyncio.wait_for(
                    asyncio.shield(self.server.scheduler.end(utterance)), FLUSH_TIMEOUT_S
                )
            except asyncio.TimeoutError:
                pass
            else:
                self._send_transcript()
                if stop.kind == "shutdown":  # drained: the transcript is the last word
                    with contextlib.suppress(_Gone):
                        await self._drain()
                    return
        await self._close_with_error(stop.code, stop.text)

    async def _close_with_error(self, code: str, text: str) -> None:
        """One error event, then the end of the connection (what the client still sends is
        read and dropped for a moment, so that the close does not reset the error away)."""
        self._write(Error(text=text, code=code).event())
        try:
            await self._drain()
            if self.writer.can_write_eof():
                self.writer.write_eof()
            await asyncio.wait_for(_discard_input(self.reader), LINGER_S)
        except (_Gone, ConnectionError, asyncio.TimeoutError, OSError):
            pass


class WyomingListener:
    """The Wyoming TCP listener of one server: its connections, its stop."""

    def __init__(self, server: StreamServer) -> None:
        self.server = server
        self.connections: set[WyomingConnection] = set()
        self.stopping = False
        self._tcp: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._force: asyncio.TimerHandle | None = None
        self._closed: asyncio.Future[None] | None = None

    @property
    def addresses(self) -> list[tuple[str, int]]:
        """(host, port) of each bound socket (the port picked where PORT was 0)."""
        if self._tcp is None:
            return []
        return [sock.getsockname()[:2] for sock in self._tcp.sockets]

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            await self._connection(reader, writer)
        except Exception:  # a bug here must not end the listener
            log.exception("wyoming: connection failed")
            writer.close()
        finally:
            if task is not None:
                self._tasks.discard(task)

    async def _connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        server = self.server
        if self.stopping or server.stopping:
            server.metrics.refused.labels("shutting_down").inc()
            await _refuse(reader, writer, "shutting-down", "server shutting down; try again later")
            return
        if not server.slots.take():
            server.metrics.refused.labels("capacity").inc()
            await _refuse(
                reader, writer, "capacity",
                f"server at capacity ({server.limits.max_connections} connections, "
                "--max-connections); try again later",
            )  # fmt: skip
            return
        connection = WyomingConnection(self, reader, writer)
        self.connections.add(connection)
        server.metrics.connections.inc()
        server.metrics.active_sessions.inc()
        try:
            await connection.run()
        finally:
            self.connections.discard(connection)
            server.metrics.active_sessions.dec()
            server.slots.give_back()

    def stop(self) -> None:
        """The server stops: no new connections; one without an open utterance ends now,
        one with an utterance once its transcript is sent, or when the server's grace
        period (--grace-s) ends: then its input is ended and its transcript sent."""
        if self.stopping:
            return
        self.stopping = True
        if self._tcp is not None:
            self._tcp.close()
        for connection in list(self.connections):
            if connection.utterance is None:
                connection.request_stop(
                    _Stop("shutting-down", "server shutting down", "shutdown", flush=True)
                )
        self._force = asyncio.get_running_loop().call_later(self.server.limits.grace_s,
                                                            self._end_all)  # fmt: skip

    def _end_all(self) -> None:
        for connection in list(self.connections):
            connection.request_stop(
                _Stop("shutting-down", "server shutting down", "shutdown", flush=True)
            )

    async def close(self) -> None:
        """Stop (if not yet) and return once every connection has ended."""
        self.stop()
        if self._tasks:
            limit = self.server.limits.grace_s + FLUSH_TIMEOUT_S + LINGER_S + 5.0
            _, pending = await asyncio.wait(set(self._tasks), timeout=limit)
            for task in pending:
                task.cancel()
        if self._force is not None:
            self._force.cancel()


async def _refuse(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, code: str, text: str
) -> None:
    """An error event on a connection not taken, then its end (lingering, as
    WyomingConnection._close_with_error does: the client may have sent its first events)."""
    with contextlib.suppress(ConnectionError, OSError, asyncio.TimeoutError):
        writer.write(frame(Error(text=text, code=code).event()))
        await asyncio.wait_for(writer.drain(), LINGER_S)
        if writer.can_write_eof():
            writer.write_eof()
        await asyncio.wait_for(_discard_input(reader), LINGER_S)
    writer.close()


async def _discard_input(reader: asyncio.StreamReader) -> None:
    """Read and drop what a client still sends, up to LINGER_BYTES or its end."""
    dropped = 0
    while dropped < LINGER_BYTES:
        data = await reader.read(64 << 10)
        if not data:
            return
        dropped += len(data)


async def start_wyoming(server: StreamServer, setup: WyomingSetup) -> WyomingListener:
    """Listen for Wyoming clients beside the WebSocket ones, over the server's scheduler;
    `setup.on_ready` hears the bound addresses. StreamAsrError where the address cannot be
    had."""
    listener = WyomingListener(server)
    try:
        listener._tcp = await asyncio.start_server(
            listener._accept, setup.host, setup.port, limit=MAX_HEADER_BYTES
        )
    except OSError as exc:
        raise StreamAsrError(
            f"--wyoming: cannot listen on tcp://{bracketed(setup.host)}:{setup.port}: "
            f"{exc.strerror or exc}; pick another port (0: any free one) or stop what holds it"
        ) from None
    log.info("wyoming: listening on %s", listener.addresses)
    if setup.on_ready is not None:
        setup.on_ready(listener.addresses)
    return listener

