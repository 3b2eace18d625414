"""Property tests of the other protocols' parsers, without a network: Wyoming's frames
(header line, data and payload lengths, audio formats), OpenAI Realtime's client events
(JSON, session updates, base64 audio) and the OpenAI REST upload's form fields.

Each input is read correctly or refused with the protocol's one error (WyomingInputError,
RealtimeError, ApiError) in a line; a client that stops mid-frame is one that went away.
tests/test_fuzz_served.py sends some of the same inputs to a real server.
"""

from __future__ import annotations

import asyncio
import base64
import json
import struct
from typing import Any

import numpy as np
from fuzz_inputs import (
    BROKEN_JSON,
    EDGE_NUMBERS,
    JSON_VALUES,
    accepted,
    assert_clear,
    json_text,
    mutated,
)
from hypothesis import example, given
from hypothesis import strategies as st
from wyoming.event import Event

from streamasr.backends.base import EndpointOptions
from streamasr.server.openai_rest import ALIASES, _check_language
from streamasr.server.openai_schemas import ApiError, ModelCard, StreamingSettings
from streamasr.server.openai_upload import _suffix
from streamasr.server.realtime_events import (
    CLIENT_EVENTS,
    RATES,
    RealtimeError,
    Settings,
    append_audio,
    parse_event,
    updated_settings,
)
from streamasr.server.wyoming_frames import (
    MAX_HEADER_BYTES,
    AudioFormat,
    Gone,
    WyomingInputError,
    read_event,
)

VALUES = JSON_VALUES | EDGE_NUMBERS
MAX_FRAME_BYTES = 4096

# -- Wyoming ------------------------------------------------------------------------------


def wyoming_frame(header: dict[str, Any], data: bytes, payload: bytes) -> bytes:
    return json_text(header).encode("utf-8") + b"\n" + data + payload


VALID_HEADERS = st.fixed_dictionaries(
    {"type": st.sampled_from(["describe", "transcribe", "audio-start", "audio-chunk",
                              "audio-stop"])},
    optional={"data": st.fixed_dictionaries({}, optional={
        "rate": st.sampled_from([16000, 22050]), "width": st.integers(1, 4),
        "channels": st.integers(1, 2)}), "version": st.just("1.5.2")},
)  # fmt: skip


@st.composite
def wyoming_streams(draw: st.DrawFn) -> bytes:
    """A few frames, each a header (valid, or with a key or two given any value) with the
    data and payload it declares, or a length that lies; or bytes that are no frame."""
    frames = []
    for _ in range(draw(st.integers(0, 3))):
        header = draw(mutated(VALID_HEADERS, ("type", "data", "data_length", "payload_length")))
        data = json_text(draw(st.dictionaries(st.text(max_size=4), VALUES, max_size=2)))
        payload = draw(st.binary(max_size=64))
        if draw(st.booleans()):  # say the lengths (else what the mutation left)
            header["data_length"], header["payload_length"] = len(data.encode()), len(payload)
        if draw(st.booleans()):  # and then lie about one
            header[draw(st.sampled_from(["data_length", "payload_length"]))] = draw(
                st.integers(0, MAX_FRAME_BYTES * 2) | EDGE_NUMBERS)  # fmt: skip
        frames.append(wyoming_frame(header, data.encode(), payload))
    stream = b"".join(frames)
    return stream + draw(st.just(b"") | st.binary(max_size=32) | BROKEN_JSON.map(str.encode))


async def _read_all(stream: bytes) -> list[Event]:
    reader = asyncio.StreamReader(limit=MAX_HEADER_BYTES)
    reader.feed_data(stream)
    reader.feed_eof()
    events = []
    while (event := await read_event(reader, MAX_FRAME_BYTES)) is not None:
        events.append(event)
        assert len(events) <= stream.count(b"\n")  # each event takes a line
    return events


@given(wyoming_streams())
@example(b"[" * 60_000 + b"\n")  # RecursionError from the JSON reader
@example(wyoming_frame({"type": "audio-chunk", "payload_length": 2**62}, b"", b""))
@example(b"x" * (MAX_HEADER_BYTES + 10) + b"\n")
def test_wyoming_frames_are_events_or_one_error_event(stream: bytes) -> None:
    try:
        events = asyncio.run(_read_all(stream))
    except WyomingInputError as exc:
        assert_clear(exc)
        assert exc.code in ("invalid-event", "frame-too-big")
        return
    except (Gone, asyncio.IncompleteReadError):
        return  # ended inside a frame: the client went away
    accepted()
    for event in events:
        assert isinstance(event.data, dict) and 0 < len(event.type) <= 128
        assert event.payload is None or len(event.payload) <= MAX_FRAME_BYTES


AUDIO_STARTS = mutated(st.fixed_dictionaries({
    "rate": st.sampled_from([16000, 22050, 8000]), "width": st.integers(1, 4),
    "channels": st.integers(1, 3)}), ("rate", "width", "channels"), most=1)  # fmt: skip


@given(AUDIO_STARTS, st.integers(0, 24).flatmap(lambda n: st.binary(min_size=n, max_size=n)))
def test_a_wyoming_audio_format_decodes_its_chunks_or_is_refused(
    data: dict[str, Any], payload: bytes
) -> None:
    try:
        audio_format = AudioFormat.of(Event("audio-start", data))
        audio = audio_format.decode(payload)
    except WyomingInputError as exc:
        assert_clear(exc)
        return
    accepted()
    frame = audio_format.width * audio_format.channels
    assert audio.dtype == np.float32 and len(audio) * frame == len(payload)
    assert np.isfinite(audio).all() and np.all(np.abs(audio) <= 1.0)


