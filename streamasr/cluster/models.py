"""The model a cluster run decodes with: the same files on every node, or no decoding there.

The driver loads the model first (every option is checked there, in seconds) and records the
sha256 of each file it loaded. A worker process resolves the same model on its own node (a
pulled name from that node's cache, checked against its install manifest like every local
use; or a path on a shared file system), loads it once, and compares the sha256 of every file
it loaded with the driver's. A node whose copy differs refuses to run: a task there fails
with a ClusterError naming the node and the file, and the run stops rather than mixing
results from two models.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from dataclasses import dataclass
from typing import Any

from streamasr.backends.base import Recognizer
from streamasr.errors import ClusterError

log = logging.getLogger("streamasr")


@dataclass(frozen=True)
class ModelSpec:
    """What a worker loads, and the checksums its copy must have (all of it pickles)."""

    model: str | None  # as given on the command line: a pulled name or a path
    backend: str | None
    engine: Any  # EngineOptions: the registry's own settings, passed through untouched
    files: tuple[tuple[str, str], ...]  # (file name, sha256) as the driver loaded them

    @property
    def cpus(self) -> int:
        """CPUs a task asks for: one per engine thread (1 by default: one engine per CPU)."""
        return max(1, int(getattr(self.engine, "threads", 1) or 1))


def model_spec(model: str | None, backend: str | None, engine: Any,
               recognizer: Recognizer) -> ModelSpec:
    """The spec of a model loaded on the driver, with the sha256 of each of its files."""
    from streamasr.distribution.manifest import sha256_file

    files = tuple((p.name, sha256_file(p)) for p in recognizer.info.model_files)
    return ModelSpec(model, backend, engine, files)


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
    from streamasr.backends.registry import load_recognizer
    from streamasr.bench.runner import warm_up
    from streamasr.distribution.cache import verify_before_use
    from streamasr.errors import ModelError

    try:
        verify_before_use(spec.model)  # a pulled copy: every file against its manifest
        recognizer = load_recognizer(spec.model, spec.engine, spec.backend)
    except ModelError as exc:
        raise ClusterError(f"node {node_name()} cannot load the model: {exc}") from None
    check_files(spec, recognizer)
    warm_up(recognizer)
    return recognizer


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
