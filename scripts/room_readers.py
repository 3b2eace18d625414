"""Room readers for load runs that cost the machine they share as little as a reader can.

The load runs put thousands of readers on the same cores as the servers they measure, so a
reader's own Python is part of every lag it reports. These readers are bare asyncio
protocols: each chunk of bytes is split into WebSocket frames or SSE lines as it arrives and
stamped with its arrival time (the receipt), pings are answered, and the JSON is decoded
only after the talk.

A reader ends at the room's status saying the publisher left (or a `close` event, or the
connection's end) and returns what came when: (arrival, decoded record) per event.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import time
from typing import Any, cast

_WS_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
# the status event that ends a talk, as the server encodes it (json.dumps, default separators)
_PUBLISHER_LEFT = b'"publisher": false'
_SSE_CLOSE = b'"type": "close"'


class _Reader(asyncio.Protocol):
    """One connection: the HTTP head, then frames (ws) or lines (sse), each stamped on arrival."""

    def __init__(self, kind: str, accept: bytes | None) -> None:
        self.kind = kind
        self._accept = accept
        self._buffer = bytearray()
        self._head_done = False
        self.payloads: list[tuple[float, bytes]] = []
        self.closed: str | None = None
        loop = asyncio.get_running_loop()
        self.head: asyncio.Future[None] = loop.create_future()
        self.done: asyncio.Future[None] = loop.create_future()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        now = time.monotonic()
        buffer = self._buffer
        buffer += data
        if not self._head_done:
            end = buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(buffer[:end]).decode("latin-1")
            del buffer[: end + 4]
            self._head_done = True
            status = head.split("\r\n", 1)[0]
            if self._accept is not None and self._accept.decode() not in head:
                self.closed = f"handshake: {status}"
            elif self._accept is None and not status.endswith(" 200 OK"):
                self.closed = f"{status}: {bytes(buffer[:300]).decode(errors='replace')}"
            if not self.head.done():
                self.head.set_result(None)
            if self.closed is not None:
                self._finish()
                return
        if self.kind == "ws":
            self._frames(now)
        else:
            self._lines(now)

    def _frames(self, now: float) -> None:
        buffer = self._buffer
        while len(buffer) >= 2:
            length, start = buffer[1] & 0x7F, 2
            if length == 126:
                if len(buffer) < 4:
                    return
                length, start = int.from_bytes(buffer[2:4], "big"), 4
            elif length == 127:
                if len(buffer) < 10:
                    return
                length, start = int.from_bytes(buffer[2:10], "big"), 10
            if len(buffer) < start + length:
                return
            opcode = buffer[0] & 0x0F
            payload = bytes(buffer[start : start + length])
            del buffer[: start + length]
            if opcode == 1:  # text: one event (the server never fragments them)
                self.payloads.append((now, payload))
                if _PUBLISHER_LEFT in payload:
                    self._finish()
                    return
            elif opcode == 9:  # ping: a pong with the same payload, masked as a client must
                self._send(0xA, payload)
            elif opcode == 8:
                code = int.from_bytes(payload[:2], "big") if len(payload) >= 2 else None
                self.closed = f"closed by the server ({code})"
                self._finish()
                return

    def _lines(self, now: float) -> None:
        buffer = self._buffer
        cut = buffer.rfind(b"\n")
        if cut < 0:
            return
        lines = bytes(buffer[:cut]).split(b"\n")
        del buffer[: cut + 1]
        for line in lines:
            if line.startswith(b"data: "):
                payload = line[6:].rstrip(b"\r")
                self.payloads.append((now, payload))
                if _PUBLISHER_LEFT in payload or _SSE_CLOSE in payload:
                    self._finish()
                    return

    def _send(self, opcode: int, payload: bytes) -> None:
        if self.transport is None or self.transport.is_closing():
            return
        mask = os.urandom(4)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        self.transport.write(bytes([0x80 | opcode, 0x80 | len(payload)]) + mask + masked)

    def _finish(self) -> None:
        if not self.done.done():
            self.done.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done() and self.closed is None:
            self.closed = "eof" if exc is None else repr(exc)
        if not self.head.done():
            self.head.set_result(None)
        self._finish()

    def close(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            if self.kind == "ws" and self.closed is None:
                self._send(0x8, (1000).to_bytes(2, "big"))
            self.transport.close()


async def open_reader(kind: str, port: int, room: str, gate: asyncio.Semaphore) -> _Reader:
    """A reader (`ws` or `sse`) of `room` on 127.0.0.1:`port`, its request answered."""
    loop = asyncio.get_running_loop()
    async with gate:  # connections opened a few at a time: the servers' accept queues
        accept: bytes | None = None
        if kind == "ws":
            key = base64.b64encode(os.urandom(16))
            accept = base64.b64encode(hashlib.sha1(key + _WS_GUID).digest())
            request = (
                f"GET /rooms/{room}/ws HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                "Upgrade: websocket\r\nConnection: Upgrade\r\n"
                f"Sec-WebSocket-Key: {key.decode()}\r\nSec-WebSocket-Version: 13\r\n\r\n"
            )
        else:
            request = (
                f"GET /rooms/{room}/events HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                "Accept: text/event-stream\r\n\r\n"
            )
        _, reader = await loop.create_connection(lambda: _Reader(kind, accept), "127.0.0.1", port)
        assert reader.transport is not None
        reader.transport.write(request.encode())
        await asyncio.wait_for(reader.head, 60)
    return reader


async def read_to_end(reader: _Reader) -> None:
    """Until the publisher leaves (or the connection ends); then close it."""
    await reader.done
    reader.close()


def decoded(reader: _Reader) -> tuple[list[tuple[float, dict[str, Any]]], str | None]:
    """(arrival, record) per event, and why the reader was closed early (None: it was not)."""
    records = [(at, json.loads(payload)) for at, payload in reader.payloads]
    closed = reader.closed
    if closed is None and records and records[-1][1].get("type") == "close":
        closed = str(records[-1][1].get("reason", "close"))
    return records, closed
