"""Every core: worker processes, each with its own engine, for bench's passes.

Why: one sherpa-onnx engine on one thread is the fastest per stream on a small machine, and it
leaves the other cores idle. Here each worker process loads its own single engine (by the
setting's loading plan, backends/plan.py, which pickles) and takes
whole utterances from a shared queue, so every utterance still streams in order, start to end,
through one session exactly as in a one-worker run; the records are put back in dataset order.
Text, tokens, token times and algorithmic latencies are therefore the same as with one worker;
only compute times (and so RTF) depend on what else the cores are doing. Workers load their
engine before any pass is timed (`WorkerPool.start_ready`); batched passes and capacity probes go
to each worker as one task (`WorkerPool.gather`; worker_passes.py, capacity_search.py).

The pool is a small one of our own over `multiprocessing.Process` and one pipe per worker,
so that the parent knows which utterance each worker holds:

- Workers ignore SIGINT and SIGHUP (a Ctrl-C at the terminal reaches the whole process
  group; the parent decides) and die with the parent. On a stop signal the parent
  terminates them at once (SIGTERM, then SIGKILL after `STOP_GRACE_S`) and the records
  finished so far stay with the caller, which writes them.
- A worker that dies (killed, out of memory, a crash in native code) is reported by name and
  pid; the utterance it held is given to a fresh worker once, and marked failed if that one
  dies on it too. The run goes on and still writes its results.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import multiprocessing
import os
import signal
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import TYPE_CHECKING, Any

from streamasr.backends.plan import LoadPlan
from streamasr.bench.datasets import Utterance
from streamasr.bench.runner import RunOptions, UtteranceRecord, failed_record, run_utterance
from streamasr.errors import ModelError, UsageError

if TYPE_CHECKING:
    from multiprocessing.context import SpawnProcess


log = logging.getLogger("streamasr")

#: More worker processes than this never helps (each holds a whole model in memory).
WORKERS_MAX = 256
#: A worker asked to stop (SIGTERM) gets this long before it is killed.
STOP_GRACE_S = 0.5
#: Times an utterance is given to a worker; a worker dying on it each time marks it failed.
ATTEMPTS = 2

# signals a worker leaves to the parent: the terminal sends them to the whole group
_PARENT_DECIDES = (signal.SIGINT, signal.SIGHUP)


def available_cores() -> int:
    """Cores this process may run on (the affinity mask, not the machine's total)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def check_workers(workers: int) -> None:
    """`--workers` must be 1..WORKERS_MAX."""
    if not 1 <= workers <= WORKERS_MAX:
        raise UsageError(
            f"--workers must be between 1 and {WORKERS_MAX}, got {workers}; "
            f"this machine has {available_cores()} cores"
        )


@dataclass(frozen=True)
class _Job:
    """What a worker process needs to load its engine (all of it pickles)."""

    plan: LoadPlan
    options: RunOptions
    parent_pid: int


def _die_with_parent(parent_pid: int) -> None:
    """Linux: have the kernel kill this worker when the parent dies, even by SIGKILL."""
    with contextlib.suppress(Exception):
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None).prctl(pr_set_pdeathsig, int(signal.SIGKILL), 0, 0, 0)
    if os.getppid() != parent_pid:  # the parent died before the request took effect
        os._exit(1)


def _worker_main(conn: Connection, job: _Job) -> None:
    """A worker process: load one engine, say ready (with the load's seconds), then run the
    tasks sent until None: one utterance, a batched share of a pass, or a capacity probe."""
    for signum in _PARENT_DECIDES:
        signal.signal(signum, signal.SIG_IGN)
    # started with them blocked (see WorkerPool.start), so none arrived before they were ignored
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _PARENT_DECIDES)
    _die_with_parent(job.parent_pid)
    from streamasr.bench.runner import warm_up

    started = time.perf_counter()
    try:
        recognizer = job.plan.load()
        warm_up(recognizer)
    except Exception as exc:  # the parent turns it into one line
        conn.send(("failed", str(exc) or type(exc).__name__))
        return
    conn.send(("ready", time.perf_counter() - started))
    armed: Any = None  # a capacity probe whose sessions are open, waiting for its start
    while True:
        try:
            task = conn.recv()
        except (EOFError, OSError):
            return
        if task is None:
            return
        if task[0] == "one":
            _, index, utt = task
            try:
                record = run_utterance(recognizer, utt, job.options)
            except Exception as exc:  # one utterance that breaks the engine is one failed row
                record = failed_record(utt, f"the engine failed on it: {exc}", job.options.metric)
            conn.send(("done", index, record))
        elif task[0] == "batch":
            from streamasr.bench.runner import run_batched

            _, streams, utts = task
            conn.send(("reply", run_batched(recognizer, utts, job.options, streams)))
        elif task[0] == "arm":
            from streamasr.bench.capacity import CapacityProbe

            armed = CapacityProbe(recognizer, task[1], job.options.stream)
            conn.send(("reply", None))
        elif task[0] == "go":
            conn.send(("reply", armed.run(task[1])))
            armed = None


