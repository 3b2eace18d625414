"""The registry's entry for sherpa-onnx: which models it reads, its options, and its loader.

Importing this module imports neither sherpa_onnx nor the engine: the registry asks every
entry whether it recognises a model before one is loaded.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from streamasr.analysis.latency import LatencyBudget
from streamasr.backends.base import (
    BackendEntry,
    BackendInfo,
    BudgetSettings,
    EngineOptions,
    Recognizer,
    Released,
)
from streamasr.backends.sherpa.options import OPTIONS, SherpaSettings
from streamasr.distribution.catalog import CatalogEntry
from streamasr.distribution.local_models import FolderFacts

NAME = "sherpa-onnx"


def _load(model: str | None, options: EngineOptions) -> Recognizer:
    """Find the export for the chunk (and precision), then load it."""
    from streamasr.backends.sherpa.engine import SherpaRecognizer
    from streamasr.backends.sherpa.modeldir import resolve_model

    own = SherpaSettings.of(options)
    files = resolve_model(model, own.chunk, prefer_int8=not own.fp32)
    return SherpaRecognizer(files, options)


def _batching_note(settings: Sequence[tuple[str, BackendInfo]]) -> str | None:
    """int8 batches are not bit-exact: which settings, and --fp32 only where every int8 file
    has an fp32 twin (elsewhere --fp32 is refused)."""
    from streamasr.backends.sherpa.modeldir import has_fp32_export, int8_files

    int8 = [(name, info) for name, info in settings if int8_files(info.model_files)]
    if not int8:
        return None
    fp32_there = all(has_fp32_export(info.model_files) for _, info in int8)
    advice = (
        "Use --fp32 for exact batching"
        if fp32_there
        else "This model has no fp32 export: use --streams 1 for exact rows"
    )
    return (
        f"note: the int8 encoder ({', '.join(name for name, _ in int8)}) quantises "
        "activations with one scale per batch: batch companions can move a token time or "
        "change a word, so the batched rows are not bit-exact with one stream (the "
        f"one-stream rows are). {advice}; see docs/performance.md"
    )


def _recognises(model: str | None) -> bool:
    """A folder with tokens.txt and .onnx files, a bundled name or a sherpa-onnx catalog name.

    sherpa-onnx is also the default backend, so this only has to be right when asked first.
    """
    from streamasr.distribution import catalog
    from streamasr.distribution.local_models import bundled_models_dir

    if model is None:
        return True
    entry = catalog.find(model)
    if entry is not None:
        return entry.engine == NAME
    path = Path(model)
    if not path.is_dir():
        path = bundled_models_dir() / model
    return (path / "tokens.txt").is_file()


def _budget(model: str | None, options: EngineOptions, measure: bool) -> LatencyBudget:
    """The latency budget of a model (streamasr latency --model); with `measure`, that of the
    files latency then loads to measure."""
    from streamasr.backends.sherpa.model_budget import model_budget

    return model_budget(model, options, measure)


def _arithmetic(settings: BudgetSettings) -> LatencyBudget | None:
    """Textbook zipformer2 arithmetic for a chunk alone (no model read)."""
    from streamasr.backends.sherpa.budget import budget_for_zipformer2_chunk

    chunk = settings.get("chunk")
    if chunk is None or settings.get("att_context_size") is not None:
        return None
    return budget_for_zipformer2_chunk(int(chunk))


def _prepare_folder(directory: Path) -> None:
    from streamasr.backends.sherpa.graph_cache import prepare_folder

    prepare_folder(directory)


def _describe(directory: Path) -> FolderFacts | None:
    from streamasr.backends.sherpa.modeldir import describe_folder

    return describe_folder(directory)



def _released(entry: CatalogEntry) -> Released:
    """What the catalog records of one of its releases (chunks, budget), read by this engine."""
    from streamasr.backends.sherpa.released import released

    return released(entry)


BACKEND = BackendEntry(
    name=NAME,
    summary="sherpa-onnx streaming Zipformer transducer / CTC exports, CPU",
    recognises=_recognises,
    load=_load,
    aliases=("sherpa",),
    options=OPTIONS,
    label="sherpa-onnx",
    budget=_budget,
    arithmetic=_arithmetic,
    released=_released,
    prepare_folder=_prepare_folder,
    describe=_describe,
    batching_note=_batching_note,
)
