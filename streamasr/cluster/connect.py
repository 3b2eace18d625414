"""Joining (or starting) the Ray cluster, and what it is made of, for the run record.

Ray is imported here and only when --ray is given. A local cluster (`--ray` alone) gets this
machine's cores and no dashboard; an address joins a running cluster. Worker processes import
streamasr themselves: every node needs the same streamasr (and engine) installed, and the
inputs and output folder on a path every node sees (a shared file system).
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from streamasr.cluster.address import AUTO, LOCAL, check_address
from streamasr.errors import ClusterError, DependencyError
from streamasr.extras import install_hint

log = logging.getLogger("streamasr")

CONNECT_TIMEOUT_S = 5.0


def require_ray() -> ModuleType:
    """The ray package, or one line saying how to install it."""
    try:
        import ray
    except ImportError:
        raise DependencyError(f"--ray needs the ray package: {install_hint('ray')}") from None
    return ray


@dataclass(frozen=True)
class ClusterInfo:
    """The cluster a run used: for the run record and the summary line."""

    address: str
    nodes: int
    cpus: float
    ray_version: str

    def to_record(self) -> dict[str, Any]:
        return {"address": self.address, "nodes": self.nodes, "cpus": self.cpus,
                "ray_version": self.ray_version}

    def describe(self) -> str:
        cpus = int(self.cpus) if self.cpus == int(self.cpus) else self.cpus
        return f"Ray {self.ray_version} cluster: {self.nodes} node(s), {cpus} CPU(s)"


def connect(address: str) -> ClusterInfo:
    """Join the cluster at `address` (or start one here for 'local'); raise ClusterError
    with what to check when it cannot be reached."""
    address = check_address(address)
    ray = require_ray()
    check_reachable(address)
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # never phone home from a CLI
    kwargs: dict[str, Any] = {"logging_level": logging.ERROR, "log_to_driver": False,
                              "configure_logging": True}
    if address == LOCAL:
        kwargs.update(address="local", include_dashboard=False)
    else:
        kwargs.update(address=address)
    try:
        ray.init(**kwargs)
    except Exception as exc:  # Ray raises many kinds: refused, timed out, wrong token
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ClusterError(
            f"--ray {address}: cannot join the cluster ({reason}); check that `ray start "
            "--head` runs there and that the address and port are right"
        ) from None
    return describe_cluster(address)


def check_reachable(address: str, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """HOST:PORT and ray://HOST:PORT: something must answer there (Ray itself would retry
    for minutes before saying so)."""
    if address in (LOCAL, AUTO):
        return
    host, _, port = address.removeprefix("ray://").rpartition(":")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise ClusterError(
            f"--ray {address}: nothing answers there ({reason}); start the head node with "
            f"`ray start --head --port {port}`, or check the address"
        ) from None


def describe_cluster(address: str) -> ClusterInfo:
    """Nodes alive now and their CPUs, and the Ray version."""
    ray = require_ray()
    alive = [n for n in ray.nodes() if n.get("Alive")]
    cpus = sum(float(n.get("Resources", {}).get("CPU", 0)) for n in alive)
    return ClusterInfo(address, len(alive), cpus, ray.__version__)


def disconnect() -> None:
    """Leave the cluster (and stop it, when this run started it)."""
    ray = require_ray()
    with contextlib.suppress(Exception):
        ray.shutdown()
