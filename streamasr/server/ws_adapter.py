"""The WebSocket transport's encoding: the scheduler's event objects as JSON lines.

The scheduler delivers events (streamasr/events.py) and, last, the summary; this adapter
writes each as the JSON line `streamasr file --format jsonl` prints, with the wire version
(`"v"`, events.WIRE_VERSION) first, and the session's `partials` choice (full or delta).
Another transport is another adapter like this one: the scheduler does not change.
"""

from __future__ import annotations

from collections.abc import Callable

from streamasr.events import WIRE_VERSION, StreamSummary
from streamasr.render import JsonlRenderer
from streamasr.server.protocol import SessionConfig
from streamasr.server.scheduler import Delivered


class _Lines:
    """A text sink for JsonlRenderer: keeps each JSON line (without its newline)."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def write(self, text: str) -> int:
        self.lines.extend(line for line in text.split("\n") if line)
        return len(text)

    def flush(self) -> None:
        pass

    def take(self) -> list[str]:
        lines, self.lines = self.lines, []
        return lines


def jsonl_delivery(
    config: SessionConfig, send: Callable[[list[str]], None]
) -> Callable[[list[Delivered]], None]:
    """One utterance's `deliver` callback: its events encoded as JSON lines, then `send`."""
    lines = _Lines()
    renderer = JsonlRenderer(lines, config.partials, WIRE_VERSION)  # type: ignore[arg-type]
    renderer.begin(config.source)

    def deliver(items: list[Delivered]) -> None:
        for item in items:
            if isinstance(item, StreamSummary):
                renderer.end(item)
            else:
                renderer.event(item)
        encoded = lines.take()
        if encoded:
            send(encoded)

    return deliver
