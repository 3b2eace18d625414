"""Wyoming, Home Assistant's voice protocol, on a second TCP port of `streamasr serve`.

Why: Home Assistant's Assist reaches speech-to-text services through Wyoming (its "Wyoming
Protocol" integration), so a server that speaks it is a speech-to-text choice there with no
glue. Each connection is a `ClientSession` (server/client_session.py), as a WebSocket one
is: admission, the server's stop (the drain, a second signal) and engine failures are the
server's. What is Wyoming's own is here: `describe`/`info`, `transcribe`, and each
`audio-start` ... `audio-stop` as one utterance of the same engine, batched with the other
sessions and finished (punctuation, casing) as the server's defaults say; its finals joined
are the `transcript`, its partials' new text the streaming `transcript-chunk`s. Frames are
read with caps by server/wyoming_frames.py: bad input gets one `error` event and ends only
its connection. Event types this server does not know are dropped, as the protocol asks of
servers (a newer client may send more).

Wyoming has no authentication: the listener is for a trusted LAN, and is off unless
`serve --wyoming tcp://HOST:PORT` is given.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from typing import TYPE_CHECKING, Any

import wyoming.asr as wyoming_asr
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.event import Event
from wyoming.info import AsrModel, AsrProgram, Attribution, Describe, Info
from wyoming.ping import Ping, Pong

from streamasr.distribution.catalog import find
from streamasr.errors import InputError
from streamasr.server import protocol
from streamasr.server.client_session import ClientSession, Refused, Stop
from streamasr.server.connection import FLUSH_TIMEOUT_S
from streamasr.server.protocol import SessionConfig
from streamasr.server.utterance import Delivered
from streamasr.server.wyoming_frames import (
    AudioFormat,
    Gone,
    WyomingInputError,
    frame,
    invalid,
    read_event,
    send_error,
    unexpected,
)
from streamasr.session.events import Final, Partial, StreamSummary
from streamasr.version import __version__

if TYPE_CHECKING:
    from streamasr.server.app import StreamServer

log = logging.getLogger("streamasr")

#: Events written but not yet taken by a client before it is dropped as too slow.
MAX_UNSENT_BYTES = 1 << 20
PROGRAM = "streamasr"
#: The streaming transcript events, where the installed wyoming has them (1.7 and later).
STREAMING = all(
    hasattr(wyoming_asr, name) for name in ("TranscriptStart", "TranscriptChunk", "TranscriptStop")
) and "supports_transcript_streaming" in {f.name for f in dataclasses.fields(AsrProgram)}


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


def _ending(kind: str, text: str, flush: bool) -> Stop:
    """A Stop this adapter raises (the WebSocket close code is unused here)."""
    return Stop(protocol.CLOSE_POLICY, text, kind, flush)


def _code(kind: str) -> str:
    """The error event's code for a stop's or a refusal's kind."""
    return "shutting-down" if kind in ("shutdown", "shutting_down") else kind.replace("_", "-")


