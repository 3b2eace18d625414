"""The Ray driver in a process of its own, so that the command outlives it.

Ray ends a driver process on the spot (an exit at the C level, no Python cleanup) when the
raylet of the node it runs on dies, and a raylet dies with any of its agents (the runtime-env
or the dashboard agent). Were the command itself the driver, such a death would leave no
message, the rows already finished unlogged and the run's state folder behind. So the command
starts `python -m streamasr.cluster.driver` in a session of its own (a terminal's Ctrl-C
reaches the command, which asks the driver to cancel) and talks to it over two pipes:

    command -> driver   ("run", body, jobs, spec, cpus, labels) | ("cancel",) | ("stop",)
    driver  -> command  ("ready", ClusterInfo, NodePlace) | ("note", note) | ("end",)
                        | ("stopped",) | ("error", line)

When the driver dies, the command reads end-of-file and raises `DriverLost`: one line naming
what died (the agent whose death the node's raylet logged, else the raylet or the signal),
and the command's own cleanup runs as after any other error. Ray's own messages go to its
log files, not to the command's stdout and stderr.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from streamasr.cluster.connect import ClusterInfo, connect, disconnect, require_ray
from streamasr.cluster.tasks import TasksStopped, run_tasks
from streamasr.errors import ClusterError, StreamAsrError

log = logging.getLogger("streamasr")

#: How long a cancelled run may take to confirm (its tasks killed) before the driver is.
CANCEL_LIMIT_S = 5.0
#: How long the driver may take to leave the cluster (and stop one it started) at the end.
STOP_LIMIT_S = 20.0
#: How long the raylet's last words may take to reach its log after the driver died.
LOG_WAIT_S = 1.0
#: What a raylet logs when it ends because one of its agents died.
AGENT_LINE = re.compile(r"one Ray agent failed, agent_name = (\w+)")
AGENT_NAMES = {"runtime_env_agent": "runtime-env agent", "dashboard_agent": "dashboard agent"}
#: Bytes of a raylet log read from its start (its node id) and from its end (its last words).
LOG_HEAD_BYTES = 64 * 1024
LOG_TAIL_BYTES = 256 * 1024


class DriverLost(ClusterError):
    """The driver process died: its node's raylet, an agent of it, or a kill ended it."""


@dataclass(frozen=True)
class NodePlace:
    """The node the driver process runs on, to say what died when it does."""

    node_id: str = ""
    ip: str = ""
    logs_dir: str = ""  # the node's Ray log folder on this machine; '' when Ray did not say


