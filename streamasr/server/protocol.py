"""The wire protocol of `streamasr serve`, without any networking.

A client, over one WebSocket connection:

1. sends a text message with a JSON config: `{"sample_rate": 16000, "format": "s16le",
   "channels": 1}` plus optional per-session settings (`source`, `realtime`, `endpoint`,
   `rule1_s`, `rule2_s`, `rule3_s`, `partials`, `block_ms`, `tail_padding_s`, and the
   finishing steps `punctuate` and `sentence_case`, true or false: without them, the
   server's `serve --punctuate/--sentence-case`) within the server's limits, and `room` to
   publish its events to a room's viewers (server/rooms.py);
2. sends binary frames of interleaved PCM in that format, of any size;
3. sends the text message `{"type": "end"}` (or closes the connection);
4. receives, as JSON text messages, exactly the objects `streamasr file --format jsonl`
   prints: `partial`, `first_token`, `endpoint`, `final` while the audio streams, and the
   last `final` and a `summary` after the end, each with the wire version first
   (`"v": 1`, streamasr.session.events.WIRE_VERSION);
5. may then send a new config for the next utterance, or close.

A message that breaks the protocol raises ProtocolError with the WebSocket close code and a
reason that says what to do; the server closes that connection with them.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from typing import Any, Literal

import numpy as np

from streamasr.audio import MAX_RATE_HZ, MIN_RATE_HZ
from streamasr.backends.base import EndpointOptions
from streamasr.errors import InputError
from streamasr.session.endpointing import RULE_S_RANGE
from streamasr.session.stream import StreamOptions
from streamasr.text.printable import shown

FORMATS: dict[str, np.dtype] = {"s16le": np.dtype("<i2"), "f32le": np.dtype("<f4")}
MAX_CHANNELS = 8
MAX_SOURCE_CHARS = 256
MAX_CONFIG_BYTES = 4096
#: A room's name: short, and safe in a URL path and a file name.
ROOM_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")

# WebSocket close codes (RFC 6455, section 7.4.1)
CLOSE_NORMAL = 1000
CLOSE_GOING_AWAY = 1001
CLOSE_UNSUPPORTED = 1003  # text where audio was expected
CLOSE_INVALID = 1007  # a config or audio frame that cannot be read
CLOSE_POLICY = 1008  # a limit: session length, idle, a client that cannot keep up
CLOSE_TOO_BIG = 1009
CLOSE_INTERNAL = 1011
CLOSE_TRY_LATER = 1013  # at capacity
CLOSE_TAKEN_OVER = 4409  # another speaker took over the room this session published to
MAX_REASON_BYTES = 123  # what a close frame can carry

CONFIG_KEYS = (
    "type", "sample_rate", "format", "channels", "source", "realtime",
    "endpoint", "rule1_s", "rule2_s", "rule3_s", "partials", "block_ms", "tail_padding_s",
    "punctuate", "sentence_case",
    "room", "room_source",
)
PARTIALS = ("full", "delta")
#: A session's own feed block: "chunk" (one engine chunk) or milliseconds in this range.
#: Not below 10 ms (each block costs Python work on the server), and at most half the
#: server's --max-queued-audio-s (audio waits for a whole block before it is fed).
BLOCK_MS_RANGE = (10.0, 60_000.0)
CHUNK: Literal["chunk"] = "chunk"
#: `block_ms: "message"`: each binary message is fed as it comes (cut at the server's feed
#: block), as a live client's audio arrives; the events then equal `streamasr file
#: --block-ms M` for messages of M ms (M at most the server's block)
MESSAGE: Literal["message"] = "message"
#: A session's own tail padding, seconds: each padded second is engine steps on the server.
TAIL_PADDING_S_RANGE = (0.0, 2.0)


class ProtocolError(InputError):
    """A client broke the protocol; the connection closes with `code` and the message."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = close_reason(reason)


def close_reason(text: str) -> str:
    """`text` cut to what a close frame can carry (123 bytes of UTF-8)."""
    data = text.encode("utf-8")
    if len(data) <= MAX_REASON_BYTES:
        return text
    return data[: MAX_REASON_BYTES - 3].decode("utf-8", "ignore") + "..."


