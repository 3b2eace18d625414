"""Submitting tasks to the cluster and collecting what each says as it finishes.

Runs in the driver process (`streamasr.cluster.driver`). Each task is submitted with the
CPUs its engine uses, Ray retries it (up to `MAX_RETRIES` times) when its worker process or
node dies, and every small note a task returns goes to `on_note` as soon as that task is
done, for the progress display. A task that fails on purpose (a StreamAsrError: the node's
model failed verification) stops the run with that message; Ray does not retry those.
Whatever stops the loop (an error, a stop asked for by the command), the tasks not yet done
are cancelled (their worker processes are killed) before the exception goes on up.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Sequence
from typing import Any

from streamasr.cluster.connect import require_ray
from streamasr.errors import ClusterError, StreamAsrError

log = logging.getLogger("streamasr")

#: Times Ray runs a task again after its worker process or node died.
MAX_RETRIES = 3
#: How often the driver wakes while it waits (a stop request is seen at least this often).
WAIT_S = 0.2


class TasksStopped(Exception):
    """The command asked the driver to stop (Ctrl-C, SIGTERM, or it went away)."""


def run_tasks(
    body: Callable[..., Any],
    jobs: Sequence[Any],
    spec: Any,
    cpus: int,
    on_note: Callable[[Any], None],
    labels: Sequence[str],
    stop_requested: Callable[[], bool] = lambda: False,
) -> None:
    """Run `body(spec, job)` as one Ray task per job; `on_note(note)` for each as it ends.
    `labels[i]` names job i in errors; `stop_requested()` true cancels the rest."""
    ray = require_ray()
    remote = ray.remote(num_cpus=cpus, max_retries=MAX_RETRIES)(body)
    spec_ref = ray.put(spec)  # one copy in the object store, not one per task
    refs = {remote.remote(spec_ref, job): label for job, label in zip(jobs, labels, strict=True)}
    pending = list(refs)
    try:
        while pending:
            ready, pending = ray.wait(pending, num_returns=len(pending), timeout=WAIT_S)
            for ref in ready:
                on_note(_result(ray, ref, refs[ref]))
            if pending and stop_requested():
                raise TasksStopped
    finally:
        for ref in pending:
            with contextlib.suppress(Exception):
                ray.cancel(ref, force=True)


def _result(ray: Any, ref: Any, what: str) -> Any:
    """The task's note; its failure as one ClusterError line."""
    from ray import exceptions

    try:
        return ray.get(ref)
    except exceptions.RayTaskError as exc:
        cause = getattr(exc, "cause", None)
        if isinstance(cause, StreamAsrError):
            raise ClusterError(str(cause)) from None
        raise ClusterError(f"the task for {what} failed: {cause or exc}") from None
    except exceptions.RayError as exc:  # retries used up: worker or node deaths
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ClusterError(
            f"the task for {what} did not finish after {MAX_RETRIES} retries ({first}); "
            "check the nodes with `ray status`"
        ) from None
