"""A real multi-node Ray cluster on 127.0.0.1: a head and worker nodes, each its own
`ray start --block` process (own raylet, object store and workers), started and stopped by
the tests. Small: one CPU and a small object store per node, no dashboard."""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
START_LIMIT_S = 180.0  # three nodes on a loaded 2-core machine
OBJECT_STORE_BYTES = 80 * 1024 * 1024
STARTED = "Ray runtime started"


def ray_cli() -> str:
    """The `ray` command beside this Python (ray is installed by scripts/test.sh)."""
    found = Path(sys.executable).parent / "ray"
    if found.is_file():
        return str(found)
    path = shutil.which("ray")
    if path is None:
        raise RuntimeError("the ray command is missing: pip install -e '.[ray]'")
    return path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def children(pid: int) -> list[int]:
    """Every descendant of `pid` (from /proc)."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        parents.setdefault(ppid, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def command_name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


@dataclass
class Node:
    name: str
    process: subprocess.Popen[bytes]
    log: Path
    cache: Path  # the node's own STREAMASR_HOME: models pulled by name come from here
    killed: bool = False

    def started(self) -> bool:
        """`ray start` says so once the node's processes run."""
        return STARTED in self.log.read_text(errors="replace")

    def raylet(self) -> int | None:
        return next((p for p in children(self.process.pid) if command_name(p) == "raylet"),
                    None)

    def kill_raylet(self) -> int:
        """SIGKILL this node's raylet: the node is lost, its running tasks with it."""
        pid = self.raylet()
        if pid is None:
            raise RuntimeError(f"{self.name} has no raylet; log: {self.log.read_text()[-2000:]}")
        os.kill(pid, signal.SIGKILL)
        self.killed = True
        return pid

    def kill_agent(self, prefix: str = "ray::RuntimeEnv") -> int:
        """SIGKILL one of this node's Ray agents (by its process name); its raylet follows."""
        pid = next((p for p in children(self.process.pid) if command_name(p).startswith(prefix)),
                   None)
        if pid is None:
            raise RuntimeError(f"{self.name} has no {prefix} process")
        os.kill(pid, signal.SIGKILL)
        self.killed = True
        return pid

    def stop(self) -> None:
        """End the node's processes: its `ray start --block` ends the ones it started."""
        family = [self.process.pid, *children(self.process.pid)]
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                pass
        for pid in family:  # whatever outlived it, by its own pid
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        if self.process.poll() is None:
            self.process.wait(10)


@dataclass
class Cluster:
    address: str
    temp: Path
    nodes: list[Node] = field(default_factory=list)

    @property
    def token(self) -> Path:
        return self.temp / "auth_token"

    @property
    def env(self) -> dict[str, str]:
        """The environment a driver (`python -m streamasr ... --ray ADDRESS`) runs in."""
        return node_env(self.token)

    def live_worker(self) -> Node:
        """A worker node (not the head) that has not been killed."""
        return next(n for n in self.nodes[1:] if not n.killed)

    def stop(self) -> None:
        for node in reversed(self.nodes):
            node.stop()
        shutil.rmtree(self.temp, ignore_errors=True)


def node_env(token: Path | None = None) -> dict[str, str]:
    """Nodes and drivers: this checkout importable, no usage reports, the cluster's own
    authentication token (Ray turns token authentication on for `ray start` clusters)."""
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "PYTHONPATH": str(REPO)}
    env.pop("RAY_ADDRESS", None)
    if token is not None:
        env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(token))
    return env


def _start(name: str, args: list[str], temp: Path) -> Node:
    log = temp / f"{name}.log"
    cache = temp / f"cache-{name}"
    cache.mkdir()
    with log.open("wb") as out:
        process = subprocess.Popen(
            [ray_cli(), "start", "--block", "--disable-usage-stats", "--node-ip-address",
             "127.0.0.1", "--num-cpus", "1", "--object-store-memory", str(OBJECT_STORE_BYTES),
             *args],
            cwd=REPO, env={**node_env(temp / "auth_token"), "STREAMASR_HOME": str(cache)},
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )
    return Node(name, process, log, cache)


def alive_nodes(address: str, token: Path) -> int:
    """Nodes the cluster's GCS counts alive (asked from a short-lived driver)."""
    code = (f"import ray; ray.init(address={address!r}, logging_level='ERROR', "
            "log_to_driver=False); print(sum(1 for n in ray.nodes() if n['Alive']))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=node_env(token), cwd=REPO, timeout=120)
    return int(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else 0


def start_cluster(workers: int = 2) -> Cluster:
    """A head and `workers` worker nodes; returns once all of them are alive.

    Nodes start one after the other, and a node that gives up (Ray waits 30 s for a raylet
    to register, which a loaded 2-core machine can miss) is started again, twice at most.
    """
    temp = Path(tempfile.mkdtemp(prefix="streamasr-ray-"))
    port = free_port()
    address = f"127.0.0.1:{port}"
    cluster = Cluster(address, temp)
    cluster.token.write_text(secrets.token_hex(32))
    deadline = time.monotonic() + START_LIMIT_S
    try:
        head = ["--head", "--port", str(port), "--include-dashboard", "false",
                "--ray-client-server-port", str(free_port())]
        cluster.nodes.append(_start_node(cluster, "head", head, deadline))
        for i in range(workers):
            name = f"worker{i + 1}"
            cluster.nodes.append(_start_node(cluster, name, ["--address", address], deadline))
        while alive_nodes(address, cluster.token) < workers + 1:
            _check_running(cluster, deadline)
    except BaseException:
        cluster.stop()
        raise
    return cluster


def _start_node(cluster: Cluster, name: str, args: list[str], deadline: float) -> Node:
    for attempt in range(3):
        node = _start(f"{name}-{attempt}" if attempt else name, args, cluster.temp)
        while not node.started() and node.process.poll() is None:
            if time.monotonic() > deadline:
                node.stop()
                raise RuntimeError(f"the Ray cluster did not come up in {START_LIMIT_S:.0f} s")
            time.sleep(0.5)
        if node.started():
            return node
        node.stop()
    raise RuntimeError(f"ray node {name} did not start: {node.log.read_text()[-3000:]}")


def _check_running(cluster: Cluster, deadline: float) -> None:
    for node in cluster.nodes:
        if node.process.poll() is not None:
            raise RuntimeError(f"ray node {node.name} exited: {node.log.read_text()[-3000:]}")
    if time.monotonic() > deadline:
        raise RuntimeError(f"the Ray cluster did not come up in {START_LIMIT_S:.0f} s")
    time.sleep(0.5)