class WyomingConnection:
    """One Wyoming client: describe, transcribe, audio streams; until it closes."""

    def __init__(
        self, server: StreamServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        self.server = server
        self.limits = server.limits
        self.reader = reader
        self.writer = writer
        self.peer = writer.get_extra_info("peername")
        self.started = time.monotonic()
        self.session: ClientSession  # admitted in run()
        self.audio: AudioFormat | None = None
        self._finals: list[str] = []
        self._chunks = ChunkStream()

    async def run(self) -> None:
        """Admit the client (a refusal is one error event), serve it, close."""
        try:
            async with ClientSession.admitted(self.server, on_events=self._deliver) as session:
                self.session = session
                await self._run()
        except Refused as refused:
            await self._close_with_error(_code(refused.kind), refused.reason)
        finally:
            self.writer.close()
            with contextlib.suppress(Exception):
                await self.writer.wait_closed()

    async def _run(self) -> None:
        try:
            await self._serve()
        except WyomingInputError as exc:
            self.server.metrics.dropped.labels(exc.kind).inc()
            log.info("wyoming: closing %s: %s", self.peer, exc.text)
            await self._close_with_error(exc.code, exc.text)
        except Stop as stop:
            await self._stop(stop)
        except (Gone, ConnectionError, asyncio.IncompleteReadError):
            pass

    async def _serve(self) -> None:
        first = True
        # the server stops: a connection between utterances is done (drained)
        while not (self.server.stopping and not self.session.is_open):
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
            if self.session.is_open:
                raise unexpected("transcribe while audio streams; send audio-stop first")
            self._transcribe(event)
        elif AudioStart.is_type(kind):
            await self._audio_start(event)
        elif AudioChunk.is_type(kind):
            await self._audio_chunk(event)
        elif AudioStop.is_type(kind):
            if not self.session.is_open:
                raise unexpected("audio-stop without audio-start; send audio-start first")
            await self.session.unless_stopped(self.session.end_input())
            self._send_transcript()
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
        if self.session.is_open:
            raise unexpected("audio-start while audio streams; send audio-stop first")
        audio = AudioFormat.of(event)
        if self.server.stopping:  # draining: no new utterance
            raise _ending("shutdown", "server shutting down; try again later", flush=False)
        self._finals = []
        self._chunks = ChunkStream()
        try:
            await self.session.open(SessionConfig(sample_rate=audio.rate, source="wyoming"))
        except InputError as exc:
            raise WyomingInputError("bad-audio", f"audio-start: {exc}", "invalid_input") from None
        self.audio = audio
        if STREAMING:
            self._write(wyoming_asr.TranscriptStart().event())

    async def _audio_chunk(self, event: Event) -> None:
        audio = self.audio
        if not self.session.is_open or audio is None:
            raise unexpected(
                "audio-chunk before audio-start; send audio-start (rate, width, channels) "
                "first, then the chunks, then audio-stop"
            )
        if AudioFormat.of(event) != audio:
            raise invalid(
                f"audio-chunk format differs from audio-start's ({audio.rate} Hz, width "
                f"{audio.width}, {audio.channels} channel(s)); send every chunk in that format"
            )
        if self.session.add_audio(audio.decode(event.payload or b"")):
            # back-pressure: stop reading (the client's sends block) until decoded
            await self.session.unless_stopped(self.session.drained())

    def _deliver(self, items: list[Delivered]) -> None:
        """The open utterance's events: finals kept for the transcript, partials' new text
        streamed as transcript chunks."""
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

    def _send_transcript(self) -> None:
        self.session.utterance = self.audio = None
        events = [wyoming_asr.Transcript(text=" ".join(self._finals)).event()]
        if STREAMING:
            events.append(wyoming_asr.TranscriptStop().event())
        self._write(*events)

    def _write(self, *events: Event) -> None:
        if self.writer.is_closing():
            return
        self.writer.write(b"".join(frame(event) for event in events))
        if self.writer.transport.get_write_buffer_size() > MAX_UNSENT_BYTES:
            self.session.request_stop(_ending(
                "slow_client",
                f"client too slow: {MAX_UNSENT_BYTES} bytes of events not read; read events "
                "as they come",
                flush=False,
            ))  # fmt: skip

    async def _drain(self) -> None:
        try:
            await asyncio.wait_for(self.writer.drain(), FLUSH_TIMEOUT_S)
        except (ConnectionError, asyncio.TimeoutError):
            raise Gone() from None

    async def _read(self, timeout_s: float) -> Event | None:
        """The next event (None: the client closed); a stop or a time limit raises Stop."""
        session_left = self.limits.max_session_s - (time.monotonic() - self.started)
        wait_s = max(0.0, min(timeout_s, session_left))
        with contextlib.suppress(asyncio.TimeoutError):
            reading = read_event(self.reader, self.limits.max_frame_bytes)
            return await self.session.unless_stopped(reading, wait_s)
        if session_left <= timeout_s:
            raise _ending("session_limit", "connection reached --max-session-s "
                          f"{self.limits.max_session_s:g} s", flush=True)  # fmt: skip
        raise _ending("idle", f"idle: no event for {timeout_s:g} s (--idle-timeout-s)",
                      flush=True)  # fmt: skip

    async def _stop(self, stop: Stop) -> None:
        """End the connection: the open utterance finished and its transcript sent first
        where the stop says so; then an error event saying why, unless the server's stop
        is what ended it and its transcript went out."""
        if stop.kind != "shutdown":
            self.server.metrics.dropped.labels(stop.kind).inc()
        log.info("wyoming: closing %s: %s", self.peer, stop)
        if stop.flush and self.session.is_open:
            try:
                await asyncio.wait_for(asyncio.shield(self.session.end_input()), FLUSH_TIMEOUT_S)
            except asyncio.TimeoutError:
                pass
            else:
                self._send_transcript()
                if stop.kind == "shutdown":  # drained: the transcript is the last word
                    with contextlib.suppress(Gone):
                        await self._drain()
                    return
        await self._close_with_error(_code(stop.kind), str(stop))

    async def _close_with_error(self, code: str, text: str) -> None:
        await send_error(self.reader, self.writer, code, text, FLUSH_TIMEOUT_S)
