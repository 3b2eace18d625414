"""`streamasr serve --workers N`: N server processes behind one port.

The parent binds one listening socket, forks N workers and waits; the workers share that
socket, as gunicorn's and uvicorn's do, so a connection waiting to be accepted is taken by
whichever worker is free, and a worker's death resets none of them (with one socket per
worker, SO_REUSEPORT, what waited in a dead worker's queue was reset). Each worker loads
its own model (an engine's threads do not survive a fork, so nothing is loaded before it)
and accepts a few connections per wake-up (server/web.py, ACCEPT_BATCH), so a burst of
arriving clients is spread over the workers instead of taken by the first one awake.
The parent says it listens once every worker serves, passes SIGTERM/SIGINT on to them,
and returns when they have all drained and exited. A worker that ends itself on a wedged
engine step while stopping (server/app.py, exit 128 + the signal) or fails while stopping
makes the parent fail too (WorkerStopError), instead of saying the sessions were flushed.

`serve` runs a ServerSetup (made and checked before anything loads) in this process, or
with --workers in N forked ones, each loading its own model by the setup's plan.

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
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from streamasr.errors import StreamAsrError
from streamasr.output.finishing import NONE, Finishing, load_finishing
from streamasr.server.limits import ConnectionSlots, Security, ServerLimits

if TYPE_CHECKING:
    from streamasr.backends.base import BackendEntry
    from streamasr.backends.plan import LoadPlan
    from streamasr.server.app import StreamServer
    from streamasr.server.rooms import RoomOptions
    from streamasr.server.wyoming_listener import WyomingSetup
    from streamasr.session.stream import StreamOptions

log = logging.getLogger("streamasr")
Ready = Callable[[list[tuple[str, int]]], None]

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
#: How long a worker may take to load its model and start serving.
START_LIMIT_S = 600.0


class WorkerStopError(StreamAsrError):
    """A server worker did not drain cleanly after the stop signal: it abandoned a wedged
    engine step (its sessions in that step got no final) or failed. Exit 128 + the signal
    for an abandoned step, as a single server process exits; 1 otherwise."""

    def __init__(self, ended: list[tuple[int, int]], signum: int) -> None:
        wedged = [pid for pid, code in ended if code - 128 in (signal.SIGTERM, signal.SIGINT)]
        failed = [f"{pid} (exit {code})" for pid, code in ended if pid not in wedged]
        parts = []
        if wedged:
            parts.append(
                f"server worker {', '.join(map(str, wedged))} abandoned a wedged engine step "
                "(the sessions in that step got no final)"
            )
        if failed:
            parts.append(f"server worker {', '.join(failed)} failed while stopping")
        super().__init__("; ".join(parts) + "; the other workers drained their sessions")
        self.exit_code = 128 + signum if wedged else 1


@dataclass(frozen=True)
class ServerSetup:
    """What every server process builds its server from, checked before the model loads:
    the backend and its loading plan, the sessions' default feed, the limits and guards."""

    entry: BackendEntry
    plan: LoadPlan
    feed: StreamOptions
    limits: ServerLimits
    security: Security
    per_message: bool  # no feed block given anywhere: each message fed as it comes
    finish_args: tuple[str | None, bool] = (None, False)  # --punctuate, --sentence-case
    rooms: RoomOptions | None = None


def load_server(
    setup: ServerSetup, finishing: Finishing = NONE, slots: ConnectionSlots | None = None
) -> StreamServer:
    """Load the model by the plan and put a server over it. Once it is loaded, the steps'
    freed blocks are reused instead of mapped anew each step (streamasr/memory.py)."""
    from streamasr.memory import reuse_freed_blocks
    from streamasr.server.app import StreamServer

    recognizer = setup.plan.load(setup.entry)
    log.info("model: %s", recognizer.description)
    reuse_freed_blocks()
    return StreamServer(
        recognizer, setup.feed, setup.limits, setup.security,
        per_message=setup.per_message, finishing=finishing, rooms=setup.rooms, slots=slots,
    )  # fmt: skip


def serve(
    setup: ServerSetup, finishing: Finishing, host: str, port: int, workers: int, ready: Ready,
    wyoming: WyomingSetup | None = None,
) -> int | None:  # fmt: skip
    """Load and serve until stopped (the stop signal's number; None if none came): here, or
    in `workers` processes, each with its own model and punctuation model, sharing the
    port and --max-connections."""
    if workers == 1:
        server = load_server(setup, finishing)
        server.wyoming = wyoming  # serve --wyoming (server/wyoming_listener.py)
        return run_server(server, host, port, ready)
    slots = ConnectionSlots.shared(setup.limits.max_connections, workers)

    def serve_in_worker(sock: socket.socket, worker_ready: Callable[[], None], index: int) -> None:
        server = load_server(setup, load_finishing(*setup.finish_args), slots.worker(index))
        run_server(server, None, None, lambda _: worker_ready(), sock)

    try:
        return run_workers(workers, host, port, serve_in_worker, ready, slots.forget_worker)
    except RuntimeError as exc:
        raise StreamAsrError(str(exc)) from None


def run_server(
    server: StreamServer,
    host: str | None,
    port: int | None,
    on_ready: Callable[[list[tuple[str, int]]], None],
    sock: socket.socket | None = None,
) -> int | None:
    """Run until stopped; the stop signal's number (None if none came).

    `sock`: a listening socket to serve on (--workers share one); else one is bound to
    `host` and `port`."""
    if sock is None:
        sock = bind(host or "0.0.0.0", port or 0)
    run_event_loop(server.serve(sock, on_ready))
    return server.stop_signal


def run_event_loop(main: Coroutine[Any, Any, None]) -> None:
    """Run `main` on uvloop's event loop where it is installed (the `serve` extra): its
    sockets, timers and wake-ups from the engine thread cost a fraction of asyncio's own.
    STREAMASR_LOOP=asyncio keeps asyncio's loop (to compare, or to rule uvloop out)."""
    if os.environ.get("STREAMASR_LOOP") != "asyncio":
        try:
            import uvloop
        except ImportError:
            pass
        else:
            uvloop.run(main)
            return
    asyncio.run(main)


def bind(host: str, port: int) -> socket.socket:
    """The server's listening socket (port 0: any free one)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return socket.create_server((host, port), family=family, backlog=1024)


def run_workers(
    workers: int,
    host: str,
    port: int,
    serve_in_worker: Callable[[socket.socket, Callable[[], None], int], object],
    on_ready: Ready,
    on_exit: Callable[[int], None] = lambda index: None,
) -> int | None:
    """Fork `workers` processes running `serve_in_worker(sock, ready, index)`; the stop
    signal's number once they have all exited (None if none came). `on_exit(index)` runs
    in the parent when a worker has exited. RuntimeError if a worker fails to start;
    WorkerStopError if one abandoned a wedged step or failed after the stop signal."""
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
    ended_badly: list[tuple[int, int]] = []  # (pid, exit status) after the stop signal
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
            code = os.waitstatus_to_exitcode(status)
            if ready[0] < len(pids) or (code and not stopped):
                failed.append(pid)
                log.error("worker %d exited (%d)", pid, code)
                started.set()
            elif code:  # stopping, and it did not drain cleanly
                ended_badly.append((pid, code))
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
        if ended_badly:
            raise WorkerStopError(ended_badly, stopped[0] if stopped else signal.SIGTERM)
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD):
            loop.remove_signal_handler(signum)
    return stopped[0] if stopped else None