@dataclass(frozen=True)
class SessionConfig:
    """One utterance's settings, as the client's config message gives them."""

    sample_rate: int
    format: str = "s16le"
    channels: int = 1
    source: str = "ws"
    realtime: bool = False
    endpoint: EndpointOptions | None = None  # None: the server's rules
    partials: str = "full"  # "delta": partials carry what changed (as file --partials delta)
    block_ms: float | Literal["chunk", "message"] | None = None  # None: the server's
    tail_padding_s: float | None = None  # None: the server's tail padding
    punctuate: bool | None = None  # finals punctuated (the server's model); None: its default
    sentence_case: bool | None = None  # finals in sentence case; None: the server's default
    room: str | None = None  # publish the events to this room's viewers
    room_source: bool = False  # readers get `source` as sent (else the room's name)

    @property
    def frame_bytes(self) -> int:
        """Bytes of one interleaved sample frame (all channels)."""
        return FORMATS[self.format].itemsize * self.channels

    def stream_options(self, base: StreamOptions) -> StreamOptions:
        """The server's stream options with this session's own settings applied."""
        options = replace(base, paced=self.realtime)
        if self.endpoint is not None:
            options = replace(options, endpoint=self.endpoint)
        if self.block_ms == CHUNK:
            options = replace(options, block_s=None)
        elif self.block_ms == MESSAGE:
            pass  # messages are cut at the server's feed block
        elif self.block_ms is not None:
            options = replace(options, block_s=self.block_ms / 1000)
        if self.tail_padding_s is not None:
            options = replace(options, tail_padding_s=self.tail_padding_s)
        return options


