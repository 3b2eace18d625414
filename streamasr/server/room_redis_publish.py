"""Publishing to a room held in Redis: the room's keys, its scripts, and the writes queue.

A room is a few keys under `streamasr:room:NAME`: `seq` (the last room_seq), `events` (a
stream of every partial, final and status, trimmed to the last few thousand: the live
feed), `finals` (a stream of the finals, trimmed to --room-history: the history), `lease`
(the publisher's id, with an expiry its server renews), `base` and `end` (the room's audio
clock, for transcripts). Each write is one Lua script, so numbering, history and lease
change together. Entry ids are `room_seq-0` (a status: `room_seq-N`), so a stream's order
is the room's order and any server resumes it from the last id it read.

A session never waits on Redis while it speaks: its writes go into one ordered queue per
process, sent in the background; Redis unreachable, they wait there (the oldest go past
QUEUE_LIMIT) and are sent once it returns.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from streamasr.server import protocol
from streamasr.server.protocol import ProtocolError
from streamasr.server.room_broker import room_key
from streamasr.server.rooms import FANNED_OUT, check_publish_token, check_publishable

if TYPE_CHECKING:
    from streamasr.server.room_redis import RedisRooms

log = logging.getLogger("streamasr")

ROOMS_SET = "streamasr:rooms"
LEASE_MS = 15_000  # a publisher's lease; its server renews it every RENEW_S
RENEW_S = 5.0
EVENTS_KEPT = 5000  # entries of a room's live stream (about, partials included)
QUEUE_LIMIT = 20_000  # writes waiting while Redis is unreachable
CLAIM_WAIT_S = 1.0  # how long a session's start waits to learn whether its room is refused


@dataclass(frozen=True)
class RoomKeys:
    seq: str
    events: str
    finals: str
    lease: str
    base: str
    end: str

    @classmethod
    def of(cls, name: str) -> RoomKeys:
        prefix = room_key(name)
        return cls(*(f"{prefix}:{part}" for part in ("seq", "events", "finals", "lease",
                                                      "base", "end")))  # fmt: skip

    def all(self) -> list[str]:
        return [self.seq, self.events, self.finals, self.lease, self.base, self.end, ROOMS_SET]


# KEYS: seq, events, finals, lease, base, end, rooms; ARGV: name, publisher, now_ms,
# history_ms, lease_ms, then each script's own.
PRELUDE = f"""
local seq_k, events_k, finals_k, lease_k = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local base_k, end_k, rooms_k = KEYS[5], KEYS[6], KEYS[7]
local name, id, now, history = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local lease_ms, events_kept = ARGV[5], '{EVENTS_KEPT}'
local function status(flag)
  local seq = tonumber(redis.call('GET', seq_k) or '0')
  redis.call('XADD', events_k, 'MAXLEN', '~', events_kept, seq .. '-*', 'status', flag)
end
local function touch()
  redis.call('ZADD', rooms_k, now, name)
  for _, k in ipairs({{seq_k, events_k, finals_k, base_k, end_k}}) do
    redis.call('PEXPIRE', k, history)
  end
end
"""
# ARGV[6]: the room limit, ARGV[7]: the publisher's last room_seq (the numbering's floor)
CLAIM = """
if not redis.call('ZSCORE', rooms_k, name) then
  redis.call('ZREMRANGEBYSCORE', rooms_k, '-inf', now - history)
  if redis.call('ZCARD', rooms_k) >= tonumber(ARGV[6]) then return -1 end
end
redis.call('SET', seq_k, ARGV[7], 'NX')
local before = redis.call('GET', lease_k)
redis.call('SET', lease_k, id, 'PX', lease_ms)
if before ~= id then status(before and '2' or '1') end
touch()
return before and 1 or 0
"""
# ARGV[6]: floor, ARGV[7]: finals kept, then (type, line without room_seq, end_s) each event
PUBLISH = """
local holder = redis.call('GET', lease_k)
if holder and holder ~= id then return -1 end
local seq = tonumber(redis.call('GET', seq_k) or '0')
if seq < tonumber(ARGV[6]) then seq = tonumber(ARGV[6]) end
redis.call('SET', seq_k, seq)
if not holder then
  redis.call('SET', lease_k, id, 'PX', lease_ms)
  status('1')
end
local base = tonumber(redis.call('GET', base_k) or '0')
local last_end = tonumber(redis.call('GET', end_k) or '0')
for i = 8, #ARGV, 3 do
  seq = seq + 1
  local line = string.sub(ARGV[i + 1], 1, -2) .. ', "room_seq": ' .. seq .. '}'
  local entry = seq .. '-0'
  redis.call('XADD', events_k, 'MAXLEN', '~', events_kept, entry, 'line', line)
  if ARGV[i] == 'final' then
    redis.call('XADD', finals_k, 'MAXLEN', ARGV[7], entry, 'line', line, 'at', tostring(now),
               'base', tostring(base))
    local e = tonumber(ARGV[i + 2])
    if e and base + e > last_end then last_end = base + e end
  end
