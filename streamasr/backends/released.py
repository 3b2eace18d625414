"""Latency budgets of released models, from the catalog's record (nothing downloaded): a
Zipformer export's metadata values, or a NeMo model's trained look-aheads."""

from __future__ import annotations

from dataclasses import replace

from streamasr.analysis.latency import LatencyBudget
from streamasr.backends.nemo.budget import nemo_budget
from streamasr.backends.sherpa.budget import budget_from_published, published_export
from streamasr.distribution import catalog
from streamasr.errors import ModelMismatchError


def catalog_budget(name: str, chunk: int | None = None) -> LatencyBudget:
    """The budget of any catalog model from its recorded settings: a Zipformer export, or
    a NeMo `att_context_size` (`--chunk` picks among the trained look-aheads, in 50 Hz
    frames: 80 ms = 4)."""
    entry = catalog.lookup(name)
    if entry.kind == "punctuation":
        raise ModelMismatchError(
            f"{name} ({entry.name}) is a punctuation model (for `streamasr file --punctuate`): "
            "it has no latency budget; pass a speech model to --model (`streamasr models list`)"
        )
    if entry.exports:
        return budget_from_published(published_export(name, chunk))
    contexts = entry.att_context_sizes
    if chunk is not None:
        contexts = tuple(a for a in contexts if a.chunk == chunk)
        if not contexts:
            have = ", ".join(
                f"{a.chunk} ([{a.left},{a.right}], {a.chunk_ms:.0f} ms)"
                for a in entry.att_context_sizes
            )
            raise ModelMismatchError(
                f"{entry.name} was not trained for --chunk {chunk}; its chunks are {have} "
                "(50 Hz frames)"
            )
    context = contexts[0]
    budget = nemo_budget(context.left, context.right)
    trained = ", ".join(f"[{a.left},{a.right}]" for a in entry.att_context_sizes)
    note = (
        f"{entry.name} ({entry.engine}): trained look-aheads {trained}; "
        "pick another with --chunk (50 Hz frames)"
    )
    return replace(
        budget, title=f"{budget.title} ({entry.name}, catalog settings)",
        settings=dict(budget.settings, model=entry.name, engine=entry.engine),
        notes=(*budget.notes, note),
    )