def parse_config(
    message: str | bytes,
    server_endpoint: EndpointOptions,
    max_block_ms: float = BLOCK_MS_RANGE[1],
) -> SessionConfig:
    """Read a config message; ProtocolError (1007/1003) naming what to fix.

    `max_block_ms`: the largest `block_ms` this server takes (its queued-audio limit)."""
    if isinstance(message, bytes):
        raise ProtocolError(
            CLOSE_UNSUPPORTED,
            'send a JSON config text message first, e.g. {"sample_rate": 16000, "format": '
            '"s16le", "channels": 1}; got a binary frame',
        )
    if len(message.encode("utf-8")) > MAX_CONFIG_BYTES:
        raise ProtocolError(CLOSE_INVALID, f"config longer than {MAX_CONFIG_BYTES} bytes")
    try:
        data = read_json(message)
    except ValueError as exc:
        raise ProtocolError(CLOSE_INVALID, f"config is not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ProtocolError(CLOSE_INVALID, "config must be a JSON object")
    unknown = sorted(set(data) - set(CONFIG_KEYS))
    if unknown:
        raise ProtocolError(
            CLOSE_INVALID,
            f"config: unknown key {shown(unknown[0])}; known: {', '.join(CONFIG_KEYS)}",
        )
    if data.get("type", "config") != "config":
        raise ProtocolError(
            CLOSE_INVALID, f'config: type must be "config", not {shown(data.get("type"))}'
        )
    rate = _whole(data, "sample_rate", None, MIN_RATE_HZ, MAX_RATE_HZ)
    fmt = data.get("format", "s16le")
    if not isinstance(fmt, str) or fmt not in FORMATS:
        raise ProtocolError(
            CLOSE_INVALID, f"config: format {shown(fmt)} is not known; use s16le or f32le"
        )
    channels = _whole(data, "channels", 1, 1, MAX_CHANNELS)
    source = data.get("source", "ws")
    if not isinstance(source, str) or len(source) > MAX_SOURCE_CHARS:
        raise ProtocolError(
            CLOSE_INVALID, f"config: source must be a string of at most {MAX_SOURCE_CHARS} chars"
        )
    realtime = _flag(data, "realtime", False)
    endpoint = None
    if any(key in data for key in ("endpoint", "rule1_s", "rule2_s", "rule3_s")):
        endpoint = EndpointOptions(
            enabled=_flag(data, "endpoint", server_endpoint.enabled),
            rule1_s=_seconds(data, "rule1_s", server_endpoint.rule1_s),
            rule2_s=_seconds(data, "rule2_s", server_endpoint.rule2_s),
            rule3_s=_seconds(data, "rule3_s", server_endpoint.rule3_s),
        )
    partials = data.get("partials", "full")
    if partials not in PARTIALS:
        raise ProtocolError(CLOSE_INVALID, 'config: partials must be "full" or "delta"')
    block_ms: float | Literal["chunk", "message"] | None = data.get("block_ms")
    if block_ms not in (CHUNK, MESSAGE):
        high = min(BLOCK_MS_RANGE[1], max_block_ms)
        block_ms = _number(
            data, "block_ms", None, BLOCK_MS_RANGE[0], high, "ms", ' or "chunk" or "message"'
        )
    tail = _number(data, "tail_padding_s", None, *TAIL_PADDING_S_RANGE, "s")
    punctuate = _flag(data, "punctuate", False) if "punctuate" in data else None
    sentence_case = _flag(data, "sentence_case", False) if "sentence_case" in data else None
    return SessionConfig(
        rate, fmt, channels, source, realtime, endpoint, partials, block_ms, tail,
        punctuate, sentence_case,
        room_name(data.get("room")), _flag(data, "room_source", False),
    )


def read_json(text: str | bytes) -> Any:
    """A client's JSON message; ValueError saying in a few words why it cannot be read.

    Why not `json.loads` alone: besides its JSONDecodeError, a few kilobytes of `[[[[...`
    raise RecursionError, an integer of more than 4300 digits a ValueError that tells the
    reader to change the interpreter's limit, and bytes that are not UTF-8 a
    UnicodeDecodeError; each must be the protocol's one clear error, not a traceback.
    """
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except UnicodeDecodeError:
        raise ValueError("not UTF-8 text") from None
    except RecursionError:
        raise ValueError("nested deeper than a message can be") from None
    except ValueError:  # an integer of more digits than Python converts
        raise ValueError("a number with too many digits") from None


def room_name(value: Any) -> str | None:
    """A config's room (None: none), or ProtocolError saying what a name may be."""
    if value is None:
        return None
    if not isinstance(value, str) or not ROOM_NAME.fullmatch(value):
        raise ProtocolError(
            CLOSE_INVALID,
            "config: room must be 1 to 64 letters, digits, '-' or '_'",
        )
    return value


def _whole(data: dict[str, Any], key: str, default: int | None, low: int, high: int) -> int:
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ProtocolError(
            CLOSE_INVALID, f"config: {key} must be a whole number from {low} to {high}"
        )
    return value


def _flag(data: dict[str, Any], key: str, default: bool) -> bool:
    value = data.get(key, default)
    if not isinstance(value, bool):
        raise ProtocolError(CLOSE_INVALID, f"config: {key} must be true or false")
    return value


def _seconds(data: dict[str, Any], key: str, default: float) -> float:
    value = _number(data, key, default, *RULE_S_RANGE, "s")
    return default if value is None else value


def _number(
    data: dict[str, Any],
    key: str,
    default: float | None,
    low: float,
    high: float,
    unit: str,
    other: str = "",
) -> float | None:
    """A number within [low, high]; `default` when the key is missing (None: the server's
    setting). Compared, never converted first: JSON has no NaN, but Python's parser takes
    it (no comparison holds for it), and an integer of 400 digits is no float."""
    if key not in data:
        return default
    value = data[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise ProtocolError(
            CLOSE_INVALID, f"config: {key} must be a number from {low:g} to {high:g} {unit}{other}"
        )
    return float(value)


def is_end(message: str) -> bool:
    """True for the end message; ProtocolError for any other text where audio is expected."""
    try:
        data = read_json(message)
    except ValueError:
        data = None
    if isinstance(data, dict) and data.get("type") == "end":
        return True
    raise ProtocolError(
        CLOSE_UNSUPPORTED,
        'expected binary audio frames or {"type": "end"}; got another text message',
    )


def decode_frame(frame: bytes, config: SessionConfig) -> np.ndarray:
    """One binary frame as mono float32 (channels averaged, as `streamasr file` does)."""
    if len(frame) % config.frame_bytes:
        raise ProtocolError(
            CLOSE_INVALID,
            f"{config.format} frame of {len(frame)} bytes is not a whole number of "
            f"{config.frame_bytes}-byte sample frames ({config.channels} channel(s))",
        )
    samples = np.frombuffer(frame, FORMATS[config.format])
    if config.format == "s16le":
        audio = samples.astype(np.float32) / 32768.0
    else:
        audio = samples.astype(np.float32)
        if not np.isfinite(audio).all():
            raise ProtocolError(CLOSE_INVALID, "f32le frame holds NaN or infinite samples")
    if config.channels > 1:  # summed in float64: two samples near float32's limit overflow it
        audio = audio.reshape(-1, config.channels).mean(axis=1, dtype=np.float64)
    return np.ascontiguousarray(audio, np.float32)