class _Worker:
    """The parent's view of one worker process."""

    def __init__(self, number: int, process: SpawnProcess, conn: Connection) -> None:
        self.number = number
        self.process = process
        self.conn = conn
        self.ready = False
        self.load_s = 0.0  # what loading its engine took (it said so when ready)
        self.holding: int | None = None  # the index of the utterance it is decoding

    @property
    def name(self) -> str:
        return f"worker {self.number} (pid {self.process.pid})"


def death_reason(exitcode: int | None) -> str:
    """'killed by SIGKILL', 'exited with status 3'."""
    if exitcode is None:
        return "vanished"
    if exitcode < 0:
        try:
            return f"killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"killed by signal {-exitcode}"
    return f"exited with status {exitcode}"


class WorkerPool:
    """Worker processes, one task each at a time, replaced when they die."""

    def __init__(self, job: _Job, size: int) -> None:
        # spawn, not fork: the parent may already hold an engine and its thread pools
        self._context = multiprocessing.get_context("spawn")
        self._job = job
        self._size = size
        self._workers: list[_Worker] = []
        self._started = 0

    def start(self) -> _Worker:
        """One more worker. SIGINT and SIGHUP are blocked while it is made, so the child
        starts with them blocked and ignores them before they can reach it."""
        parent_end, child_end = self._context.Pipe()
        self._started += 1
        process = self._context.Process(
            target=_worker_main,
            args=(child_end, self._job),
            name=f"streamasr-bench-worker-{self._started}",
            daemon=True,
        )
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, _PARENT_DECIDES)
        try:
            process.start()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        child_end.close()
        worker = _Worker(self._started, process, parent_end)
        self._workers.append(worker)
        return worker

    def run(
        self,
        utterances: Sequence[Utterance],
        options: RunOptions,
        on_done: Callable[[UtteranceRecord], None],
    ) -> list[UtteranceRecord]:
        records: list[UtteranceRecord | None] = [None] * len(utterances)
        pending = collections.deque(range(len(utterances)))
        attempts = [0] * len(utterances)
        # a worker that dies before taking work is replaced, up to this many times in all
        spare_starts = 2 * self._size
        left = len(utterances)

        def finish(index: int, record: UtteranceRecord) -> None:
            nonlocal left
            records[index] = record
            left -= 1
            on_done(record)

        while len(self._workers) < self._size:
            self.start()
        while left:
            for worker in self._workers:
                if worker.ready and worker.holding is None and pending:
                    worker.holding = pending.popleft()
                    attempts[worker.holding] += 1
                    try:
                        worker.conn.send(("one", worker.holding, utterances[worker.holding]))
                    except OSError:  # it just died: its sentinel says so below
                        log.debug("bench %s: the task could not be sent", worker.name)
            waits: list[Any] = [w.conn for w in self._workers]
            waits += [w.process.sentinel for w in self._workers]
            ready = wait(waits)
            dead: list[_Worker] = []
            for worker in list(self._workers):
                if worker.conn in ready and not self._receive(worker, finish):
                    dead.append(worker)
                elif worker.process.sentinel in ready and worker not in dead:
                    while self._poll(worker) and self._receive(worker, finish):
                        pass
                    dead.append(worker)
            for worker in dead:
                spare_starts -= self._bury(worker, utterances, options, attempts, pending, finish)
            holding = sum(1 for w in self._workers if w.holding is not None)
            while len(self._workers) < min(self._size, holding + len(pending)):
                if spare_starts <= 0:
                    if not self._workers:
                        self._give_up(utterances, options, pending, finish)
                    break
                self.start()
        return [r for r in records if r is not None]

    def start_ready(self) -> float:
        """Start every worker and wait until each has loaded its engine: a timed pass then
        measures decoding alone. Returns the wall seconds the loading took."""
        started = time.perf_counter()
        while len(self._workers) < self._size:
            self.start()
        for worker in self._workers:
            while not worker.ready:
                if not self._receive(worker, lambda index, record: None):
                    reason = death_reason(worker.process.exitcode)
                    raise ModelError(f"bench {worker.name} {reason} while loading the model")
        return time.perf_counter() - started

    @property
    def size(self) -> int:
        """How many workers the pool has now (after start_ready: its size, unless some died
        and could not be replaced)."""
        return len(self._workers)

    def gather(self, tasks: Sequence[Any]) -> list[Any]:
        """Send task i to worker i (ready ones: see start_ready) and return their replies in
        that order. A worker that dies here ends the pass: a batched share or a probe is
        not worth retrying on a fresh engine, whose timing would differ."""
        workers = self._workers[: len(tasks)]
        for worker, task in zip(workers, tasks, strict=True):
            worker.conn.send(task)
        replies: list[Any] = []
        for worker in workers:
            while True:
                try:
                    message = worker.conn.recv()
                except (EOFError, OSError):
                    worker.process.join(STOP_GRACE_S)
                    reason = death_reason(worker.process.exitcode)
                    raise ModelError(f"bench {worker.name} {reason} during the pass") from None
                if message[0] == "reply":
                    replies.append(message[1])
                    break
                if message[0] == "failed":  # a replacement worker that could not load
                    raise ModelError(f"bench {worker.name} could not load the model: "
                                     f"{message[1]}")
                if message[0] == "ready":  # a replacement, started during the last pass
                    worker.ready, worker.load_s = True, message[1]
        return replies

    @staticmethod
    def _poll(worker: _Worker) -> bool:
        try:
            return worker.conn.poll()
        except (EOFError, OSError):
            return False

    def _receive(self, worker: _Worker, finish: Callable[[int, UtteranceRecord], None]) -> bool:
        """Take one message from a worker; False when its pipe is closed (it died)."""
        try:
            message = worker.conn.recv()
        except (EOFError, OSError):
            return False
        if message[0] == "ready":
            worker.ready, worker.load_s = True, message[1]
        elif message[0] == "failed":
            raise ModelError(f"bench {worker.name} could not load the model: {message[1]}")
        elif message[0] == "done":
            _, index, record = message
            worker.holding = None
            finish(index, record)
        return True

    def _bury(
        self,
        worker: _Worker,
        utterances: Sequence[Utterance],
        options: RunOptions,
        attempts: list[int],
        pending: collections.deque[int],
        finish: Callable[[int, UtteranceRecord], None],
    ) -> int:
        """Report a dead worker and put its utterance back (or fail it); 1 if it held none."""
        worker.process.join(STOP_GRACE_S)
        if worker.process.is_alive():  # its pipe broke, yet it runs: it is of no more use
            worker.process.kill()
            worker.process.join(STOP_GRACE_S)
        reason = death_reason(worker.process.exitcode)
        self._workers.remove(worker)
        worker.conn.close()
        index = worker.holding
        if index is None:
            log.warning("bench %s %s before it took an utterance", worker.name, reason)
            return 1
        utt = utterances[index]
        if attempts[index] < ATTEMPTS:
            log.warning(
                "bench %s %s while decoding %s; giving it to a new worker", worker.name, reason,
                utt.id,
            )
            pending.appendleft(index)
        else:
            log.warning(
                "bench %s %s while decoding %s, the second worker to die on it; marked failed",
                worker.name, reason, utt.id,
            )
            finish(index, failed_record(
                utt,
                f"{attempts[index]} worker processes died while decoding it (last: {reason})",
                options.metric,
            ))
        return 0

    def _give_up(
        self,
        utterances: Sequence[Utterance],
        options: RunOptions,
        pending: collections.deque[int],
        finish: Callable[[int, UtteranceRecord], None],
    ) -> None:
        """Workers keep dying before they take work: the rest is marked failed."""
        log.warning(
            "bench worker processes keep dying before they take work; %d utterance(s) "
            "marked failed", len(pending),
        )
        while pending:
            index = pending.popleft()
            finish(index, failed_record(
                utterances[index], "no worker process stayed alive to decode it", options.metric
            ))

    def close(self, graceful: bool) -> None:
        """End every worker: asked to finish when the run is done, else terminated now."""
        workers, self._workers = self._workers, []
        if graceful:
            for worker in workers:
                with contextlib.suppress(OSError, ValueError):
                    worker.conn.send(None)
        else:
            for worker in workers:
                with contextlib.suppress(OSError, ValueError):
                    worker.process.terminate()
        deadline = time.monotonic() + (5.0 if graceful else STOP_GRACE_S)
        for worker in workers:
            worker.process.join(max(0.0, deadline - time.monotonic()))
        for worker in workers:
            if worker.process.is_alive():
                worker.process.kill()
                worker.process.join(STOP_GRACE_S)
            worker.conn.close()


@contextlib.contextmanager
def worker_pool(
    plan: LoadPlan,
    options: RunOptions,
    workers: int,
) -> Iterator[WorkerPool]:
    """`workers` processes, each with its own engine; ended when the block is left.

    Interrupted (KeyboardInterrupt: Ctrl-C, SIGTERM), the workers are ended at once and the
    interruption goes on up.
    """
    check_workers(workers)
    pool = WorkerPool(_Job(plan, options, os.getpid()), workers)
    graceful = False
    try:
        yield pool
        graceful = True
    finally:
        pool.close(graceful)