class RayDriver:
    """The command's side: start the driver, run tasks through it, stop it."""

    def __init__(self, process: subprocess.Popen[bytes], to_driver: Connection,
                 from_driver: Connection, address: str) -> None:
        self.process = process
        self._to = to_driver
        self._from = from_driver
        self.place = NodePlace()
        self.info = ClusterInfo(address, 0, 0.0, "")  # what the driver says once it joined

    def run(self, body: Callable[..., Any], jobs: Sequence[Any], spec: Any, cpus: int,
            on_note: Callable[[Any], None], labels: Sequence[str]) -> None:
        """`body(spec, job)` as one task per job; `on_note(note)` as each ends. An error of
        the run, or the driver's death, is a ClusterError; Ctrl-C cancels the tasks."""
        self._send(("run", body, list(jobs), spec, cpus, list(labels)))
        running = True
        try:
            while True:
                message = self._receive()
                if message[0] == "note":
                    on_note(message[1])
                    continue
                running = False
                if message[0] == "error":
                    raise self._error(message[1])
                if message[0] == "stopped":
                    raise KeyboardInterrupt
                return
        finally:
            if running and self.process.poll() is None:  # Ctrl-C, or on_note failed
                self._cancel()

    def close(self) -> None:
        """Have the driver leave the cluster and end (safe to call twice)."""
        with contextlib.suppress(OSError, ValueError):
            self._to.send(("stop",))
        try:
            self.process.wait(STOP_LIMIT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._to.close()
        self._from.close()

    def _send(self, message: tuple[Any, ...]) -> None:
        try:
            self._to.send(message)
        except OSError:
            raise DriverLost(self.death_line()) from None

    def _receive(self) -> Any:
        try:
            return self._from.recv()
        except (EOFError, OSError):
            raise DriverLost(self.death_line()) from None

    def _cancel(self) -> None:
        """Ask the driver to cancel the run's tasks and wait (a little) until it has."""
        with contextlib.suppress(OSError, ValueError):
            self._to.send(("cancel",))
        deadline = time.monotonic() + CANCEL_LIMIT_S
        try:
            while self._from.poll(max(0.0, deadline - time.monotonic())):
                if self._from.recv()[0] != "note":
                    return
        except (EOFError, OSError):
            return
        self.process.kill()  # Ray kills the tasks of a driver that died

    def _error(self, line: str) -> ClusterError:
        """A run's error; when the driver's own node lost an agent, that is what it says
        (its tasks failed because that node's raylet died with the agent)."""
        agent = agent_that_died(self.place, wait_s=0.0)
        return DriverLost(self._agent_line(agent)) if agent else ClusterError(line)

    def _agent_line(self, agent: str) -> str:
        place = self.place
        node = f"node {place.ip}" if place.ip else "the node this command runs on"
        logs = f" (its logs: {place.logs_dir})" if place.logs_dir else ""
        return (f"the Ray cluster's {agent} on {node} (the node this command runs on) died, "
                "and that node's raylet with it, which ends the run's Ray driver; check the "
                f"node with `ray status`{logs}, restart it (`ray stop`, then `ray start`) and "
                "run the command again")

    def death_line(self) -> str:
        """What ended the driver, with what to do, in one line."""
        try:
            code: int | None = self.process.wait(5)
        except subprocess.TimeoutExpired:
            code = None
        place = self.place
        node = f"node {place.ip}" if place.ip else "the node this command runs on"
        logs = f" (its logs: {place.logs_dir})" if place.logs_dir else ""
        agent = agent_that_died(place)
        if agent is not None:
            return self._agent_line(agent)
        if code is not None and code < 0:
            name = signal.Signals(-code).name
            return (f"the Ray driver of this run (pid {self.process.pid}) was killed by {name}; "
                    "run the command again")
        return (f"the Ray driver of this run ended unexpectedly (exit {code}): the raylet of "
                f"{node} stopped, or the driver lost it; check the node with `ray status`"
                f"{logs} and run the command again")


def agent_that_died(place: NodePlace, wait_s: float = LOG_WAIT_S) -> str | None:
    """The agent whose death the raylet of the driver's node logged ('runtime-env agent'),
    or None: no log to read here, or the raylet did not end for an agent (in `wait_s`)."""
    if not place.logs_dir or not place.node_id:
        return None
    deadline = time.monotonic() + wait_s
    while True:
        for path in sorted(Path(place.logs_dir).glob("raylet*.out")):
            head, tail = _head_and_tail(path)
            if place.node_id not in head:
                continue  # another node's raylet, on the same machine
            found = AGENT_LINE.findall(tail)
            if found:
                return AGENT_NAMES.get(found[-1], found[-1].replace("_", " "))
        if time.monotonic() > deadline:
            return None
        time.sleep(0.1)


def _head_and_tail(path: Path) -> tuple[str, str]:
    try:
        with path.open("rb") as handle:
            head = handle.read(LOG_HEAD_BYTES)
            size = handle.seek(0, os.SEEK_END)
            handle.seek(max(0, size - LOG_TAIL_BYTES))
            tail = handle.read()
    except OSError:
        return "", ""
    return head.decode(errors="replace"), tail.decode(errors="replace")


def start_driver(address: str) -> RayDriver:
    """Start the driver process and have it join the cluster at `address`; an error to join
    is its ClusterError line."""
    command_read, command_write = os.pipe()
    reply_read, reply_write = os.pipe()
    verbose = log.isEnabledFor(logging.DEBUG)
    try:
        process = subprocess.Popen(
            [sys.executable, "-m", "streamasr.cluster.driver", str(command_read),
             str(reply_write), address],
            pass_fds=(command_read, reply_write), stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=None if verbose else subprocess.DEVNULL,
            start_new_session=True,
        )
    finally:
        os.close(command_read)
        os.close(reply_write)
    driver = RayDriver(process, Connection(command_write, readable=False),
                       Connection(reply_read, writable=False), address)
    try:
        message = driver._receive()
        if message[0] == "error":
            raise ClusterError(message[1])
        _, driver.info, driver.place = message
    except BaseException:
        driver.close()
        raise
    return driver


# --- the driver process ----------------------------------------------------------------------


def node_place() -> NodePlace:
    """Where this driver runs, as far as Ray says (nothing, for a Ray client)."""
    ray = require_ray()
    node_id = ip = logs = ""
    with contextlib.suppress(Exception):
        node_id = ray.get_runtime_context().get_node_id()
        ip = next(n["NodeManagerAddress"] for n in ray.nodes() if n["NodeID"] == node_id)
        logs = ray._private.worker._global_node.get_logs_dir_path()
    return NodePlace(str(node_id or ""), str(ip or ""), str(logs or ""))


class _StopWatch:
    """`stop_requested` for run_tasks: a cancel or stop from the command, or its end."""

    def __init__(self, commands: Connection) -> None:
        self.commands = commands
        self.leave = False

    def __call__(self) -> bool:
        try:
            if not self.commands.poll():
                return False
            kind = self.commands.recv()[0]
        except (EOFError, OSError):
            kind = "stop"
        self.leave = kind == "stop"
        return kind in ("cancel", "stop")


def serve(commands: Connection, replies: Connection) -> None:
    """Run what the command sends until it says stop or goes away."""
    while True:
        try:
            message = commands.recv()
        except (EOFError, OSError):
            return
        if message[0] == "stop":
            return
        if message[0] != "run":
            continue  # a cancel that came after its run ended
        _, body, jobs, spec, cpus, labels = message
        watch = _StopWatch(commands)
        try:
            run_tasks(body, jobs, spec, cpus, lambda note: replies.send(("note", note)),
                      labels, watch)
        except TasksStopped:
            replies.send(("stopped",))
            if watch.leave:
                return
        except StreamAsrError as exc:
            replies.send(("error", str(exc)))
        except Exception as exc:  # never a silent death: the command says it
            replies.send(("error", f"the Ray driver failed: {type(exc).__name__}: {exc}"))
        else:
            replies.send(("end",))


def main(argv: Sequence[str]) -> int:
    """`python -m streamasr.cluster.driver COMMAND_FD REPLY_FD ADDRESS`."""
    commands = Connection(int(argv[0]), writable=False)
    replies = Connection(int(argv[1]), readable=False)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the command relays a stop as "cancel"
    try:
        try:
            info = connect(argv[2])
        except StreamAsrError as exc:
            replies.send(("error", str(exc)))
            return 1
        replies.send(("ready", info, node_place()))
        serve(commands, replies)
    except OSError:  # the command went away
        return 1
    finally:
        disconnect()
    return 0


if __name__ == "__main__":  # run as the module itself, so that what it sends unpickles
    from streamasr.cluster.driver import main as driver_main

    sys.exit(driver_main(sys.argv[1:]))
