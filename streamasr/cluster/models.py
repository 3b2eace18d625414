"""The model a cluster run decodes with: the same files on every node, or no decoding there.

The driver loads the model first (every option is checked there, in seconds) and records the
sha256 of each file it loaded. A worker process resolves the same model on its own node (a
pulled name from that node's cache, checked against its install manifest like every local
use; or a path on a shared file system), loads it once, and compares the sha256 of every file
it loaded with the driver's. A released name that a node has not installed yet is pulled
into that node's cache first, from where the driver would download it and held to the
archive checksum the driver knows (the catalog's, or the one pinned when the driver pulled).
A node whose copy differs refuses to run: a task there fails with a ClusterError naming the
node and the file, and the run stops rather than mixing results from two models.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from dataclasses import dataclass, replace

from streamasr.backends.base import Recognizer
from streamasr.backends.plan import LoadPlan
from streamasr.errors import ClusterError

log = logging.getLogger("streamasr")


@dataclass(frozen=True)
class PullSource:
    """A released model as the driver would download it: name, URL, archive sha256."""

    name: str
    url: str | None
    sha256: str | None


@dataclass(frozen=True)
class ModelSpec:
    """What a worker loads, and the checksums its copy must have (all of it pickles)."""

    plan: LoadPlan  # the driver's: the model as given (a pulled name or a path), its settings
    files: tuple[tuple[str, str], ...]  # (file name, sha256) as the driver loaded them
    source: PullSource | None = None  # where a node without the model pulls it from

    @property
    def model(self) -> str | None:
        return self.plan.model

    @property
    def cpus(self) -> int:
        """CPUs a task asks for: one per engine thread (1 by default: one engine per CPU)."""
        return max(1, self.plan.threads)


def model_spec(plan: LoadPlan, recognizer: Recognizer) -> ModelSpec:
    """The spec of a model loaded on the driver by `plan`, with the sha256 of each file."""
    from streamasr.distribution.manifest import sha256_file

    files = tuple((p.name, sha256_file(p)) for p in recognizer.info.model_files)
    return ModelSpec(plan, files, pull_source(plan.model))


def pull_source(model: str | None) -> PullSource | None:
    """Where nodes pull `model` from, if it is a released name (not a path)."""
    from pathlib import Path

    from streamasr.distribution.cache import cache_dir
    from streamasr.distribution.catalog import find
    from streamasr.distribution.install import pull_target
    from streamasr.distribution.pins import read_pin

    if not model or Path(model).expanduser().exists() or find(model) is None:
        return None
    target = pull_target(model)
    sha256 = target.expected_sha256
    if sha256 is None:  # no published checksum: the driver's own download is the reference
        pin = read_pin(cache_dir(), target.name)
        sha256 = pin.sha256 if pin is not None else None
    return PullSource(target.name, target.url, sha256)


_LOADED: dict[str, Recognizer] = {}
_LOCK = threading.Lock()


def node_name() -> str:
    """This node as messages name it: host name and pid of the worker process."""
    return f"{socket.gethostname()} (worker pid {os.getpid()})"


def load_verified(spec: ModelSpec) -> Recognizer:
    """The spec's model in this worker process: loaded, verified and warmed up once."""
    key = repr(spec)
    with _LOCK:
        recognizer = _LOADED.get(key)
        if recognizer is None:
            recognizer = _load(spec)
            _LOADED[key] = recognizer
    return recognizer


def _load(spec: ModelSpec) -> Recognizer:
    from streamasr.bench.runner import warm_up
    from streamasr.errors import ModelError

    try:
        _pull_if_missing(spec.source)
        # a pulled copy: every file against its manifest, whatever the driver's --verify
        recognizer = replace(spec.plan, verify=True).load()
    except ModelError as exc:
        raise ClusterError(f"node {node_name()} cannot load the model: {exc}") from None
    check_files(spec, recognizer)
    warm_up(recognizer)
    return recognizer


def _pull_if_missing(source: PullSource | None) -> None:
    """Install a released model this node has not got, checksummed as `models pull` does."""
    from streamasr.backends.registry import install_hooks
    from streamasr.distribution.cache import find_cached
    from streamasr.distribution.install import pull

    if source is None or find_cached(source.name) is not None:
        return
    log.info("node %s: pulling %s into its model cache", node_name(), source.name)
    pull(source.name, url=source.url, sha256=source.sha256, hooks=install_hooks())


def check_files(spec: ModelSpec, recognizer: Recognizer) -> None:
    """Refuse a node whose model files are not byte for byte the driver's."""
    from streamasr.distribution.manifest import sha256_file

    expected = dict(spec.files)
    loaded = {p.name: p for p in recognizer.info.model_files}
    if set(loaded) != set(expected):
        raise ClusterError(
            f"node {node_name()} loaded other model files ({', '.join(sorted(loaded))}) than "
            f"the driver ({', '.join(sorted(expected))}); install the same model on every node"
        )
    for name, path in sorted(loaded.items()):
        if sha256_file(path) != expected[name]:
            raise ClusterError(
                f"node {node_name()}: its copy of {path} fails verification (sha256 differs "
                "from the driver's); refusing to decode with it. Reinstall the model there "
                "(`streamasr models pull NAME --force`) or give a path every node shares"
            )
