"""A third engine with a released model of its own, for tests/test_engine_releases.py: its
catalog entry's `engine_data` is in words only this module reads (frames of 20 ms), and
nothing outside it names the engine but one registry line."""

from __future__ import annotations

from dataclasses import replace

from streamasr.analysis.latency import BudgetLine, LatencyBudget
from streamasr.backends.base import BackendEntry, EngineOptions, Recognizer, Released
from streamasr.distribution import catalog
from streamasr.distribution.catalog import CatalogEntry
from streamasr.errors import ModelMismatchError

#: its catalog row: a release like any other (names, URL, size), its engine and its data
RELEASE = replace(
    catalog.lookup("en"), name="toy-streaming-2026-12-05", aliases=("toy-en",),
    url="https://example.invalid/toy.tar.bz2", archive_sha256=None, engine="toy",
    engine_data=(("frames", 8), ("frames", 24)),
)


def _budget(entry: CatalogEntry, chunk: int | None) -> LatencyBudget:
    chunks = [int(frames) for _, frames in entry.engine_data]
    if chunk is not None and chunk not in chunks:
        raise ModelMismatchError(f"{entry.name} was released with chunks {chunks}, not {chunk}")
    ms = 20.0 * (chunk or chunks[0])
    line = BudgetLine("chunk_ms", "chunk", ms, "ms", "frames x 20 ms")
    return LatencyBudget(f"toy chunk {ms:.0f} ms", "toy", {"model": entry.name}, (line,))


def _released(entry: CatalogEntry) -> Released:
    chunks = tuple(int(frames) for _, frames in entry.engine_data)
    return Released(chunks, {"toy_frames": list(chunks)}, lambda chunk: _budget(entry, chunk))


def _load(model: str | None, options: EngineOptions) -> Recognizer:
    raise ModelMismatchError("the toy engine loads nothing")


BACKEND = BackendEntry(
    name="toy",
    summary="a toy engine with a released model (tests)",
    recognises=lambda model: False,
    load=_load,
    released=_released,
)
