"""NeMo's released models as the catalog records them: the `att_context_size` pairs each was
trained with (sherpa-onnx's FastConformer exports carry one too), read here and nowhere else."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from streamasr.analysis.latency import LatencyBudget
from streamasr.backends.base import Released
from streamasr.backends.nemo.budget import nemo_budget
from streamasr.distribution.catalog import CatalogEntry
from streamasr.errors import ModelMismatchError

STEP_MS = 80.0  # FastConformer: 8x subsampling of 10 ms frames
CHUNK_FRAME_MS = 20.0  # --chunk counts 50 Hz frames: 80 ms = 4


def chunk_of(right: int) -> int:
    """The chunk of a trained look-ahead in 50 Hz frames, the unit of `--chunk`."""
    return int((right + 1) * STEP_MS // CHUNK_FRAME_MS)


def contexts_budget(entry: CatalogEntry, contexts: Sequence[tuple[int, int]],
                    chunk: int | None) -> LatencyBudget:
    """The budget of a release's trained look-ahead: the first, or the one `--chunk` picks."""
    chosen = [c for c in contexts if chunk is None or chunk_of(c[1]) == chunk]
    if not chosen:
        have = ", ".join(f"{chunk_of(r)} ([{left},{r}], {(r + 1) * STEP_MS:.0f} ms)"
                         for left, r in contexts)
        raise ModelMismatchError(
            f"{entry.name} was not trained for --chunk {chunk}; its chunks are {have} "
            "(50 Hz frames)"
        )
    budget = nemo_budget(*chosen[0])
    trained = ", ".join(f"[{left},{right}]" for left, right in contexts)
    note = (
        f"{entry.name} ({entry.engine}): trained look-aheads {trained}; "
        "pick another with --chunk (50 Hz frames)"
    )
    return replace(
        budget, title=f"{budget.title} ({entry.name}, catalog settings)",
        settings=dict(budget.settings, model=entry.name, engine=entry.engine),
        notes=(*budget.notes, note),
    )


def released_contexts(entry: CatalogEntry, contexts: Sequence[tuple[int, int]]) -> Released:
    """What a release trained with these look-aheads is, for `models list` and `latency`."""
    return Released(
        chunks=tuple(chunk_of(right) for _, right in contexts),
        record={"att_context_sizes": [list(c) for c in contexts]},
        budget=lambda chunk: contexts_budget(entry, contexts, chunk),
    )


def released(entry: CatalogEntry) -> Released:
    """A NeMo release: its `engine_data` is its trained (left, right) pairs."""
    return released_contexts(entry, [(int(e[0]), int(e[1])) for e in entry.engine_data])
