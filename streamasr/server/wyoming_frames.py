"""Wyoming frames, read and written so that a hostile client ends only its own connection.

Why not the `wyoming` package's reader: it reads whatever `data_length` and
`payload_length` a header claims (2 GB claimed is 2 GB of memory) and swallows a bad frame
without a word. Here a frame (header line, data, payload) is read with caps and built into
wyoming's `Event`; a frame past a cap, invalid JSON or audio that cannot be read raises
WyomingInputError, which the adapter answers with one `error` event (`send_error`). The
package's own classes still make the events and its writer writes them (`frame`).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
from dataclasses import dataclass
from typing import Any

import numpy as np
from wyoming.error import Error
from wyoming.event import Event, write_event

from streamasr.audio import MAX_CHANNELS, MAX_RATE_HZ, MIN_RATE_HZ
from streamasr.server import protocol
from streamasr.server.protocol import SessionConfig

#: One event's header line (JSON); Home Assistant's are well under 1 KiB.
MAX_HEADER_BYTES = 64 << 10
#: After an error event, what a client still sends is read and dropped for this long (and
#: up to LINGER_BYTES): closing with unread bytes resets the connection, and the reset can
#: destroy the error event before the client reads it.
LINGER_S = 2.0
LINGER_BYTES = 4 << 20


class WyomingInputError(Exception):
    """What a client sent cannot be served: one error event, then that connection ends."""

    def __init__(self, code: str, text: str, kind: str) -> None:
        super().__init__(text)
        self.code = code  # the error event's machine-readable code
        self.text = text
        self.kind = kind  # metrics label (streamasr_dropped_connections)


class Gone(Exception):
    """The client went away."""


def invalid(text: str) -> WyomingInputError:
    return WyomingInputError("invalid-event", text, "invalid_input")


def unexpected(text: str) -> WyomingInputError:
    return WyomingInputError("unexpected-event", text, "unexpected_message")


async def read_event(reader: asyncio.StreamReader, max_bytes: int) -> Event | None:
    """One event, or None where the client closed between events.

    `reader`'s limit caps the header line (MAX_HEADER_BYTES); `max_bytes` caps its data
    and its payload."""
    try:
        line = await reader.readuntil(b"\n")
    except asyncio.IncompleteReadError as exc:
        if exc.partial.strip():
            raise Gone() from None  # ended inside a header
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
        raise invalid('event header: "type" must be a string of 1 to 128 characters')
    data = header.get("data")
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise invalid('event header: "data" must be a JSON object')
    data_length = _length(header, "data_length", max_bytes)
    payload_length = _length(header, "payload_length", max_bytes)
    if data_length:
        data.update(_json_object(await reader.readexactly(data_length), "event data"))
    payload = await reader.readexactly(payload_length) if payload_length else None
    return Event(type=kind, data=data, payload=payload)


def _json_object(raw: bytes, what: str) -> dict[str, Any]:
    try:
        value = protocol.read_json(raw)
    except ValueError as exc:
        raise invalid(
            f"{what} is not valid UTF-8 JSON ({exc}); send each event as one JSON line, "
            'e.g. {"type": "describe"}'
        ) from None
    if not isinstance(value, dict):
        raise invalid(f"{what} must be a JSON object")
    return value


def _length(header: dict[str, Any], key: str, max_bytes: int) -> int:
    value = header.get(key)
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise invalid(f"event header: {key} must be a whole number of bytes, 0 or more")
    if value > max_bytes:
        raise WyomingInputError(
            "frame-too-big",
            f"event header: {key} {value} is over this server's limit of {max_bytes} bytes "
            "(serve --max-frame-bytes); send audio in smaller chunks",
            "frame_too_big",
        )
    return value


@dataclass(frozen=True)
class AudioFormat:
    """An audio stream's format, as its `audio-start` gives it: widths 1 to 4 bytes
    (unsigned 8-bit, signed 16-, 24- and 32-bit little-endian, what wyoming's own
    AudioChunkConverter takes)."""

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
        raise invalid(f"{event}: {key} must be a whole number from {low} to {high}")
    return value


def frame(event: Event) -> bytes:
    """One event as written on the wire (by wyoming's own writer)."""
    buffer = io.BytesIO()
    write_event(event, buffer)
    return buffer.getvalue()


async def send_error(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, code: str, text: str,
    drain_s: float = LINGER_S,
) -> None:  # fmt: skip
    """One error event, then the end of our side; what the client still sends is read and
    dropped for a moment (LINGER_S), so that the close does not reset the error away."""
    with contextlib.suppress(ConnectionError, OSError, asyncio.TimeoutError):
        if not writer.is_closing():
            writer.write(frame(Error(text=text, code=code).event()))
        await asyncio.wait_for(writer.drain(), drain_s)
        if writer.can_write_eof():
            writer.write_eof()
        await asyncio.wait_for(_discard_input(reader), LINGER_S)


async def _discard_input(reader: asyncio.StreamReader) -> None:
    """Read and drop what a client still sends, up to LINGER_BYTES or its end."""
    dropped = 0
    while dropped < LINGER_BYTES:
        data = await reader.read(64 << 10)
        if not data:
            return
        dropped += len(data)
