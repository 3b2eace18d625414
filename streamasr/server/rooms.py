"""Rooms: one publishing session's events fanned out to many viewers.

A session that names a room in its config publishes there: each partial and final it
produces (the JSON objects `streamasr file --format jsonl` prints) is numbered with the
room's own sequence number (`room_seq`) and written to every viewer of the room. Viewers
cost no engine time: they receive events already made for the publisher.

Each viewer is written to at once, without a task of its own; its transport's write buffer
is its send queue, bounded at `RoomOptions.viewer_buffer_bytes`: a viewer that lets it fill
(a slow reader) is dropped, never the room. The last finals (at most `history_finals`, none
older than `history_s`) are kept, so a late viewer gets them first and a viewer that
reconnects with the last `room_seq` it saw gets exactly the finals after it: the history is
copied and the viewer added in one step of the event loop, so nothing falls between.

The feeds themselves (WebSocket, Server-Sent Events, the page, the transcripts) are in
server/room_feeds.py.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import os
import secrets
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

from streamasr.backends.options import Setting
from streamasr.server import protocol
from streamasr.server.limits import load_token
from streamasr.server.protocol import ProtocolError
from streamasr.server.room_broker import (
    ROOM_CLOCK_ENV,
    RoomFull,
    RoomMissing,
    Viewer,
    register_gauges,
    rooms_url,
    status_line,
)

log = logging.getLogger("streamasr")

#: Event types a room passes on; the others (first_token, endpoint, summary) are the
#: publisher's own.
FANNED_OUT = ("partial", "final")
#: How often a room's idle viewers are sent a keepalive and old history is let go.
KEEPALIVE_S = 15.0
#: Close codes of the viewer feeds (4000-4999: the application's own, RFC 6455 7.4.2); the
#: page says a plain message for each.
CLOSE_TOKEN = 4401
CLOSE_UNKNOWN = 4404
CLOSE_FULL = 4429


@dataclass(frozen=True)
class RoomOptions:
    """The rooms of one server; the limits have command-line options of the same name."""

    max_viewers: int = 1000  # per room
    history_finals: int = 1000  # finals kept for late and reconnecting viewers
    history_s: float = 1800.0  # ... none older than this
    max_rooms: int = 256
    viewer_buffer_bytes: int = 1 << 20  # a viewer's unsent bytes before it is dropped
    publish_token: str | None = None  # None: any session the server admits may publish
    view_token: str | None = None  # None: viewing is open
    max_readers: int = 4000  # viewers of all rooms of this process together
    url: str | None = None  # the broker: None in-process, redis://HOST:PORT/DB in Redis
    clock_stamps: bool = False  # events carry the server's clock ($STREAMASR_ROOM_CLOCK=1)

    @classmethod
    def from_options(cls, publish_token: str | None, view_token: str | None,
                     url: str | None = None, **limits: int) -> RoomOptions:  # fmt: skip
        """The rooms' settings given on the command line: the limits checked, each token
        read from the file named; the broker --rooms, else $STREAMASR_ROOMS_URL."""
        for setting in ROOM_SETTINGS:
            setting.check(limits.get(setting.field))
        publish = load_token(publish_token, "--publish-token-file") if publish_token else None
        view = load_token(view_token, "--view-token-file") if view_token else None
        return cls(**limits, publish_token=publish, view_token=view, url=rooms_url(url),
                   clock_stamps=os.environ.get(ROOM_CLOCK_ENV) == "1")  # fmt: skip


#: The rooms' settings on the command line (`streamasr serve`); the default shown is
#: RoomOptions'.
ROOM_SETTINGS = (
    Setting("max_viewers", "--max-viewers",
            "Viewers per room (/rooms/NAME).", (1, 100_000)),
    Setting("history_finals", "--room-history",
            "Finals kept for late viewers.", (1, 100_000)),
    Setting("publish_token", "--publish-token-file",
            "Token file to publish to a room (none: anyone).", type=str | None),
    Setting("view_token", "--view-token-file",
            "Token file viewers send (?token=); none: open.", type=str | None),
    Setting("url", "--rooms",
            "redis://HOST:PORT/DB: rooms every worker shares.",
            type=str | None),
    Setting("max_rooms", "--max-rooms",
            "Rooms at most (else 1013).", (1, 1_000_000)),
    Setting("max_readers", "--max-readers",
            "Viewers per process (else 4429).", (1, 1_000_000)),
)  # fmt: skip


def presented_token(headers: Any, query: str) -> str | None:
    """The token a request presents: `Authorization: Bearer TOKEN`, else `?token=TOKEN`."""
    auth = headers.get("Authorization", "")
    if auth.lower().startswith("bearer "):
        return str(auth[7:].strip())
    values = parse_qs(query).get("token")
    return values[0] if values else None


def token_matches(expected: str | None, presented: str | None) -> bool:
    """True when no token is set, or `presented` equals it (constant-time compare)."""
    if expected is None:
        return True
    if presented is None:
        return False
    return hmac.compare_digest(presented.encode("utf-8"), expected.encode("utf-8"))


@dataclass(frozen=True)
class HistoryFinal:
    """One kept final: its room sequence number, its line as sent, when, and the audio time
    the room had reached when its utterance began (transcripts put utterances end to end)."""

    seq: int
    line: str
    record: dict[str, Any]
    at_s: float  # monotonic
    base_s: float


class Room:
    """One named room: its publisher (at most one at a time), viewers and history."""

    def __init__(self, name: str, options: RoomOptions) -> None:
        self.name = name
        self.options = options
        self.seq = 0
        self.talk = secrets.token_hex(6)  # this numbering's identity (a restart makes another)
        self.history: deque[HistoryFinal] = deque(maxlen=options.history_finals)
        self.publisher: Publishing | None = None
        self.viewers: set[Viewer] = set()
        self.touched_s = time.monotonic()
        self._base_s = 0.0  # room audio time at the current utterance's start
        self._end_s = 0.0  # room audio time of the last final's end

    # -- publishing -------------------------------------------------------------------------

    def begin_utterance(self) -> None:
        """A new utterance of the publisher: its audio time starts again at 0."""
        self._base_s = self._end_s

    def publish_records(self, records: list[dict[str, Any]]) -> None:
        """Number the partials and finals among the publisher's records (as the WebSocket
        adapter makes them, server/wire.py) and write them to every viewer."""
        for event in records:
            if event.get("type") not in FANNED_OUT:
                continue
            self.seq += 1
            record = {**event, "room_seq": self.seq}
            text = json.dumps(record, ensure_ascii=False)
            if record["type"] == "final":
                now = time.monotonic()
                self.history.append(HistoryFinal(self.seq, text, record, now, self._base_s))
                end = record.get("end_s")
                if isinstance(end, (int, float)):
                    self._end_s = max(self._end_s, self._base_s + end)
            self._fan_out(self.seq, text)
        self.touched_s = time.monotonic()

    def _fan_out(self, seq: int | None, text: str) -> None:
        for viewer in list(self.viewers):
            if not viewer.write(seq, text):
                self.drop(viewer)

    def drop(self, viewer: Viewer) -> None:
        """A viewer that cannot keep up: closed, the room goes on."""
        if viewer in self.viewers:
            self.viewers.discard(viewer)
            viewer.close(
                protocol.CLOSE_POLICY,
                "viewer too slow: events not read; reconnect with ?after=LAST_ROOM_SEQ",
            )

    def status(self, took_over: bool = False) -> str:
        """The room's status event: whether someone publishes, the last room_seq so far."""
        return status_line(self.name, self.publisher is not None, self.seq, talk=self.talk,
                           took_over=took_over)  # fmt: skip

    def set_publisher(self, publisher: Publishing | None, took_over: bool = False) -> None:
        self.publisher = publisher
        self.touched_s = time.monotonic()
        self._fan_out(None, self.status(took_over))

    # -- viewing ----------------------------------------------------------------------------

    def join(self, viewer: Viewer, after: int, talk: str | None = None) -> None:
        """Send the kept finals after `after`, then the status, and add the viewer: in one
        step, so no event falls between the history and the live feed. A viewer that counted
        `after` in another talk gets the status first, then every kept final."""
        if len(self.viewers) >= self.options.max_viewers:
            viewer.close(
                CLOSE_FULL,
                f"room {self.name} is full ({self.options.max_viewers} viewers, "
                "--max-viewers); try again later",
            )
            return
        if talk is not None and talk != self.talk:
            after = 0
            if not viewer.write(None, self.status()):
                return
        for kept in self.history:
            if kept.seq > after and not viewer.write(kept.seq, kept.line):
                viewer.close(protocol.CLOSE_POLICY, "viewer too slow for the room's history")
                return
        if not viewer.write(None, self.status()):
            return
        self.viewers.add(viewer)
        self.touched_s = time.monotonic()

    def leave(self, viewer: Viewer) -> None:
        self.viewers.discard(viewer)
        self.touched_s = time.monotonic()

    def finals(self) -> list[dict[str, Any]]:
        """The kept finals' records, times moved onto the room's clock (utterance after
        utterance), for the transcripts."""
        return [shifted(kept.record, kept.base_s) for kept in self.history]

    def tidy(self, now_s: float) -> None:
        """Let go of history older than history_s; keep idle viewers' connections alive."""
        while self.history and now_s - self.history[0].at_s > self.options.history_s:
            self.history.popleft()
        for viewer in list(self.viewers):
            viewer.keepalive()


