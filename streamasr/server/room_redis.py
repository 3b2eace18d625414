"""Rooms held in Redis Streams (`serve --rooms redis://HOST:PORT/DB`): every server process
serves every room.

Publishing (server/room_redis_publish.py) appends a room's events to its streams. Each
process reads, per room that has viewers here, the room's `events` stream from the last id
it read (one task, one blocking XREAD at a time) and writes each event to its viewers, as
the in-process broker does. A joining viewer is first kept aside: what the reader brings
meanwhile waits for it while the kept finals after its `after` are read from the `finals`
stream; then the finals, the status and what waited are written, and a viewer never gets a
room_seq twice (server/room_feeds.py QueuedViewer). So a reader that moves to another
server with `?after=` (or Last-Event-ID) misses nothing and repeats nothing. Viewers that
join together share one read of the kept finals (`HistoryRead`), and commands share a
bounded pool of connections a burst waits its turn for: a thousand readers arriving at
once are a few reads, not a thousand connections (redis-py refuses past 100).

Redis unreachable: viewers get a status with `"interrupted": true`; the reader retries and,
once Redis answers, sends a fresh status and goes on from the last id it read.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from streamasr.server import protocol
from streamasr.server.room_broker import (
    BrokerDown,
    RoomFull,
    RoomMissing,
    Viewer,
    register_gauges,
    status_line,
)
from streamasr.server.room_redis_publish import (
    CLAIM_WAIT_S,
    LEASE_MS,
    RENEW_S,
    SCRIPTS,
    RedisPublishing,
    RoomKeys,
    Writer,
)
from streamasr.server.rooms import RoomOptions, shifted

log = logging.getLogger("streamasr")

BLOCK_MS = 5000  # one XREAD's wait for new events
POSITION_WAIT_S = 3.0  # a joining viewer's wait for the room's reader to find its place
COMMAND_CONNECTIONS = 16  # Redis connections for commands (each room's reader has its own)


@dataclass
class HistoryRead:
    """One read of a room's kept finals (after the smallest `after` asked for), with its
    lease and last room_seq, for every viewer that joins before it is sent: a thousand
    readers arriving at once cost a few reads, not a thousand (nor a thousand connections)."""

    after: int
    done: asyncio.Future[tuple[list[Any], bool, int]]


class LocalRoom:
    """A room's viewers in this process and where its reader is in the room's stream."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.keys = RoomKeys.of(name)
        self.viewers: set[Viewer] = set()
        self.joining: dict[Viewer, list[tuple[int | None, str]]] = {}
        self.last_id = "0-0"
        self.last_seq = 0
        self.publisher = False
        self.interrupted = False
        self.positioned = asyncio.Event()
        self.task: asyncio.Task[None] | None = None  # its reader, once the room is found
        self.next_read: HistoryRead | None = None  # the joining viewers' read, not yet sent

    def status(self, took_over: bool = False) -> str:
        return status_line(self.name, self.publisher, self.last_seq, self.interrupted,
                           took_over=took_over)  # fmt: skip

    def fan_out(self, seq: int | None, line: str) -> None:
        for viewer in list(self.viewers):
            if not viewer.write(seq, line):
                self.viewers.discard(viewer)
                viewer.close(
                    protocol.CLOSE_POLICY,
                    "viewer too slow: events not read; reconnect with ?after=LAST_ROOM_SEQ",
                )
        for waiting in self.joining.values():
            waiting.append((seq, line))


