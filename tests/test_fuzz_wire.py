"""Property tests of the WebSocket protocol's parsers, both ends: the server's reading of a
config, the end message and audio frames, rooms' names and `after`/`Last-Event-ID`, and
the client's reading of the server's records.

Each generated input gets a correct result or the parser's own error (ProtocolError,
FeedError, ServerError) with one clear line; never another exception.
"""

from __future__ import annotations

import io
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
from rich.console import Console

from streamasr.audio import MAX_RATE_HZ, MIN_RATE_HZ
from streamasr.backends.base import EndpointOptions
from streamasr.output.render import RENDERERS, RenderTarget, summary_line
from streamasr.server import protocol
from streamasr.server.client_records import (
    ServerError,
    event_from_record,
    read_record,
    summary_from_record,
)
from streamasr.server.protocol import (
    BLOCK_MS_RANGE,
    CONFIG_KEYS,
    FORMATS,
    ProtocolError,
    SessionConfig,
    decode_frame,
    is_end,
    parse_config,
)
from streamasr.server.room_feeds import MAX_AFTER, FeedError, _after, check_name
from streamasr.session.endpointing import RULE_S_RANGE
from streamasr.session.events import (
    EVENT_TYPES,
    Endpoint,
    Event,
    Final,
    FirstToken,
    Partial,
    event_from_dict,
)

MAX_BLOCK_MS = 5000.0  # the server's queued-audio limit, as a server sets it

SERVER_RULES = EndpointOptions()
VALUES = JSON_VALUES | EDGE_NUMBERS
SECONDS = st.floats(0, 1e5)
RULE_SECONDS = st.floats(*RULE_S_RANGE)
#: Configs a client may send, every key with a value the server takes.
VALID_CONFIGS = st.fixed_dictionaries(
    {"sample_rate": st.integers(MIN_RATE_HZ, MAX_RATE_HZ)},
    optional={
        "type": st.just("config"), "format": st.sampled_from(sorted(FORMATS)),
        "channels": st.integers(1, protocol.MAX_CHANNELS),
        "source": st.text(max_size=protocol.MAX_SOURCE_CHARS), "realtime": st.booleans(),
        "endpoint": st.booleans(), "rule1_s": RULE_SECONDS, "rule2_s": RULE_SECONDS,
        "rule3_s": RULE_SECONDS, "partials": st.sampled_from(protocol.PARTIALS),
        "block_ms": st.floats(BLOCK_MS_RANGE[0], MAX_BLOCK_MS) | st.sampled_from(["chunk",
                                                                                  "message"]),
        "tail_padding_s": st.floats(*protocol.TAIL_PADDING_S_RANGE),
        "punctuate": st.booleans(), "sentence_case": st.booleans(),
        "room": st.from_regex(protocol.ROOM_NAME, fullmatch=True), "room_source": st.booleans(),
    },
)  # fmt: skip
#: ... and the same with a key or two given any value (or left out), unknown keys among them.
CONFIGS = mutated(VALID_CONFIGS, (*CONFIG_KEYS, "unknown"))


def _config_or_error(message: str | bytes) -> SessionConfig | None:
    try:
        return parse_config(message, SERVER_RULES, max_block_ms=MAX_BLOCK_MS)
    except ProtocolError as exc:
        assert exc.code in (protocol.CLOSE_INVALID, protocol.CLOSE_UNSUPPORTED)
        assert_clear(exc)
        assert len(exc.reason.encode("utf-8")) <= protocol.MAX_REASON_BYTES
        return None


@given(CONFIGS)
@example({"sample_rate": 16000, "block_ms": 10**400})  # OverflowError in math.isfinite
@example({"sample_rate": 16000, "rule2_s": -(10**400)})  # the same
@example({"sample_rate": 16000, "format": []})  # TypeError: unhashable type: 'list'
@example({"sample_rate": 16000, "type": {"": 10**300}})  # the message echoed it whole
def test_any_config_object_is_read_or_refused_in_one_line(data: dict[str, Any]) -> None:
    config = _config_or_error(json_text(data))
    if config is None:
        return
    accepted()
    given = {"format": "s16le", "channels": 1, "source": "ws", "partials": "full",
             "room": None, "realtime": False, **data}  # fmt: skip
    for key in ("sample_rate", "format", "channels", "source", "partials", "room", "realtime"):
        assert getattr(config, key) == given[key]
    assert config.block_ms == data.get("block_ms")
    assert config.tail_padding_s == data.get("tail_padding_s")
    if config.endpoint is not None:
        for key in ("rule1_s", "rule2_s", "rule3_s"):
            assert getattr(config.endpoint, key) == data.get(key, getattr(SERVER_RULES, key))


