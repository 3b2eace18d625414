"""The deployment recipe scripts/deploy/haproxy.cfg, run as shipped by a real HAProxy
(Debian's package) on 127.0.0.1 in front of two `streamasr serve` instances."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager

from serve_fixture import REPO, ServerProcess, http_get, wait_for

RECIPE = REPO / "scripts" / "deploy" / "haproxy.cfg"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def haproxy(a: ServerProcess, b: ServerProcess) -> Iterator[int]:
    """The shipped recipe in front of `a` and `b`; yields the front port once both are up."""
    binary = shutil.which("haproxy")
    assert binary, "haproxy is not installed (scripts/test.sh installs the Debian package)"
    port = free_port()
    env = {
        **os.environ,
        "STREAMASR_FRONT": f"127.0.0.1:{port}",
        "STREAMASR_A": f"127.0.0.1:{a.port}",
        "STREAMASR_B": f"127.0.0.1:{b.port}",
    }
    process = subprocess.Popen(
        [binary, "-db", "-f", str(RECIPE)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert wait_for(lambda: ready(f"http://127.0.0.1:{port}"), 60)
        yield port
    finally:
        process.terminate()
        process.wait(30)


def ready(base: str) -> bool:
    """Whether `base`/readyz answers 200 (a closed listener is not ready)."""
    try:
        return http_get(base + "/readyz")[0] == 200
    except OSError:
        return False


def metric(server: ServerProcess, name: str) -> float:
    """One counter or gauge of one instance, read from its own /metrics."""
    body = http_get(server.http + "/metrics")[1]
    line = next(x for x in body.splitlines() if x.startswith(name + " "))
    return float(line.split()[-1])
