"""sherpa-onnx's released models as the catalog records them: Zipformer exports (model type,
chunk, left context) and NeMo FastConformer exports (their trained look-ahead, NeMo's
arithmetic); a punctuation release has no budget."""

from __future__ import annotations

from streamasr.analysis.latency import LatencyBudget
from streamasr.backends.base import Released
from streamasr.backends.nemo.released import released_contexts
from streamasr.backends.sherpa.budget import budget_from_published, exports_of, published_export
from streamasr.distribution.catalog import CatalogEntry
from streamasr.errors import ModelMismatchError


def released(entry: CatalogEntry) -> Released:
    """Chunks, record and budget of a sherpa-onnx release, from its `engine_data`."""
    contexts = [(int(e[1]), int(e[2])) for e in entry.engine_data if e[0] == "fastconformer"]
    if contexts:
        return released_contexts(entry, contexts)
    return Released(
        chunks=tuple(dict.fromkeys(e.chunk for e in exports_of(entry))),
        record={},
        budget=lambda chunk: _zipformer_budget(entry, chunk),
    )


def _zipformer_budget(entry: CatalogEntry, chunk: int | None) -> LatencyBudget:
    if entry.kind == "punctuation":
        raise ModelMismatchError(
            f"{entry.short_name} ({entry.name}) is a punctuation model (for `streamasr file "
            "--punctuate`): it has no latency budget; pass a speech model to --model "
            "(`streamasr models list`)"
        )
    return budget_from_published(published_export(entry.name, chunk))