@given(BROKEN_JSON | JSON_VALUES.map(json_text) | st.binary(max_size=64))
@example("[" * 4000)  # RecursionError from the JSON reader
@example('{"sample_rate": 16000, "channels": 1' + "0" * 5000 + "}")  # int()'s digit limit
def test_any_config_text_is_read_or_refused_in_one_line(message: str | bytes) -> None:
    _config_or_error(message)


END_MESSAGES = mutated(st.just({"type": "end"}), ("type", "extra")).map(json_text)


@given(BROKEN_JSON | JSON_VALUES.map(json_text) | END_MESSAGES)
@example("[" * 100_000)  # RecursionError from the JSON reader
def test_a_text_message_mid_audio_is_the_end_or_refused(message: str) -> None:
    try:
        ended = is_end(message)
    except ProtocolError as exc:
        assert_clear(exc)
        assert exc.code == protocol.CLOSE_UNSUPPORTED
        return
    accepted()
    assert ended


def test_channels_near_float32s_limit_mix_to_a_finite_sample() -> None:
    """Found by the long run: 1.7e38 on two of four f32le channels summed to infinity."""
    frame = np.array([[1.7e38, 0.0, 0.0, 1.7e38]], "<f4").tobytes()
    audio = decode_frame(frame, SessionConfig(16000, "f32le", 4))
    assert np.isfinite(audio).all() and np.allclose(audio, [0.85e38], rtol=1e-6)


@given(st.sampled_from(sorted(FORMATS)), st.integers(1, protocol.MAX_CHANNELS), st.data())
def test_any_audio_frame_decodes_to_finite_mono_or_is_refused(
    fmt: str, channels: int, data: st.DataObject
) -> None:
    config = SessionConfig(16000, fmt, channels)
    frames = data.draw(st.integers(0, 16)) * config.frame_bytes + data.draw(st.sampled_from(
        [0, 0, 0, 1, config.frame_bytes - 1]))  # mostly whole sample frames  # fmt: skip
    frame = data.draw(st.binary(min_size=frames, max_size=frames))
    try:
        audio = decode_frame(frame, config)
    except ProtocolError as exc:
        assert_clear(exc)
        return
    accepted()
    assert audio.dtype == np.float32 and audio.ndim == 1
    assert len(audio) * config.frame_bytes == len(frame)
    assert np.isfinite(audio).all()
    if fmt == "s16le":
        assert np.all(np.abs(audio) <= 1.0)


# -- rooms ------------------------------------------------------------------------------------


@given(st.text(max_size=80) | st.from_regex(protocol.ROOM_NAME, fullmatch=True))
def test_a_room_name_is_taken_exactly_when_it_is_safe_in_a_path(name: str) -> None:
    safe = bool(name) and len(name) <= 64 and all(c.isascii() and (c.isalnum() or c in "-_")
                                                  for c in name)  # fmt: skip
    try:
        assert check_name(name) == name and safe
        assert protocol.room_name(name) == name
        accepted()
    except (FeedError, ProtocolError) as exc:
        assert_clear(exc)
        assert not safe


#: `?after=` as a client may write it: digits, signs, unicode digits, escapes, repeats.
QUERY_PARTS = st.text(alphabet="0123456789+-_ %&=;.e\u0661\u00b2abc", max_size=24)


@given(QUERY_PARTS, st.none() | st.text(max_size=24))
@example("after=\u0661", None)  # an Arabic-Indic digit: str.isdigit, not a room_seq
@example("after=99999999999999999", None)
@example("", "\u00b2")
def test_after_and_last_event_id_are_a_room_seq_or_a_400(query: str, last_id: str | None) -> None:
    for text in (query, "after=" + query):
        try:
            seq = _after(text, last_id)
        except FeedError as exc:
            assert exc.status == 400 and exc.code == protocol.CLOSE_INVALID
            assert_clear(exc)
            continue
        accepted()
        assert isinstance(seq, int) and 0 <= seq <= MAX_AFTER


# -- the client's side: the server's records ----------------------------------------------


def _rendered(event: Any) -> None:
    """What the client does with an event it took: every file format renders it."""
    for fmt in ("text", "jsonl", "srt", "vtt"):
        out = io.StringIO()
        target = RenderTarget(out=out, err=Console(file=io.StringIO()), quiet=True)
        renderer = RENDERERS[fmt].make(target)
        renderer.begin("source")
        renderer.event(event)


TEXT = st.text(max_size=20)
TOKENS = st.lists(st.text(max_size=5), max_size=4).map(tuple)
TIMES = st.lists(SECONDS, max_size=4).map(tuple)
COMMON = {"seq": st.integers(0, 2**40), "audio_s": SECONDS, "wall_s": SECONDS,
          "segment": st.integers(0, 10**6)}  # fmt: skip
