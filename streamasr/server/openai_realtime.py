"""OpenAI's Realtime transcription API on `/v1/realtime?intent=transcription`.

So that the clients people already have (the `openai` SDK's realtime connection, apps and
voice-agent frameworks built on it) can use the server: this adapter maps OpenAI's client
events to a `ClientSession` (server/client_session.py) and the session's events to
OpenAI's server events (server/realtime_events.py: the messages). What maps to what:

- `session.update` (or the beta `transcription_session.update`) -> `Settings`: PCM16 at
  24 kHz (OpenAI's rate, the default) or 16 kHz, resampled by the session; `turn_detection`
  `server_vad` -> the endpoint rules (`silence_duration_ms` is rule2, the trailing silence
  after speech; without it the server's rules), `null` -> no endpointing, the client
  commits; `room`, `punctuate`, `sentence_case`: the project's own session settings.
- one utterance on the scheduler holds the audio from the first append to a commit (or a
  `session.update`, a clear, the end); within it each `final` is one conversation item:
  `first_token` -> `input_audio_buffer.speech_started`, `endpoint` -> `speech_stopped` and
  `committed`, each partial's new text -> `...input_audio_transcription.delta`, the
  `final` (finished as the session asked) -> `...completed`.
- what cannot be served is one `error` event in OpenAI's shape and the connection goes on,
  as OpenAI's does; only a refused room or finishing setting, an engine failure, a slow
  reader and the server's limits end it (with a close code).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs

import numpy as np
from fastapi import APIRouter, WebSocket
from fastapi.responses import PlainTextResponse

from streamasr.server import protocol
from streamasr.server.client_session import ClientSession, EngineFailed, Refused
from streamasr.server.connection import SocketClosed, Stop
from streamasr.server.openai_gate import presented_key
from streamasr.server.protocol import ProtocolError
from streamasr.server.realtime_events import (
    RealtimeError,
    Settings,
    Turns,
    append_audio,
    parse_event,
    updated_settings,
)
from streamasr.server.rooms import presented_token
from streamasr.server.utterance import Delivered
from streamasr.server.ws_adapter import WebSocketStream, admit

if TYPE_CHECKING:
    from streamasr.server.app import StreamServer

log = logging.getLogger("streamasr")

REALTIME_PATH = "/v1/realtime"
#: How long the last transcripts may take to reach a client before the close.
FLUSH_TIMEOUT_S = 10.0

router = APIRouter()


def realtime_token(websocket: WebSocket) -> str | None:
    """What a realtime client presents: `Authorization: Bearer` (the SDK's), `X-API-Key`,
    or `?token=` / `?api_key=` (browsers cannot set headers on a WebSocket)."""
    token = presented_token(websocket.headers, websocket.url.query)
    if token is None:
        token = presented_key(websocket)  # the Bearer is not there: X-API-Key
    if token is not None:
        return token
    values = parse_qs(websocket.url.query).get("api_key")
    return values[0] if values else None


class RealtimeConnection:
    """One Realtime client: its events in, the session's events out, until either ends."""

    def __init__(self, server: StreamServer, stream: WebSocketStream) -> None:
        self.server = server
        self.stream = stream
        self.limits = server.limits
        self.started = time.monotonic()
        self.session_id = "sess_" + uuid.uuid4().hex[:24]
        self._ids = itertools.count(1)
        self._prefix = uuid.uuid4().hex[:12]
        self.settings = Settings()
        self.turns = Turns(self.new_id)
        self.appended_s = 0.0  # the session's audio so far
        self.outbox: asyncio.Queue[str] = asyncio.Queue(self.limits.send_queue_events)
        self.session: ClientSession | None = None
        self._handlers: dict[str, Callable[[dict[str, Any]], Awaitable[None]]] = {
            "session.update": self._update,
            "transcription_session.update": self._update,
            "input_audio_buffer.append": self._append,
            "input_audio_buffer.commit": self._commit,
            "input_audio_buffer.clear": self._clear,
        }

    def new_id(self, kind: str) -> str:
        return f"{kind}_{self._prefix}{next(self._ids):06d}"

    # -- out --------------------------------------------------------------------------------

    def send(self, event: dict[str, Any]) -> None:
        """Queue one server event; a client whose queue is full is closed (slow reader)."""
        line = json.dumps({"event_id": self.new_id("event"), **event})
        try:
            self.outbox.put_nowait(line)
        except asyncio.QueueFull:
            if self.session is not None:
                self.session.request_stop(Stop(
                    protocol.CLOSE_POLICY,
                    f"client too slow: {self.limits.send_queue_events} events not read",
                    "slow_client", flush=False,
                ))  # fmt: skip

    def send_error(self, error: RealtimeError, event_id: str | None = None) -> None:
        self.send({"type": "error", "error": {
            "type": error.kind, "code": error.code, "message": error.message,
            "param": error.param, "event_id": event_id,
        }})  # fmt: skip

    def on_events(self, items: list[Delivered]) -> None:
        for event in self.turns.translate(items):
            self.send(event)

    async def _send_loop(self) -> None:
        while True:
            line = await self.outbox.get()
            try:
                await self.stream.send(line)
            except SocketClosed:
                pass
            finally:
                self.outbox.task_done()

    # -- in ---------------------------------------------------------------------------------

    async def run(self, token: str | None) -> None:
        """Admit the session (Refused: one error event, then the close), then serve it."""
        sender = asyncio.create_task(self._send_loop())
        try:
            async with ClientSession.admitted(self.server, self.on_events, token) as session:
                self.session = session
                await self._serve(session)
        except Refused as refused:
            self.send_error(RealtimeError(refused.reason, refused.kind, kind="server_error"))
            await self._close(refused_code(refused.kind), refused.reason, flush=True)
        finally:
            sender.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sender

    async def _serve(self, session: ClientSession) -> None:
        self.send({"type": "session.created", "session": self.settings.describe(self.session_id)})
        try:
            while True:
                await self._handle(await self._receive(session))
        except SocketClosed:
            return  # the client went away
        except Stop as stop:
            if stop.flush:
                with contextlib.suppress(asyncio.TimeoutError, EngineFailed):
                    await asyncio.wait_for(session.finish(), FLUSH_TIMEOUT_S)
            log.info("closing realtime %s: %s", self.stream.remote_address, stop.reason)
            await self._close(stop.code, stop.reason, stop.flush)
        except ProtocolError as exc:  # a room or finishing the server refuses
            self.send_error(RealtimeError(exc.reason, "session_refused"))
            await self._close(exc.code, exc.reason, flush=True)
        except EngineFailed as exc:
            self.send_error(RealtimeError(str(exc), "engine_error", kind="server_error"))
            await self._close(protocol.CLOSE_INTERNAL, str(exc), flush=True)

    async def _close(self, code: int, reason: str, flush: bool) -> None:
        if flush:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.outbox.join(), FLUSH_TIMEOUT_S)
        await self.stream.close(code, protocol.close_reason(reason))

    async def _receive(self, session: ClientSession) -> str | bytes:
        """The next message; Stop when the server stops the session or a limit is reached."""
        if session.stop is not None:
            raise session.stop
        session_left = self.limits.max_session_s - (time.monotonic() - self.started)
        wait_s = max(0.0, min(self.limits.idle_timeout_s, session_left))
        try:
            return await session.unless_stopped(self.stream.recv(), wait_s)
        except asyncio.TimeoutError:
            pass
        if session_left <= self.limits.idle_timeout_s:
            raise Stop(protocol.CLOSE_POLICY,
                       f"session reached --max-session-s {self.limits.max_session_s:g} s",
                       "session_limit", flush=True)  # fmt: skip
        raise Stop(protocol.CLOSE_GOING_AWAY,
                   f"idle: no message for {self.limits.idle_timeout_s:g} s (--idle-timeout-s)",
                   "idle", flush=True)  # fmt: skip

    async def _handle(self, message: str | bytes) -> None:
        """One client event; what cannot be served is one error event, and the session
        goes on."""
        event_id = None
        try:
            event = parse_event(message)
            event_id = event.get("event_id") if isinstance(event.get("event_id"), str) else None
            await self._handlers[event["type"]](event)
        except RealtimeError as error:
            self.send_error(error, event_id)

    async def _update(self, event: dict[str, Any]) -> None:
        """New settings apply from the next audio: an open utterance is finished first
        (its last transcript comes out, as a commit's would)."""
        beta = event["type"] == "transcription_session.update"
        settings = updated_settings(self.settings, event.get("session"), beta)
        await self._finish()
        self.settings = settings
        kind = "transcription_session.updated" if beta else "session.updated"
        describe = settings.describe_beta if beta else settings.describe
        self.send({"type": kind, "session": describe(self.session_id)})

    async def _append(self, event: dict[str, Any]) -> None:
        samples = self._audio(event.get("audio"))
        session = self._session()
        if len(samples) == 0:
            return
        if not session.is_open:
            config = self.settings.session_config(self.server.options.endpoint)
            self.turns.begin(self.appended_s, self.settings.vad)
            await session.open(config)
        self.appended_s += len(samples) / self.settings.rate_hz
        await session.feed(samples)

    def _audio(self, value: Any) -> np.ndarray:
        return append_audio(value, self.settings.rate_hz, self.limits.max_queued_audio_s)

    async def _commit(self, event: dict[str, Any]) -> None:
        session = self._session()
        if not session.is_open:
            raise RealtimeError("the input audio buffer is empty: append audio first",
                                "input_audio_buffer_commit_empty")  # fmt: skip
        for committed in self.turns.commit():
            self.send(committed)
        await self._finish()

    async def _clear(self, event: dict[str, Any]) -> None:
        """The audio not yet transcribed as a final is dropped with its utterance."""
        self._session().discard()
        self.turns.drop()
        self.send({"type": "input_audio_buffer.cleared"})

    async def _finish(self) -> None:
        session = self._session()
        if session.is_open:
            await session.finish()

    def _session(self) -> ClientSession:
        if self.session is None:
            raise RuntimeError("the session is not admitted yet")
        return self.session


def refused_code(kind: str) -> int:
    return protocol.CLOSE_GOING_AWAY if kind == "shutting_down" else protocol.CLOSE_TRY_LATER


@router.websocket(REALTIME_PATH)
async def realtime(websocket: WebSocket, intent: str = "transcription") -> None:
    """One Realtime transcription client, from handshake to close."""
    server: StreamServer = websocket.app.state.server
    if intent != "transcription":
        await websocket.send_denial_response(PlainTextResponse(
            "this server only transcribes: connect with ?intent=transcription\n", 400))  # fmt: skip
        return
    token = realtime_token(websocket)
    if await admit(websocket, server, token):
        await RealtimeConnection(server, WebSocketStream(websocket)).run(token)


@router.get(REALTIME_PATH, include_in_schema=False)
def needs_upgrade() -> PlainTextResponse:
    return PlainTextResponse(f"{REALTIME_PATH} takes WebSocket connections\n", 426)
