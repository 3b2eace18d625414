"""`serve`'s rooms settings that need a look outside: the broker's address, the file handles,
who may reach the port.

Kept out of commands/serve.py, which wires the options (RoomOptions declares them).
"""

from __future__ import annotations

import dataclasses
import logging
import resource
from urllib.parse import urlsplit

from streamasr.errors import DependencyError, UsageError
from streamasr.server.rooms import RoomOptions

log = logging.getLogger("streamasr")

SCHEMES = ("redis", "rediss", "unix")
#: File handles kept for what is not a reader: sessions, the model, logs, Redis, /readyz.
SPARE_HANDLES = 200


def check_rooms_url(url: str) -> None:
    """--rooms: a redis:// address redis-py can use; a Redis that does not answer now is
    said in a warning, not refused (rooms wait for it)."""
    parts = urlsplit(url)
    if parts.scheme not in SCHEMES or not (parts.hostname or parts.path):
        raise UsageError(
            f"--rooms {url}: give redis://HOST:PORT/DB (or rediss:// for TLS, "
            "unix:///PATH.sock?db=N)"
        )
    try:
        import redis
    except ImportError:
        raise DependencyError(
            "--rooms needs redis-py: pip install 'streamasr[serve]' (or pip install 'redis>=5')"
        ) from None
    try:
        redis.Redis.from_url(url, socket_connect_timeout=1.0, socket_timeout=1.0).ping()
    except (redis.exceptions.RedisError, OSError, ValueError) as exc:
        log.warning("--rooms %s does not answer now (%s); rooms wait for it", url, exc)


def readers_limit(max_readers: int) -> int:
    """--max-readers, lowered to what the process's file-handle limit leaves (each reader
    holds one), so readers are refused before sessions and /readyz run out of handles."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return max_readers
    room = max(1, soft - SPARE_HANDLES)
    if max_readers > room:
        log.warning(
            "--max-readers %d: the file-handle limit (ulimit -n %d) leaves room for %d readers",
            max_readers, soft, room,
        )  # fmt: skip
        return room
    return max_readers


def checked_rooms(rooms: RoomOptions) -> RoomOptions:
    """The rooms' settings once what lies outside is looked at: the broker answers (or is
    said not to), the readers fit the file handles. (Who may publish on a reachable port is
    in serve's one exposure warning, server/reach.py.)"""
    if rooms.url is not None:
        check_rooms_url(rooms.url)
    return dataclasses.replace(rooms, max_readers=readers_limit(rooms.max_readers))
