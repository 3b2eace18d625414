"""A private Redis for a test or a load run: Debian's redis-server on a free loopback port,
its data in a folder of the caller's (never the system's service). The tests
(tests/redis_fixture.py) and scripts/room_load.py start it the same way."""

from __future__ import annotations

import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class RedisProcess:
    """One redis-server. `fsync`: its append-only file's `appendfsync` ("always": a stop
    and start keeps every write, as the restart tests need; "everysec": Redis's own default
    for that file, as a deployment would run it)."""

    folder: Path
    port: int
    fsync: str = "always"
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        """Start it (its data, kept in an append-only file, comes back after a stop)."""
        self.process = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
             "--dir", str(self.folder), "--save", "", "--appendonly", "yes",
             "--appendfsync", self.fsync, "--daemonize", "no", "--loglevel", "warning"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        for _ in range(200):
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as conn:
                    conn.sendall(b"PING\r\n")
                    if conn.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("redis-server did not start")

    def info(self, section: str) -> dict[str, str]:
        """`INFO section` as fields (memory: used_memory, used_memory_rss, ...)."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as conn:
            conn.sendall(f"INFO {section}\r\n".encode())
            data = b""
            while b"\r\n" not in data or len(data) < int(data[1 : data.index(b"\r\n")]) + 2:
                data += conn.recv(65536)
        body = data.split(b"\r\n", 1)[1].decode()
        return dict(line.split(":", 1) for line in body.splitlines() if ":" in line)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(10)
        self.process = None
