"""The seam between rooms and what holds them: one broker per server process.

The feeds (server/room_feeds.py) and the sessions (server/client_session.py) see rooms only
through a `RoomBroker`. The in-process broker (server/rooms.py) is the default: a room lives
in the process its publisher reached. `--rooms redis://HOST:PORT/DB` puts every room in
Redis Streams (server/room_redis.py), so a publisher on one server process and readers on
any other read the same room.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, Protocol

from streamasr.server import protocol

#: The environment variable that names the rooms' broker when --rooms is not given.
ROOMS_URL_ENV = "STREAMASR_ROOMS_URL"
#: Set to 1 (a measurement, off by default), each event readers get carries CLOCK_FIELD:
#: the server's monotonic clock when the engine's step handed the event over. Readers on the
#: same machine (scripts/room_load.py) measure their lag from it, whichever process served
#: them and whether or not the event went through Redis.
ROOM_CLOCK_ENV = "STREAMASR_ROOM_CLOCK"
CLOCK_FIELD = "server_monotonic_s"


class RoomMissing(Exception):
    """No one has published to the room (or it expired)."""


class RoomFull(Exception):
    """The room, or the server's readers as a whole, are at their limit: `reason` says which."""


class BrokerDown(Exception):
    """The rooms' broker cannot be reached now."""


class Viewer(Protocol):
    """One subscriber: writes without waiting; False when it cannot take more (dropped)."""

    def write(self, seq: int | None, line: str) -> bool: ...

    def close(self, code: int, reason: str) -> None: ...

    def keepalive(self) -> None: ...


class PublishingSeam(Protocol):
    """A session's part in a room (what ClientSession calls, whatever the broker)."""

    async def begin(self, name: str | None, partials: str) -> None: ...

    def deliver(self, records: list[dict[str, Any]]) -> None: ...

    def end(self) -> None: ...


class RoomBroker(Protocol):
    """Every room a server process serves: publishing, viewing, transcripts, the stop."""

    options: Any  # RoomOptions

    def publishing(
        self, token: str | None, displaced: Callable[[str], None] | None = None
    ) -> PublishingSeam:
        """A session's part in rooms; `displaced(room)` is called when another publisher
        takes over the room it publishes to."""
        ...

    async def view(
        self, name: str, viewer: Viewer, after: int, talk: str | None = None
    ) -> Callable[[], None]:
        """Send the kept finals after `after`, the status, then the live events to `viewer`;
        returns the call that ends the view. `talk`: the talk `after` was counted in; another
        (a restarted server numbers from 1 again) means all of this one, its status first.
        RoomMissing, RoomFull, BrokerDown."""
        ...

    async def finals(self, name: str) -> tuple[int, list[dict[str, Any]]]:
        """The last room_seq and the kept finals, times on the room's clock. RoomMissing."""
        ...

    def reader_count(self) -> int: ...

    def close(self, reason: str = "server shutting down") -> None: ...

    async def close_when(self, done: Callable[[], bool], poll_s: float = 0.1) -> None: ...


def room_key(name: str) -> str:
    """A room's name as a broker key; only names the protocol allows get here (no key
    injection: a name is letters, digits, '-' and '_')."""
    if not protocol.ROOM_NAME.fullmatch(name):
        raise ValueError(f"not a room name: {name!r}")
    return f"streamasr:room:{name}"


def rooms_url(given: str | None) -> str | None:
    """--rooms, else $STREAMASR_ROOMS_URL, else None (in-process rooms)."""
    return given or os.environ.get(ROOMS_URL_ENV) or None


def status_line(
    name: str, publisher: bool, last_seq: int, interrupted: bool = False, talk: str | None = None,
    took_over: bool = False,
) -> str:
    """A room's status event (whether someone publishes, the last room_seq so far, and
    whether the broker is unreachable: the room is interrupted). `talk`: the numbering's
    identity, so a reader tells a restarted room's room_seq 1 from an old one. `took_over`:
    a new speaker just displaced the one before."""
    import json

    record: dict[str, Any] = {
        "type": "status", "room": name, "publisher": publisher, "last_room_seq": last_seq,
    }  # fmt: skip
    if talk is not None:
        record["talk"] = talk
    if interrupted:
        record["interrupted"] = True
    if took_over:
        record["took_over"] = True
    return json.dumps(record)


def register_gauges(
    registry: Any,
    rooms: Callable[[], int],
    viewers: Callable[[], int],
    publishers: Callable[[], int],
) -> None:
    """The rooms' gauges on the server's Prometheus registry (this process's share)."""
    from prometheus_client import Gauge

    Gauge("streamasr_rooms", "Rooms (with a publisher, viewers or kept finals)",
          registry=registry).set_function(rooms)  # fmt: skip
    Gauge("streamasr_room_viewers", "Viewers of all rooms (WebSocket and SSE)",
          registry=registry).set_function(viewers)  # fmt: skip
    Gauge("streamasr_room_publishers", "Rooms with a publisher connected",
          registry=registry).set_function(publishers)  # fmt: skip
