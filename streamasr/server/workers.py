"""`streamasr serve --workers N`: N server processes behind one port.

The parent binds one listening socket per worker on the same port (SO_REUSEPORT), forks N
workers and waits. Each worker loads its own model (an engine's threads do not survive a
fork, so nothing is loaded before it) and runs the whole server on its own socket: the
kernel spreads new connections over the sockets by their addresses. (On one shared socket
the process that woke first took every waiting connection at once: 192 clients arriving
together split unevenly enough to fill one worker while the other had room.) Without
SO_REUSEPORT the workers share one socket.
The parent says it listens once every worker serves, passes SIGTERM/SIGINT on to them,
and returns when they have all drained and exited.

Metrics are gathered across workers with prometheus-client's multiprocess mode (a folder
of per-process files, PROMETHEUS_MULTIPROC_DIR, set before any worker imports it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import socket
import tempfile
from collections.abc import Callable

log = logging.getLogger("streamasr")

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
#: How long a worker may take to load its model and start serving.
START_LIMIT_S = 600.0


def bind(host: str, port: int, workers: int = 1) -> list[socket.socket]:
    """One listening socket per worker on one port (port 0: the first socket's), or one
    socket for all of them where the system has no SO_REUSEPORT."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    reuse_port = workers > 1 and hasattr(socket, "SO_REUSEPORT")
    socks: list[socket.socket] = []
    try:
        for _ in range(workers if reuse_port else 1):
            sock = socket.create_server((host, port), family=family, backlog=1024,
                                        reuse_port=reuse_port)
            port = sock.getsockname()[1]
            socks.append(sock)
    except OSError:
        for sock in socks:
            sock.close()
        raise
    return socks if reuse_port else socks * workers


def run_workers(
    workers: int,
    host: str,
    port: int,
    serve_in_worker: Callable[[socket.socket, Callable[[], None], int], int | None],
    on_ready: Callable[[list[tuple[str, int]]], None],
    on_exit: Callable[[int], None] = lambda index: None,
) -> int | None:
    """Fork `workers` processes running `serve_in_worker(sock, ready, index)`; the stop
    signal's number once they have all exited (None if none came). `on_exit(index)` runs
    in the parent when a worker has exited. RuntimeError if a worker fails to start."""
    socks = bind(host, port, workers)
    metrics_dir = tempfile.mkdtemp(prefix="streamasr-metrics-")
    os.environ[MULTIPROC_ENV] = metrics_dir
    ready_read, ready_write = os.pipe()
    pids: list[int] = []
    try:
        for index, sock in enumerate(socks):
            pid = os.fork()
            if pid == 0:  # the worker
                os.close(ready_read)
                for other in set(socks) - {sock}:
                    other.close()
                code = 1
                try:
                    def ready() -> None:
                        os.write(ready_write, b".")

                    serve_in_worker(sock, ready, index)
                    code = 0
                except BaseException:  # a worker never returns into the parent's code
                    log.exception("worker %d failed", os.getpid())
                finally:
                    os._exit(code)
            pids.append(pid)
        os.close(ready_write)
        address = socks[0].getsockname()[:2]
        for sock in socks:  # a worker that dies takes its socket out of the port's group
            sock.close()
        return asyncio.run(_supervise(pids, ready_read, address, on_ready, on_exit))
    finally:
        with contextlib.suppress(OSError):
            os.close(ready_read)
        for sock in socks:
            sock.close()
        shutil.rmtree(metrics_dir, ignore_errors=True)


async def _supervise(
    pids: list[int],
    ready_read: int,
    address: tuple[str, int],
    on_ready: Callable[[list[tuple[str, int]]], None],
    on_exit: Callable[[int], None],
) -> int | None:
    loop = asyncio.get_running_loop()
    alive = set(pids)
    stopped: list[int] = []
    all_exited = asyncio.Event()
    failed: list[int] = []
    ready = [0]
    started = asyncio.Event()  # every worker serves, or one failed first

    def forward(signum: int) -> None:
        stopped.append(signum)
        for pid in alive:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)

    def reap() -> None:
        from prometheus_client import multiprocess

        while alive:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                alive.clear()
                break
            if pid == 0:
                break
            alive.discard(pid)
            multiprocess.mark_process_dead(pid)
            if pid in pids:
                on_exit(pids.index(pid))
            if ready[0] < len(pids) or (os.waitstatus_to_exitcode(status) and not stopped):
                failed.append(pid)
                log.error("worker %d exited (%d)", pid, os.waitstatus_to_exitcode(status))
                started.set()
        if not alive:
            all_exited.set()

    def count_ready() -> None:
        data = os.read(ready_read, 64)
        ready[0] += len(data)
        if not data or ready[0] >= len(pids):
            loop.remove_reader(ready_read)
            started.set()

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, forward, signum)
    loop.add_signal_handler(signal.SIGCHLD, reap)
    loop.add_reader(ready_read, count_ready)
    reap()  # a worker may have exited before the handler was there
    try:
        await asyncio.wait_for(started.wait(), START_LIMIT_S)
        if failed or ready[0] < len(pids):
            forward(signal.SIGTERM)
            await all_exited.wait()
            raise RuntimeError(
                "a server worker did not start (its error is above); the others were stopped"
            )
        on_ready([address])
        await all_exited.wait()
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD):
            loop.remove_signal_handler(signum)
    return stopped[0] if stopped else None