def shifted(record: dict[str, Any], base_s: float) -> dict[str, Any]:
    if not base_s:
        return record
    moved = dict(record)
    for key in ("start_s", "end_s"):
        if isinstance(moved.get(key), (int, float)):
            moved[key] = moved[key] + base_s
    if isinstance(moved.get("token_times_s"), list):
        moved["token_times_s"] = [t + base_s for t in moved["token_times_s"]]
    if isinstance(moved.get("words"), list):
        moved["words"] = [
            {**w, "start_s": w["start_s"] + base_s, "end_s": w["end_s"] + base_s}
            for w in moved["words"]
        ]
    return moved


class Rooms:
    """Every room of one server, by name."""

    def __init__(self, options: RoomOptions, registry: Any = None) -> None:
        """`registry`: the server's Prometheus registry, to count rooms and viewers in."""
        self.options = options
        self.rooms: dict[str, Room] = {}
        self._tidier: asyncio.Task[None] | None = None
        self.closing = False
        if registry is not None:
            self._metrics(registry)

    def _metrics(self, registry: Any) -> None:
        register_gauges(
            registry, lambda: len(self.rooms), self.reader_count,
            lambda: sum(room.publisher is not None for room in self.rooms.values()),
        )  # fmt: skip

    # -- the broker seam (server/room_broker.py) ----------------------------------------------

    def publishing(
        self, token: str | None, displaced: Callable[[str], None] | None = None
    ) -> Publishing:
        return Publishing(self, token, displaced)

    def reader_count(self) -> int:
        return sum(len(room.viewers) for room in self.rooms.values())

    async def view(
        self, name: str, viewer: Viewer, after: int, talk: str | None = None
    ) -> Callable[[], None]:
        room = self.rooms.get(name)
        if room is None:
            raise RoomMissing(name)
        if self.reader_count() >= self.options.max_readers:
            raise RoomFull(f"server has {self.options.max_readers} readers (--max-readers)")
        if len(room.viewers) >= self.options.max_viewers:
            raise RoomFull(f"room {name} is full ({self.options.max_viewers} viewers, "
                           "--max-viewers); try again later")  # fmt: skip
        room.join(viewer, after, talk)
        return lambda: room.leave(viewer)

    async def finals(self, name: str) -> tuple[int, list[dict[str, Any]]]:
        room = self.rooms.get(name)
        if room is None:
            raise RoomMissing(name)
        return room.seq, room.finals()

    def get(self, name: str) -> Room | None:
        return self.rooms.get(name)

    def claim(self, name: str, publisher: Publishing, token: str | None) -> Room:
        """`publisher` publishes to room `name` from now on (the room is made if new, or
        continued); ProtocolError when its token is refused.

        A new publisher takes over from one still connected, which is told (its session is
        closed, 4409, its last final sent first) and the readers' status says so: a speaker
        whose connection dropped without a close, and who connects again, is not kept out
        until the server notices the old connection is dead."""
        check_publish_token(self.options, name, token)
        room = self.rooms.get(name)
        if room is None:
            if len(self.rooms) >= self.options.max_rooms:
                raise ProtocolError(
                    protocol.CLOSE_TRY_LATER,
                    f"server has {self.options.max_rooms} rooms already (--max-rooms); "
                    "try again later",
                )
            room = self.rooms[name] = Room(name, self.options)
            self._start_tidier()
        previous = room.publisher
        if previous is not publisher:
            if previous is not None:
                log.info("room %s: a new publisher takes over", name)
                previous.room = None
                if previous.displaced is not None:
                    previous.displaced(name)
            room.set_publisher(publisher, took_over=previous is not None)
        return room

    def release(self, room: Room, publisher: Publishing) -> None:
        """The publisher left (closed, or moved to another room): the room says so."""
        if room.publisher is publisher:
            room.set_publisher(None)

    def _start_tidier(self) -> None:
        if self._tidier is None or self._tidier.done():
            self._tidier = asyncio.get_running_loop().create_task(self._tidy())

    async def _tidy(self) -> None:
        while self.rooms and not self.closing:
            await asyncio.sleep(KEEPALIVE_S)
            now = time.monotonic()
            for name, room in list(self.rooms.items()):
                room.tidy(now)
                idle = room.publisher is None and not room.viewers
                if idle and now - room.touched_s > self.options.history_s:
                    del self.rooms[name]

    def close(self, reason: str = "server shutting down") -> None:
        """Close every viewer (the server stops)."""
        self.closing = True
        for room in self.rooms.values():
            for viewer in list(room.viewers):
                room.viewers.discard(viewer)
                viewer.close(protocol.CLOSE_GOING_AWAY, reason)
        if self._tidier is not None:
            self._tidier.cancel()

    async def close_when(self, done: Callable[[], bool], poll_s: float = 0.1) -> None:
        """Close the viewers once `done()` (the publishers have sent their last finals)."""
        while not done():
            await asyncio.sleep(poll_s)
        self.close()


