"""`streamasr serve --workers N`: N server processes behind one port.

The parent binds one listening socket, forks N workers and waits; the workers share that
socket, as gunicorn's and uvicorn's do, so a connection waiting to be accepted is taken by
whichever worker is free, and a worker's death resets none of them (with one socket per
worker, SO_REUSEPORT, what waited in a dead worker's queue was reset). Each worker loads
its own model (an engine's threads do not survive a fork, so nothing is loaded before it)
and accepts a few connections per wake-up (server/web.py, ACCEPT_BATCH), so a burst of
arriving clients is spread over the workers instead of taken by the first one awake.
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


def bind(host: str, port: int) -> socket.socket:
    """The server's listening socket (port 0: any free one)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return socket.create_server((host, port), family=family, backlog=1024)


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
    sock = bind(host, port)
    metrics_dir = tempfile.mkdtemp(prefix="streamasr-metrics-")
    os.environ[MULTIPROC_ENV] = metrics_dir
    ready_read, ready_write = os.pipe()
    pids: list[int] = []
    try:
        for index in range(workers):
            pid = os.fork()
            if pid == 0:  # the worker
                os.close(ready_read)
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
        address = sock.getsockname()[:2]
        sock.close()  # the workers hold it
        return asyncio.run(_supervise(pids, ready_read, address, on_ready, on_exit))
    finally:
        with contextlib.suppress(OSError):
            os.close(ready_read)
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
