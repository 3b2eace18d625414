"""A real Redis for the tests: Debian's redis-server on a free port in a temporary folder
(never the system's service), which a test may stop and start again with its data."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class RedisProcess:
    folder: Path
    port: int
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        """Start it (its data, kept in an append-only file, comes back after a stop)."""
        self.process = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
             "--dir", str(self.folder), "--save", "", "--appendonly", "yes",
             "--appendfsync", "always", "--daemonize", "no", "--loglevel", "warning"],
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

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(10)
        self.process = None


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
