"""The model-loading plan: which model, which engine, with what settings, made once.

Every path that opens a model goes through one `LoadPlan`: `file`, `mic`, `bench` (its
settings, its worker processes, its Ray shards), `serve` (one process or each of --workers),
`latency`, a Ray task and the library's `open_model`. The plan is made where the options are
read (`make_plan`: the chosen backend parses and range-checks them, so a bad one is a usage
error before anything loads); it pickles, so a worker process or a Ray node loads what the
driver planned, with `load()`. What a path does around the load (a download offer, checking
a node's files, a warm-up) stays that path's own.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from streamasr.backends import registry
from streamasr.backends.base import BackendEntry, EngineOptions, Recognizer


@dataclass(frozen=True)
class LoadPlan:
    """What to load: the model as given, the backend asked for (None: the one the model
    fits), its parsed settings (threads and device among them), and whether to hash a pulled
    model's files before use."""

    model: str | None
    backend: str | None = None
    engine: EngineOptions = field(default_factory=EngineOptions)
    verify: bool = False

    @property
    def threads(self) -> int:
        return self.engine.threads

    @property
    def device(self) -> str:
        return self.engine.device

    def entry(self) -> BackendEntry:
        """The backend that loads the model (chosen by name, nothing loaded)."""
        return registry.choose_backend(self.model, self.backend)

    def with_own(self, own: Mapping[str, object]) -> LoadPlan:
        """The same plan with the backend's own settings `own` (one point of a sweep)."""
        return replace(self, engine=replace(self.engine, own=dict(own), swept=None))

    def load(self, entry: BackendEntry | None = None) -> Recognizer:
        """Load the model: a pulled copy's files hashed first when `verify`, then the backend
        opens it. `entry`: the backend already chosen for the plan (not chosen twice)."""
        if self.verify:
            from streamasr.distribution.cache import verify_before_use

            verify_before_use(self.model)
        return (entry or self.entry()).load(self.model, self.engine)


def make_plan(
    model: str | None,
    backend: str | None = None,
    given: Mapping[str, object] | None = None,
    *,
    threads: int | None = None,
    device: str = "cpu",
    verify: bool = False,
    entry: BackendEntry | None = None,
    sweep: bool = False,
) -> LoadPlan:
    """The plan for `model`: `given` (option name -> text or value) parsed and checked by the
    chosen backend (`entry`, else the one `backend` names or the model fits)."""
    entry = entry or registry.choose_backend(model, backend)
    engine = registry.engine_options(entry, given, threads=threads, device=device, sweep=sweep)
    return LoadPlan(model, backend, engine, verify)