#: Events as a server makes them, one strategy per kind.
EVENTS = st.one_of(
    st.builds(Partial, **COMMON, text=TEXT, tokens=TOKENS, token_times_s=TIMES),
    st.builds(FirstToken, **COMMON, text=TEXT, onset_s=SECONDS, latency_s=SECONDS,
              wall_latency_s=st.none() | SECONDS,
              onset_source=st.sampled_from(["detected", "segment_start"])),
    st.builds(Endpoint, **COMMON, rule_hint=st.sampled_from(["rule2", "eou", ""])),
    st.builds(Final, **COMMON, text=TEXT, start_s=SECONDS, end_s=SECONDS, tokens=TOKENS,
              token_times_s=TIMES),
)  # fmt: skip
#: (event, its record with a field or two given any value or left out)
RECORDS = EVENTS.flatmap(
    lambda event: mutated(st.just({"v": 1, **event.to_dict()}), ["v", *event.to_dict()]).map(
        lambda record: (event, record)
    )
)


@given(RECORDS)
# an infinite end time taken (the JSONL writer then refused it); 'v' quoted whole in the
# message; 1e308 s taken (the SRT writer's millisecond arithmetic overflowed)
@example((Final(1, 1.0, 1.0, 0, "a", 0.0, 0.0), {"type": "final", "seq": 1, "audio_s": 1.0,
          "wall_s": 1.0, "segment": 0, "text": "a", "start_s": 0.0, "end_s": float("inf")}))
@example((Final(1, 1.0, 1.0, 0, "a", 0.0, 0.0), {"type": "final", "v": [10**400]}))
@example((Final(1, 1.0, 1.0, 0, "a", 0.0, 0.0), {"type": "final", "seq": 0, "audio_s": 1e308,
          "wall_s": 0.0, "segment": 0, "text": "0", "start_s": 0.0, "end_s": 0.0}))  # fmt: skip
def test_a_server_record_is_its_event_or_one_server_error(
    item: tuple[Event, dict[str, Any]],
) -> None:
    """Each record the client takes is one every output format renders; an unchanged
    record is read back as the event it was made from."""
    event, record = item
    try:
        read = event_from_record(read_record(json_text(record)))
    except ServerError as exc:
        assert_clear(exc)
        return
    accepted()
    assert isinstance(read, EVENT_TYPES[record["type"]])
    _rendered(read)
    if record == {"v": 1, **event.to_dict()}:
        assert read == event


@given(RECORDS)
@example((Final(1, 1.0, 1.0, 0, "a", 0.0, 0.0), {"type": "final", "words": [
    {"text": "a", "start_s": 10**400, "end_s": 1.0}]}))  # OverflowError in float()
@example((Final(1, 1.0, 1.0, 0, "a", 0.0, 0.0), {"type": ["final"]}))  # unhashable type
def test_event_from_dict_gives_an_event_or_one_value_error(
    item: tuple[Event, dict[str, Any]],
) -> None:
    """The library's reader of records (no type checks of its own: event_from_record adds
    them for the client) keeps to its word: an event, or ValueError."""
    event, record = item
    try:
        read = event_from_dict(record)
    except ValueError as exc:
        assert_clear(exc)
        return
    accepted()
    assert isinstance(read, EVENT_TYPES[record["type"]])
    if record == {"v": 1, **event.to_dict()}:
        assert read == event


@given(BROKEN_JSON | JSON_VALUES.map(json_text) | st.binary(max_size=64)
       | RECORDS.map(lambda item: json_text(item[1])))
@example("[" * 100_000)  # RecursionError from the JSON reader
def test_any_server_message_is_a_record_or_one_server_error(message: str | bytes) -> None:
    try:
        record = read_record(message)
    except ServerError as exc:
        assert_clear(exc)
        return
    accepted()
    assert isinstance(record, dict) and isinstance(record["type"], str)


SUMMARIES = mutated(st.fixed_dictionaries({
    "type": st.just("summary"), "source": TEXT, "text": TEXT, "audio_s": SECONDS,
    "compute_s": SECONDS, "wall_s": SECONDS, "first_token_latency_s": st.none() | SECONDS,
    "first_token_wall_latency_s": st.none() | SECONDS, "revisions": st.integers(0, 10**6),
}), ("source", "text", "audio_s", "compute_s", "wall_s", "first_token_latency_s",
     "first_token_wall_latency_s", "revisions"))  # fmt: skip


@given(SUMMARIES)
def test_a_summary_record_is_read_or_one_server_error(record: dict[str, Any]) -> None:
    try:
        summary = summary_from_record(read_record(json_text(record)), ())
    except ServerError as exc:
        assert_clear(exc)
        return
    accepted()
    assert (summary.source, summary.text, summary.audio_s, summary.revisions) == (
        record["source"], record["text"], record["audio_s"], record.get("revisions", 0))
    summary_line(summary, realtime=False)  # what the client prints of it