class RedisRooms:
    """The rooms' broker over Redis (server/room_broker.py's seam)."""

    def __init__(self, options: RoomOptions, registry: Any = None) -> None:
        import redis.exceptions

        self.options = options
        self.local: dict[str, LocalRoom] = {}
        self.publishers: set[RedisPublishing] = set()
        self.last_seq: dict[str, int] = {}
        self.writer = Writer(self)
        self.unreachable: tuple[type[BaseException], ...] = (
            redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError,
            asyncio.TimeoutError,
        )  # fmt: skip
        self.up = True
        self.closing = False
        self._clients: dict[str, Any] = {}
        self._scripts: dict[str, Any] = {}
        self._tidier: asyncio.Task[None] | None = None
        if registry is not None:
            register_gauges(registry, lambda: len(self.local), self.reader_count,
                            lambda: len(self.publishers))  # fmt: skip

    # -- Redis ------------------------------------------------------------------------------

    def client(self, purpose: str = "commands") -> Any:
        """A client made in this process's event loop (workers fork before it runs)."""
        if purpose not in self._clients:
            import redis.asyncio

            settings: dict[str, Any] = {"decode_responses": True, "socket_connect_timeout": 1.0}
            if purpose == "reader":  # one blocking read at a time per room with viewers here
                self._clients[purpose] = redis.asyncio.Redis.from_url(
                    str(self.options.url), socket_timeout=BLOCK_MS / 1000 + 5,
                    max_connections=self.options.max_rooms + 1, **settings,
                )  # fmt: skip
            else:  # a burst waits its turn for a connection, as long as a command may take
                pool = redis.asyncio.BlockingConnectionPool.from_url(
                    str(self.options.url), socket_timeout=2.0, timeout=2.0,
                    max_connections=COMMAND_CONNECTIONS, **settings,
                )  # fmt: skip
                self._clients[purpose] = redis.asyncio.Redis.from_pool(pool)
        return self._clients[purpose]

    async def run(self, script: str, name: str, publisher: str, *args: Any) -> Any:
        """Run one of the room scripts on room `name`."""
        if script not in self._scripts:
            self._scripts[script] = self.client().register_script(SCRIPTS[script])
        now_ms = int(time.time() * 1000)
        history_ms = int(self.options.history_s * 1000)
        return await self._scripts[script](
            keys=RoomKeys.of(name).all(),
            args=[name, publisher, now_ms, history_ms, LEASE_MS, *args],
        )

    def reached(self, up: bool, error: BaseException | None = None) -> None:
        if up != self.up:
            self.up = up
            if up:
                log.info("rooms: Redis answers again")
            else:
                log.warning("rooms: Redis unreachable (%s); rooms wait for it", error)

    # -- publishing -------------------------------------------------------------------------

    def publishing(
        self, token: str | None, displaced: Callable[[str], None] | None = None
    ) -> RedisPublishing:
        self._start_tidier()
        return RedisPublishing(self, token, displaced)

    async def claim(self, name: str, publisher: str) -> int:
        """-1 when the room limit refuses room `name`; else 0 or 1. Redis unreachable (or
        slow past CLAIM_WAIT_S): the claim is queued and the session goes on."""
        floor = self.last_seq.get(name, 0)

        def claim() -> Any:
            return self.run("claim", name, publisher, self.options.max_rooms, floor)

        if self.up:
            try:
                return int(await asyncio.wait_for(claim(), CLAIM_WAIT_S))
            except self.unreachable as exc:
                self.reached(False, exc)
        self.writer.put(claim)
        return 0

    # -- viewing ----------------------------------------------------------------------------

    def reader_count(self) -> int:
        return sum(len(room.viewers) + len(room.joining) for room in self.local.values())

    async def view(
        self, name: str, viewer: Viewer, after: int, talk: str | None = None
    ) -> Callable[[], None]:
        """`talk` is not looked at: Redis keeps the numbering across server restarts (and a
        publisher's floor across a Redis restart), so `after` is always this room's."""
        if self.reader_count() >= self.options.max_readers:
            raise RoomFull(f"server has {self.options.max_readers} readers (--max-readers)")
        room = self.local.get(name)
        if room is not None and len(room.viewers) >= self.options.max_viewers:
            raise RoomFull(f"room {name} is full ({self.options.max_viewers} viewers, "
                           "--max-viewers); try again later")  # fmt: skip
        room = self._local(name)
        room.joining[viewer] = []
        try:
            kept, lease, seq = await asyncio.shield(self._history(room, after))
        except RoomMissing:
            room.joining.pop(viewer, None)
            self._forget_if_idle(room)
            raise
        except self.unreachable:
            room.joining.pop(viewer, None)
            self._forget_if_idle(room)
            raise BrokerDown() from None
        oldest_ms = (time.time() - self.options.history_s) * 1000
        for entry_id, fields in kept:
            kept_seq = int(entry_id.split("-")[0])
            if kept_seq > after and float(fields.get("at", 0)) >= oldest_ms:
                if not viewer.write(kept_seq, fields["line"]):
                    viewer.close(protocol.CLOSE_POLICY, "viewer too slow for the room's history")
                    break
        room.publisher = lease
        room.last_seq = max(room.last_seq, seq)
        waiting = room.joining.pop(viewer)
        if viewer.write(None, room.status()) and all(viewer.write(*e) for e in waiting):
            room.viewers.add(viewer)
        return lambda: self._leave(room, viewer)

    def _leave(self, room: LocalRoom, viewer: Viewer) -> None:
        room.viewers.discard(viewer)
        self._forget_if_idle(room)

    def _history(self, room: LocalRoom, after: int) -> asyncio.Future[tuple[list[Any], bool, int]]:
        """The room's kept finals after `after` (and maybe some before), whether a publisher
        holds its lease, its last room_seq: the read that joining viewers share."""
        read = room.next_read
        if read is None:
            loop = asyncio.get_running_loop()
            read = room.next_read = HistoryRead(after, loop.create_future())
            read.done.add_done_callback(lambda done: done.cancelled() or done.exception())
            loop.create_task(self._read_history(room, read))
        read.after = min(read.after, after)
        return read.done

    async def _read_history(self, room: LocalRoom, read: HistoryRead) -> None:
        """Find the room (its reader starts then), wait for the reader's place in the room's
        stream, then read: each joining viewer collects live events from that place on, so
        what the read misses comes live and nothing falls between."""
        keys = room.keys
        try:
            if room.task is None:
                if not await self.client().exists(keys.seq):
                    raise RoomMissing(room.name)
                if room.task is None:
                    room.task = asyncio.get_running_loop().create_task(self._read(room))
            await asyncio.wait_for(room.positioned.wait(), POSITION_WAIT_S)
            if room.next_read is read:
                room.next_read = None  # viewers joining from now on share the next read
            async with self.client().pipeline(transaction=False) as pipe:
                pipe.xrange(keys.finals, f"{read.after + 1}-0", "+")
                pipe.exists(keys.lease)
                pipe.get(keys.seq)
                kept, lease, seq = await pipe.execute()
            if seq is None:  # the room expired meanwhile
                raise RoomMissing(room.name)
        except BaseException as exc:
            if room.next_read is read:
                room.next_read = None
            if isinstance(exc, asyncio.CancelledError):
                read.done.cancel()
                raise
            read.done.set_exception(exc)
        else:
            read.done.set_result((kept, bool(lease), int(seq)))

    def _local(self, name: str) -> LocalRoom:
        room = self.local.get(name)
        if room is None:
            room = self.local[name] = LocalRoom(name)
            self._start_tidier()
        return room

    def _forget_if_idle(self, room: LocalRoom) -> None:
        if not room.viewers and not room.joining and self.local.get(room.name) is room:
            del self.local[room.name]
            if room.task is not None:
                room.task.cancel()

    async def _read(self, room: LocalRoom) -> None:
        """The room's events from Redis to this process's viewers, in the stream's order."""
        reader = self.client("reader")
        pause_s = 0.2
        while not self.closing:
            try:
                if not room.positioned.is_set():
                    newest = await reader.xrevrange(room.keys.events, "+", "-", count=1)
                    room.last_id = newest[0][0] if newest else "0-0"
                    room.publisher = bool(await reader.exists(room.keys.lease))
                    room.positioned.set()
                got = await reader.xread({room.keys.events: room.last_id}, count=1000,
                                         block=BLOCK_MS)  # fmt: skip
            except self.unreachable as exc:
                if not room.interrupted:
                    log.warning("room %s: Redis unreachable (%s)", room.name, exc)
                    room.interrupted = True
                    room.fan_out(None, room.status())
                await asyncio.sleep(pause_s)
                pause_s = min(5.0, pause_s * 2)
                continue
            pause_s = 0.2
            if room.interrupted:
                room.interrupted = False
                try:
                    room.publisher = bool(await reader.exists(room.keys.lease))
                except self.unreachable:
                    pass
                room.fan_out(None, room.status())
            for _, entries in got or ():
                for entry_id, fields in entries:
                    room.last_id = entry_id
                    self._deliver(room, int(entry_id.split("-")[0]), fields)

    def _deliver(self, room: LocalRoom, seq: int, fields: dict[str, str]) -> None:
        if "line" in fields:
            room.last_seq = max(room.last_seq, seq)
            room.fan_out(seq, fields["line"])
        else:
            room.publisher = fields.get("status") in ("1", "2")  # 2: a new one took over
            room.last_seq = max(room.last_seq, seq)
            room.fan_out(None, room.status(took_over=fields.get("status") == "2"))

    # -- transcripts ------------------------------------------------------------------------

    async def finals(self, name: str) -> tuple[int, list[dict[str, Any]]]:
        keys = RoomKeys.of(name)
        try:
            async with self.client().pipeline(transaction=False) as pipe:
                pipe.get(keys.seq)
                pipe.xrange(keys.finals, "-", "+")
                seq, kept = await pipe.execute()
        except self.unreachable:
            raise BrokerDown() from None
        if seq is None:
            raise RoomMissing(name)
        oldest_ms = (time.time() - self.options.history_s) * 1000
        records = [shifted(json.loads(fields["line"]), float(fields["base"]))
                   for _, fields in kept if float(fields["at"]) >= oldest_ms]  # fmt: skip
        return int(seq), records

    # -- upkeep and the stop ----------------------------------------------------------------

    def _start_tidier(self) -> None:
        if self._tidier is None or self._tidier.done():
            self._tidier = asyncio.get_running_loop().create_task(self._tidy())

    async def _tidy(self) -> None:
        """Renew the publishers' leases; keep rooms with viewers here from expiring."""
        while not self.closing:
            await asyncio.sleep(RENEW_S)
            for publishing in list(self.publishers):
                if publishing.room is not None:
                    self.writer.put(self._renewal(publishing, publishing.room))
            for room in list(self.local.values()):
                self.writer.put(self._touch(room.name))
                for viewer in list(room.viewers):
                    viewer.keepalive()

    def _renewal(self, publishing: RedisPublishing, name: str) -> Callable[[], Any]:
        async def renew() -> None:
            if await self.run("renew", name, publishing.id) == 0:
                publishing.displaced(name)

        return renew

    def _touch(self, name: str) -> Callable[[], Any]:
        return lambda: self.run("touch", name, "")

    def close(self, reason: str = "server shutting down") -> None:
        self.closing = True
        for room in list(self.local.values()):
            for viewer in list(room.viewers) + list(room.joining):
                viewer.close(protocol.CLOSE_GOING_AWAY, reason)
            room.viewers.clear()
            if room.task is not None:
                room.task.cancel()
        if self._tidier is not None:
            self._tidier.cancel()

    async def close_when(self, done: Callable[[], bool], poll_s: float = 0.1) -> None:
        """Close the viewers once the publishers are gone and their writes sent (at most a
        few seconds: Redis may be unreachable), and the readers have read them."""
        while not done():
            await asyncio.sleep(poll_s)
        await self.writer.flush(3.0)
        await asyncio.sleep(0.3)
        self.close()