end
redis.call('SET', seq_k, seq)
redis.call('SET', end_k, tostring(last_end))
for _, e in ipairs(redis.call('XRANGE', finals_k, '-', '+', 'COUNT', 8)) do
  if tonumber(e[2][4]) < now - history then redis.call('XDEL', finals_k, e[1]) end
end
touch()
return seq
"""
BEGIN = """
local holder = redis.call('GET', lease_k)
if holder and holder ~= id then return -1 end
redis.call('SET', base_k, redis.call('GET', end_k) or '0')
return 1
"""
RELEASE = """
if redis.call('GET', lease_k) == id then
  redis.call('DEL', lease_k)
  status('0')
end
return 1
"""
RENEW = """
local holder = redis.call('GET', lease_k)
if holder and holder ~= id then return 0 end
redis.call('SET', lease_k, id, 'PX', lease_ms)
if not holder then status('1') end
touch()
return 1
"""
TOUCH = """
if redis.call('EXISTS', seq_k) == 1 then touch() end
return 1
"""
SCRIPTS = {
    name: PRELUDE + body
    for name, body in (("claim", CLAIM), ("publish", PUBLISH), ("begin", BEGIN),
                       ("release", RELEASE), ("renew", RENEW), ("touch", TOUCH))
}  # fmt: skip


class Writer:
    """The process's Redis writes, in order, sent by one background task."""

    def __init__(self, broker: RedisRooms) -> None:
        self.broker = broker
        self.ops: deque[Callable[[], Awaitable[Any]]] = deque()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.dropped = 0

    def put(self, op: Callable[[], Awaitable[Any]]) -> None:
        if len(self.ops) >= QUEUE_LIMIT:
            self.ops.popleft()
            self.dropped += 1
        self.ops.append(op)
        self._wake.set()
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        pause_s = 0.2
        while True:
            if not self.ops:
                self._wake.clear()
                await self._wake.wait()
                continue
            try:
                await self.ops[0]()
            except self.broker.unreachable as exc:
                self.broker.reached(False, exc)
                await asyncio.sleep(pause_s)
                pause_s = min(5.0, pause_s * 2)
                continue
            except Exception:  # a refused write (a bug) must not stop the room's others
                log.exception("rooms: a write to Redis failed")
            pause_s = 0.2
            self.broker.reached(True)
            if self.ops:
                self.ops.popleft()

    async def flush(self, limit_s: float) -> None:
        """Until the queued writes are sent (at most `limit_s`)."""
        for _ in range(int(limit_s / 0.05)):
            if not self.ops:
                return
            await asyncio.sleep(0.05)


class RedisPublishing:
    """A session's part in a room held in Redis: claims it, queues its events."""

    def __init__(
        self, broker: RedisRooms, token: str | None, displaced: Callable[[str], None] | None = None
    ) -> None:
        self.broker = broker
        self.token = token
        self.told = displaced  # told the room's name when another publisher takes over
        self.id = uuid.uuid4().hex
        self.room: str | None = None

    async def begin(self, name: str | None, partials: str) -> None:
        check_publishable(name, partials)
        if self.room is not None and self.room != name:
            self.end()
        if name is None:
            return
        check_publish_token(self.broker.options, name, self.token)
        if self.room != name:
            if await self.broker.claim(name, self.id) == -1:
                raise ProtocolError(
                    protocol.CLOSE_TRY_LATER,
                    f"server has {self.broker.options.max_rooms} rooms already "
                    "(--max-rooms); try again later",
                )
            self.room = name
            self.broker.publishers.add(self)
        self.broker.writer.put(lambda: self.broker.run("begin", name, self.id))

    def deliver(self, records: list[dict[str, Any]]) -> None:
        name = self.room
        if name is None:
            return
        events = [(r["type"], json.dumps(r, ensure_ascii=False), str(r.get("end_s", "")))
                  for r in records if r.get("type") in FANNED_OUT]  # fmt: skip
        if events:
            self.broker.writer.put(lambda: self._publish(name, events))

    async def _publish(self, name: str, events: list[tuple[str, str, str]]) -> None:
        broker = self.broker
        floor = broker.last_seq.get(name, 0)
        flat = [part for event in events for part in event]
        seq = await broker.run("publish", name, self.id, floor,
                               broker.options.history_finals, *flat)  # fmt: skip
        if seq == -1:
            self.displaced(name)
        else:
            broker.last_seq[name] = max(floor, int(seq))

    def displaced(self, name: str) -> None:
        """Another publisher took the room over: this session is told (and closed)."""
        if self.room == name:
            log.info("room %s: a new publisher takes over", name)
            self.room = None
            self.broker.publishers.discard(self)
            if self.told is not None:
                self.told(name)

    def end(self) -> None:
        name = self.room
        if name is not None:
            self.broker.writer.put(lambda: self.broker.run("release", name, self.id))
            self.broker.publishers.discard(self)
        self.room = None