# -- OpenAI Realtime ----------------------------------------------------------------------


GA_SESSIONS = st.fixed_dictionaries({}, optional={
    "type": st.just("transcription"),
    "audio": st.fixed_dictionaries({"input": st.fixed_dictionaries({}, optional={
        "format": st.fixed_dictionaries({"type": st.just("audio/pcm"),
                                         "rate": st.sampled_from(RATES)}),
        "transcription": st.fixed_dictionaries({}, optional={
            "model": st.just("whisper-1"), "language": st.just("en"), "prompt": st.text()}),
        "turn_detection": st.none() | st.fixed_dictionaries(
            {"type": st.sampled_from(["server_vad", "semantic_vad"])},
            optional={"silence_duration_ms": st.integers(100, 5000)}),
    })}),
    "room": st.from_regex(r"[a-z0-9_-]{1,64}", fullmatch=True),
    "punctuate": st.none() | st.booleans(), "sentence_case": st.none() | st.booleans(),
})  # fmt: skip
SESSION_KEYS = ("type", "audio", "room", "punctuate", "sentence_case", "input_audio_format",
                "input_audio_transcription", "turn_detection")  # fmt: skip
EVENTS = st.one_of(
    mutated(st.fixed_dictionaries({"type": st.sampled_from(CLIENT_EVENTS),
                                   "session": mutated(GA_SESSIONS, SESSION_KEYS)}),
            ("type", "session", "event_id")).map(json_text),
    BROKEN_JSON, JSON_VALUES.map(json_text), st.binary(max_size=16),
)  # fmt: skip


@given(EVENTS)
@example("[" * 60_000)  # RecursionError from the JSON reader
@example(json_text({"type": "session.update", "session": {"type": ["x" * 700]}}))  # echoed whole
@example(json_text({"type": "session.update", "session": {"audio": {"input": {"format": {
    "type": "audio/pcm", "rate": [24000]}}}}}))  # fmt: skip
def test_a_realtime_client_event_is_served_or_one_error_event(message: str | bytes) -> None:
    try:
        event = parse_event(message)
        beta = event["type"] == "transcription_session.update"
        settings = updated_settings(Settings(), event.get("session"), beta)
    except RealtimeError as exc:
        assert_clear(exc)
        assert exc.code and isinstance(exc.code, str)
        return
    accepted()
    assert settings.rate_hz in RATES
    config = settings.session_config(EndpointOptions())
    json.dumps(settings.describe("sess_1"), allow_nan=False)
    json.dumps(settings.describe_beta("sess_1"), allow_nan=False)
    if config.endpoint is not None and config.endpoint.enabled:
        assert 0 < config.endpoint.rule2_s


PCM16 = st.lists(st.integers(-32768, 32767), max_size=200).map(
    lambda samples: base64.b64encode(struct.pack(f"<{len(samples)}h", *samples)).decode()
)


@given(PCM16 | st.text(max_size=40) | VALUES, st.sampled_from(RATES))
@example("AAA=", 16000)  # a 2-byte sample cut to one byte by its padding
@example("A" * 4 * 10_001, 16000)  # 30002 bytes: more than the limit's 1 s
def test_a_realtime_append_is_pcm16_samples_or_one_error_event(value: Any, rate_hz: int) -> None:
    try:
        audio = append_audio(value, rate_hz, max_s=1.0)
    except RealtimeError as exc:
        assert_clear(exc)
        assert exc.param == "audio"
        return
    accepted()
    samples = base64.b64decode(value)
    assert len(audio) * 2 == len(samples) <= 2 * rate_hz
    assert np.allclose(audio, np.frombuffer(samples, "<i2") / 32768.0)


# -- OpenAI REST: the upload's form fields ------------------------------------------------


CARD = ModelCard(
    id="tiny-en", created=0, engine="sherpa-onnx", device="cpu", language="en",
    sample_rate_hz=16000, chunk_ms=320, lookahead_ms=130, settings={}, aliases=list(ALIASES),
    streaming=StreamingSettings(block_ms=100, tail_padding_s=0.3, endpoint=True, rule1_s=2.4,
                                rule2_s=1.2, rule3_s=20, punctuate=False, sentence_case=False),
)  # fmt: skip


FILE_NAMES = st.sampled_from(["../../etc/passwd", "a.WAV", "a.tar.gz", ".", "a.", "a\0.wav",
                              "a.wav\n", "a." + "x" * 9])  # fmt: skip


@given(st.none() | st.text(max_size=300) | FILE_NAMES)
def test_an_upload_keeps_only_a_plain_suffix_of_its_file_name(filename: str | None) -> None:
    suffix = _suffix(filename)
    accepted()
    assert suffix == "" or (suffix[0] == "." and suffix[1:].isalnum() and len(suffix) <= 8)
    assert "/" not in suffix and "\0" not in suffix


@given(st.none() | st.text(max_size=20) | st.sampled_from(["en", "EN-us", "de", "en-", "-en", ""]))
def test_a_language_field_is_the_models_or_one_400(language: str | None) -> None:
    try:
        shown = _check_language(CARD, language)
    except ApiError as exc:
        assert_clear(exc)
        assert exc.status == 400 and exc.param == "language"
        return
    accepted()
    assert shown == "en"
