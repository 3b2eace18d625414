"""A real Redis for the tests: Debian's redis-server on a free port in a temporary folder
(never the system's service), which a test may stop and start again with its data
(scripts/redis_local.py starts it, as it does for scripts/room_load.py)."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
from redis_local import RedisProcess, free_port  # noqa: E402

__all__ = ["RedisProcess", "free_port", "redis_server"]


@contextmanager
def redis_server(folder: Path) -> Iterator[RedisProcess]:
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed (scripts/test.sh installs it)")
    running = RedisProcess(folder, free_port())
    running.start()
    try:
        yield running
    finally:
        running.stop()