class Publishing:
    """A connection's part in a room: claims it per utterance, forwards its lines."""

    def __init__(
        self, rooms: Rooms, token: str | None, displaced: Callable[[str], None] | None = None
    ) -> None:
        self.rooms = rooms
        self.token = token
        self.displaced = displaced  # told the room's name when another publisher takes over
        self.room: Room | None = None

    async def begin(self, name: str | None, partials: str) -> None:
        """An utterance's config: publish to `name` (None: to no room)."""
        check_publishable(name, partials)
        if self.room is not None and self.room.name != name:
            self.end()
        if name is not None:
            self.room = self.rooms.claim(name, self, self.token)
            self.room.begin_utterance()

    def deliver(self, records: list[dict[str, Any]]) -> None:
        if self.room is not None:
            self.room.publish_records(records)

    def end(self) -> None:
        """The connection closes (or moves to another room)."""
        if self.room is not None:
            self.rooms.release(self.room, self)
        self.room = None


#: Why a session of a server without rooms cannot publish.
NO_ROOMS = (
    "this server has no rooms (started with --workers N): start it with --rooms "
    "redis://HOST:PORT/DB, or with one worker"
)


def check_publishable(name: str | None, partials: str) -> None:
    """ProtocolError for a config that names a room with partials a room cannot carry."""
    if name is not None and partials != "full":
        raise ProtocolError(
            protocol.CLOSE_INVALID,
            'config: a room needs partials "full" (viewers may join at any partial)',
        )


def check_publish_token(options: RoomOptions, name: str, token: str | None) -> None:
    """ProtocolError when the publish token is set and `token` is not it."""
    if not token_matches(options.publish_token, token):
        raise ProtocolError(
            protocol.CLOSE_POLICY,
            f"room {name}: publishing needs the publish token "
            "(--publish-token-file); send it as the bearer token",
        )
