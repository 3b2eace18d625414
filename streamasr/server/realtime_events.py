"""OpenAI's Realtime transcription messages, without any networking.

What server/openai_realtime.py's connection reads and writes: a session update as the
session's `Settings` (and the session object `session.created`/`session.updated` describe),
client events checked (`parse_event`), the scheduler's events as OpenAI's server events
(`Turns`), and `RealtimeError`, one `error` event. The field names and shapes are those of
the official `openai` package's types (openai/types/realtime, openai/types/beta/realtime).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from streamasr.backends.base import EndpointOptions
from streamasr.server import protocol
from streamasr.server.protocol import ProtocolError, SessionConfig
from streamasr.server.utterance import Delivered
from streamasr.session.endpointing import RULE_S_RANGE
from streamasr.session.events import Endpoint, Final, FirstToken, Partial, StreamSummary
from streamasr.text.printable import shown

#: PCM16 rates a session may send: OpenAI's 24 kHz (the default) and the models' 16 kHz.
RATES = (24000, 16000)
#: The client events this server answers (OpenAI's conversation events are not served).
CLIENT_EVENTS = (
    "session.update", "transcription_session.update", "input_audio_buffer.append",
    "input_audio_buffer.commit", "input_audio_buffer.clear",
)  # fmt: skip


class RealtimeError(Exception):
    """One `error` event: OpenAI's error `type`, `code`, `message` and `param`."""

    def __init__(
        self,
        message: str,
        code: str = "invalid_value",
        param: str | None = None,
        kind: str = "invalid_request_error",
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.param = param
        self.kind = kind


@dataclass(frozen=True)
class Settings:
    """A realtime session's effective settings (what `session.updated` describes)."""

    rate_hz: int = RATES[0]
    vad: bool = True  # server_vad (the endpoint rules); False: the client commits
    silence_ms: int | None = None  # server_vad's silence_duration_ms; None: the server's rule2
    model: str | None = None  # transcription.model, language, prompt: echoed, not used
    language: str | None = None
    prompt: str | None = None
    room: str | None = None
    punctuate: bool | None = None  # None: the server's --punctuate
    sentence_case: bool | None = None  # None: the server's --sentence-case

    def session_config(self, server_endpoint: EndpointOptions) -> SessionConfig:
        """The utterance's config; the server's feed block and tail padding apply."""
        endpoint: EndpointOptions | None = None
        if not self.vad:
            endpoint = replace(server_endpoint, enabled=False)
        elif self.silence_ms is not None:
            endpoint = replace(server_endpoint, enabled=True, rule2_s=self.silence_ms / 1000)
        return SessionConfig(
            self.rate_hz, "s16le", 1, source="realtime", endpoint=endpoint,
            punctuate=self.punctuate, sentence_case=self.sentence_case, room=self.room,
        )  # fmt: skip

    def transcription(self) -> dict[str, Any]:
        values = {"model": self.model, "language": self.language, "prompt": self.prompt}
        return {key: value for key, value in values.items() if value is not None}

    def turn_detection(self) -> dict[str, Any] | None:
        if not self.vad:
            return None
        detection: dict[str, Any] = {"type": "server_vad"}
        if self.silence_ms is not None:
            detection["silence_duration_ms"] = self.silence_ms
        return detection

    def extensions(self) -> dict[str, Any]:
        values = {"room": self.room, "punctuate": self.punctuate,
                  "sentence_case": self.sentence_case}  # fmt: skip
        return {key: value for key, value in values.items() if value is not None}

    def describe(self, session_id: str) -> dict[str, Any]:
        """The GA session object (`session.created` / `session.updated`)."""
        return {
            "type": "transcription",
            "object": "realtime.transcription_session",
            "id": session_id,
            "audio": {
                "input": {
                    "format": {"type": "audio/pcm", "rate": self.rate_hz},
                    "transcription": self.transcription(),
                    "turn_detection": self.turn_detection(),
                    "noise_reduction": None,
                }
            },
            "include": [],
            **self.extensions(),
        }

    def describe_beta(self, session_id: str) -> dict[str, Any]:
        """The beta session object (`transcription_session.updated`)."""
        return {
            "object": "realtime.transcription_session",
            "id": session_id,
            "input_audio_format": "pcm16",
            "input_audio_transcription": self.transcription(),
            "turn_detection": self.turn_detection(),
            "input_audio_noise_reduction": None,
            "include": [],
            **self.extensions(),
        }


def updated_settings(current: Settings, session: Any, beta: bool) -> Settings:
    """`current` with what a session update sets (fields it leaves out stay as they are);
    RealtimeError naming the first field that cannot be served."""
    if not isinstance(session, dict):
        raise RealtimeError("'session' must be an object", param="session")
    if beta:
        audio_in = _beta_input(session)
    else:
        kind = session.get("type", "transcription")
        if kind != "transcription":
            raise RealtimeError(
                f"this server only transcribes: session.type must be 'transcription', not "
                f"{shown(kind)}", param="session.type",
            )  # fmt: skip
        audio = _object(session, "audio", "session")
        audio_in = _object(audio, "input", "session.audio")
    settings = current
    if "format" in audio_in:
        settings = replace(settings, rate_hz=_rate(audio_in["format"], beta))
    if "transcription" in audio_in:
        settings = _transcription(settings, audio_in["transcription"])
    if "turn_detection" in audio_in:
        settings = _turn_detection(settings, audio_in["turn_detection"])
    return _extensions(settings, session)


def _beta_input(session: dict[str, Any]) -> dict[str, Any]:
    """The beta session's fields under the GA names."""
    names = {"input_audio_format": "format", "input_audio_transcription": "transcription",
             "turn_detection": "turn_detection"}  # fmt: skip
    return {new: session[old] for old, new in names.items() if old in session}


def _object(data: dict[str, Any], key: str, where: str) -> dict[str, Any]:
    value = data.get(key, {})
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise RealtimeError(f"'{where}.{key}' must be an object", param=f"{where}.{key}")
    return value


def _rate(value: Any, beta: bool) -> int:
    """PCM16 at 24 kHz or 16 kHz; G.711 and other formats are not served."""
    param = "session.input_audio_format" if beta else "session.audio.input.format"
    if beta:
        if value != "pcm16":
            raise RealtimeError(f"input_audio_format {shown(value)} is not served; use 'pcm16'",
                                param=param)  # fmt: skip
        return RATES[0]
    if not isinstance(value, dict) or value.get("type", "audio/pcm") != "audio/pcm":
        kind = value.get("type") if isinstance(value, dict) else value
        raise RealtimeError(f"audio format {shown(kind)} is not served; use 'audio/pcm' (PCM16 "
                            "little-endian, mono)", param=param)  # fmt: skip
    rate = value.get("rate", RATES[0])
    if isinstance(rate, bool) or rate not in RATES:
        raise RealtimeError(
            f"audio/pcm rate {shown(rate)} is not served; use 24000 or 16000", param=param + ".rate"
        )
    return int(rate)


def _transcription(settings: Settings, value: Any) -> Settings:
    """model, language and prompt are taken and echoed; the server's model transcribes."""
    if value is None:
        return replace(settings, model=None, language=None, prompt=None)
    if not isinstance(value, dict):
        raise RealtimeError("'transcription' must be an object",
                            param="session.audio.input.transcription")  # fmt: skip
    for key in ("model", "language", "prompt"):
        if key in value and value[key] is not None and not isinstance(value[key], str):
            raise RealtimeError(f"transcription.{key} must be a string",
                                param=f"session.audio.input.transcription.{key}")  # fmt: skip
    return replace(settings, model=value.get("model", settings.model),
                   language=value.get("language", settings.language),
                   prompt=value.get("prompt", settings.prompt))  # fmt: skip


def _turn_detection(settings: Settings, value: Any) -> Settings:
    """server_vad (semantic_vad too: the model's own ends are the server's rules) or null."""
    param = "session.audio.input.turn_detection"
    if value is None:
        return replace(settings, vad=False, silence_ms=None)
    if not isinstance(value, dict) or value.get("type") not in ("server_vad", "semantic_vad"):
        raise RealtimeError("turn_detection must be null or of type 'server_vad'", param=param)
    silence = value.get("silence_duration_ms")
    low, high = (round(limit * 1000) for limit in RULE_S_RANGE)
    if silence is not None and (
        isinstance(silence, bool) or not isinstance(silence, int) or not low <= silence <= high
    ):
        raise RealtimeError(f"silence_duration_ms must be a whole number from {low} to {high}",
                            param=param + ".silence_duration_ms")  # fmt: skip
    if value["type"] == "semantic_vad":
        silence = None
    return replace(settings, vad=True, silence_ms=silence)


def _extensions(settings: Settings, session: dict[str, Any]) -> Settings:
    """The project's own settings: `room` (publish there), `punctuate`, `sentence_case`."""
    if "room" in session:
        try:
            settings = replace(settings, room=protocol.room_name(session["room"]))
        except ProtocolError as exc:
            raise RealtimeError(exc.reason, param="session.room") from None
    if "punctuate" in session:
        settings = replace(settings, punctuate=_choice(session, "punctuate"))
    if "sentence_case" in session:
        settings = replace(settings, sentence_case=_choice(session, "sentence_case"))
    return settings


def _choice(session: dict[str, Any], key: str) -> bool | None:
    value = session[key]
    if value is not None and not isinstance(value, bool):
        raise RealtimeError(f"{key} must be true, false or null", param=f"session.{key}")
    return value


class Turns:
    """The scheduler's events of one session as Realtime server events, one conversation
    item per final. Deltas only ever append: a partial that extends the text sent so far
    sends what it adds; one that revises sent text sends nothing until a later partial
    extends the sent text again (the `.completed` transcript is the item's text)."""

    def __init__(self, new_id: Callable[[str], str]) -> None:
        self.new_id = new_id
        self.vad = True
        self.offset_s = 0.0  # the session's audio before the open utterance
        self.item: str | None = None
        self.previous: str | None = None
        self.sent = ""  # the open item's text sent as deltas
        self.committed = False
        self.speaking = False  # speech_started was sent for the open item
        self.item_start_s = 0.0  # session audio where the open item began

    def begin(self, offset_s: float, vad: bool) -> None:
        """A new utterance starts after `offset_s` seconds of the session's audio."""
        self.offset_s = self.item_start_s = offset_s
        self.vad = vad

    def translate(self, items: list[Delivered]) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        for item in items:
            if isinstance(item, Partial):
                events += self._delta(item.text)
            elif isinstance(item, FirstToken):
                events += self._speech_started(item.onset_s)
            elif isinstance(item, Endpoint):
                events += self._speech_stopped(item.audio_s)
            elif isinstance(item, Final):
                events += self._completed(item.text, item.audio_s)
            elif isinstance(item, StreamSummary) and self.item is not None:
                events += self._completed("", item.audio_s)  # a commit that held no text
        return events

    def commit(self) -> list[dict[str, Any]]:
        """The client commits the buffer: the open item is committed now."""
        self._open()
        return self._commit()

    def drop(self) -> None:
        """The buffer is cleared: the open item is forgotten."""
        self.item, self.sent, self.committed, self.speaking = None, "", False, False

    def _open(self) -> str:
        if self.item is None:
            self.drop()
            self.item = self.new_id("item")
        return self.item

    def _ms(self, audio_s: float) -> int:
        return round((self.offset_s + audio_s) * 1000)

    def _speech_started(self, onset_s: float) -> list[dict[str, Any]]:
        if not self.vad or self.speaking:
            return []
        item = self._open()
        self.speaking = True
        return [{"type": "input_audio_buffer.speech_started",
                 "audio_start_ms": self._ms(onset_s), "item_id": item}]  # fmt: skip

    def _delta(self, text: str) -> list[dict[str, Any]]:
        if len(text) <= len(self.sent) or not text.startswith(self.sent):
            return []
        item = self._open()
        delta, self.sent = text[len(self.sent) :], text
        return [{"type": "conversation.item.input_audio_transcription.delta",
                 "item_id": item, "content_index": 0, "delta": delta}]  # fmt: skip

    def _speech_stopped(self, audio_s: float) -> list[dict[str, Any]]:
        if self.item is None:
            return []  # an endpoint of silence: no item
        events = []
        if self.vad:
            events.append({"type": "input_audio_buffer.speech_stopped",
                           "audio_end_ms": self._ms(audio_s), "item_id": self.item})  # fmt: skip
        return events + self._commit()

    def _commit(self) -> list[dict[str, Any]]:
        if self.committed or self.item is None:
            return []
        self.committed = True
        return [{"type": "input_audio_buffer.committed", "item_id": self.item,
                 "previous_item_id": self.previous}]  # fmt: skip

    def _completed(self, text: str, audio_s: float) -> list[dict[str, Any]]:
        item = self._open()
        end_s = self.offset_s + audio_s
        events = self._commit()
        events.append({
            "type": "conversation.item.input_audio_transcription.completed",
            "item_id": item, "content_index": 0, "transcript": text,
            "usage": {"type": "duration", "seconds": round(max(0.0, end_s - self.item_start_s), 3)},
        })  # fmt: skip
        self.previous, self.item_start_s = item, end_s
        self.drop()
        return events


def parse_event(message: str | bytes) -> dict[str, Any]:
    """A client event as a dict with a served `type`; RealtimeError otherwise."""
    if isinstance(message, bytes):
        raise RealtimeError("send client events as JSON text messages (audio goes base64 in "
                            "input_audio_buffer.append)", "invalid_message")  # fmt: skip
    try:
        event = protocol.read_json(message)
    except ValueError as exc:
        raise RealtimeError(f"the message is not valid JSON ({exc})", "invalid_json") from None
    if not isinstance(event, dict) or not isinstance(event.get("type"), str):
        raise RealtimeError("a client event is a JSON object with a 'type'",
                            "missing_required_parameter", "type")  # fmt: skip
    if event["type"] not in CLIENT_EVENTS:
        raise RealtimeError(f"event type {shown(event['type'], 64)} is not served here; served: "
                            f"{', '.join(CLIENT_EVENTS)}", param="type")  # fmt: skip
    return event


def append_audio(value: Any, rate_hz: int, max_s: float) -> np.ndarray:
    """An append's `audio` (base64 PCM16) as float32 samples; RealtimeError for what is not
    PCM16 or carries more than `max_s` seconds (--max-queued-audio-s)."""
    if not isinstance(value, str):
        raise RealtimeError("'audio' must be a base64 string", param="audio")
    try:
        data = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise RealtimeError("'audio' is not valid base64", param="audio") from None
    if len(data) % 2:
        raise RealtimeError(f"'audio' holds {len(data)} bytes, not whole PCM16 samples",
                            param="audio")  # fmt: skip
    if len(data) / 2 / rate_hz > max_s:
        raise RealtimeError(
            f"one append may carry at most {max_s:g} s of audio (--max-queued-audio-s); send "
            "the audio in smaller appends", "audio_too_large", "audio",
        )  # fmt: skip
    return protocol.decode_frame(data, SessionConfig(rate_hz))
