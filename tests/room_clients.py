"""Viewers of a `streamasr serve` room for the tests: WebSocket and Server-Sent Events."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

Until = Callable[[dict[str, Any]], bool]


def publisher_gone(record: dict[str, Any]) -> bool:
    return record.get("type") == "status" and record.get("publisher") is False


@dataclass
class Seen:
    """What one viewer received, and how its feed ended (close code and reason)."""

    events: list[dict[str, Any]] = field(default_factory=list)
    code: int | None = None
    reason: str = ""

    @property
    def finals(self) -> list[dict[str, Any]]:
        return [event for event in self.events if event.get("type") == "final"]

    @property
    def seqs(self) -> list[int]:
        return [event["room_seq"] for event in self.events if "room_seq" in event]


async def ws_view(
    url: str, until: Until, seen: Seen | None = None, skip: int = 0, ssl: Any = None
) -> Seen:
    """Read a room's WebSocket feed until `until(event)` is true (past `skip` matches)."""
    seen = seen or Seen()
    async with connect(url, **({"ssl": ssl} if ssl is not None else {})) as ws:
        try:
            while True:
                record = json.loads(await ws.recv())
                seen.events.append(record)
                if until(record):
                    if skip == 0:
                        return seen
                    skip -= 1
        except ConnectionClosed as exc:
            if exc.rcvd is not None:
                seen.code, seen.reason = exc.rcvd.code, exc.rcvd.reason
    return seen


async def ws_refusal(url: str) -> tuple[int | None, str]:
    """The close code and reason of a feed that is closed before any event."""
    seen = await ws_view(url, lambda record: True)
    return seen.code, seen.reason


async def sse_view(
    port: int, path: str, until: Until, headers: dict[str, str] | None = None,
    seen: Seen | None = None, skip: int = 0, ssl: Any = None,
) -> tuple[int, Seen]:  # fmt: skip
    """Read a room's SSE feed until `until(event)`; the HTTP status and what came (an error
    status: its body as the reason). `ssl`: a client context for https."""
    seen = seen or Seen()
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ssl)
    lines = [f"GET {path} HTTP/1.1", f"Host: 127.0.0.1:{port}", "Accept: text/event-stream"]
    lines += [f"{key}: {value}" for key, value in (headers or {}).items()]
    writer.write(("\r\n".join(lines) + "\r\n\r\n").encode())
    try:
        status = int((await reader.readline()).split()[1])
        while (await reader.readline()).strip():
            pass  # headers
        if status != 200:
            seen.reason = (await reader.read()).decode()
            return status, seen
        while True:
            line = await reader.readline()
            if not line:
                return status, seen
            if line.startswith(b"data: "):
                record = json.loads(line[6:])
                if record.get("type") == "close":
                    seen.code, seen.reason = record["code"], record["reason"]
                    return status, seen
                seen.events.append(record)
                if until(record):
                    if skip == 0:
                        return status, seen
                    skip -= 1
    finally:
        writer.close()
