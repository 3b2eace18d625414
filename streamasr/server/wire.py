"""The wire records: the scheduler's event objects as the JSON objects clients read.

The scheduler delivers events (streamasr/session/events.py) and, last, the summary; a
`WireEncoder` makes each the record `streamasr file --format jsonl` prints, with the wire
version (`"v"`, events.WIRE_VERSION) first and the session's `partials` choice (full or
delta). The WebSocket protocol sends them as lines; rooms (server/rooms.py) number them for
their viewers, whatever protocol published them.
"""

from __future__ import annotations

import io

from streamasr.output.render import JsonlRenderer
from streamasr.server.protocol import SessionConfig
from streamasr.server.utterance import Delivered
from streamasr.session.events import WIRE_VERSION, StreamSummary

#: One event's or summary's JSON object, as written on the wire.
Record = dict[str, object]


class _Records(JsonlRenderer):
    """JsonlRenderer's records, kept instead of written."""

    def __init__(self, partials: str) -> None:
        super().__init__(io.StringIO(), partials, WIRE_VERSION)
        self.records: list[Record] = []

    def write_record(self, record: Record) -> None:
        self.records.append(record)


class WireEncoder:
    """One utterance's events as wire records (a `partials: delta` session's partials
    carry what changed since its previous one, so one encoder serves one utterance)."""

    def __init__(self, config: SessionConfig) -> None:
        self._renderer = _Records(config.partials)
        self._renderer.begin(config.source)

    def records(self, items: list[Delivered]) -> list[Record]:
        renderer = self._renderer
        for item in items:
            if isinstance(item, StreamSummary):
                renderer.end(item)
            else:
                renderer.event(item)
        records, renderer.records = renderer.records, []
        return records
