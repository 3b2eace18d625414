"""The registry's entry for NeMo: which models it reads, its options, and its loader.

Importing this module imports neither torch nor NeMo nor the engine.
"""

from __future__ import annotations

from pathlib import Path

from streamasr.analysis.latency import LatencyBudget
from streamasr.backends.base import (
    BackendEntry,
    BudgetSettings,
    EngineOptions,
    Recognizer,
    Released,
)
from streamasr.backends.nemo.options import LACKS, OPTIONS, NemoSettings
from streamasr.distribution.catalog import CatalogEntry
from streamasr.distribution.local_models import FolderFacts
from streamasr.errors import ModelError
from streamasr.whole_file import check_file

#: what `--gpu` / `--backend nemo` run without --model: NVIDIA's released hybrid model with
#: four trained look-aheads, once pulled (`streamasr models pull nemo-fastconformer-multi`)
DEFAULT_MODEL = "stt_en_fastconformer_hybrid_large_streaming_multi"
#: the largest released FastConformer .nemo files are a few GB
MAX_NEMO_BYTES = 16 << 30


def resolve_model(model: str | None) -> Path:
    """A .nemo file, a folder holding exactly one (as the model store installs them), or a
    catalog or pulled name; without one, the default released model if it was pulled."""
    from streamasr.distribution import cache, catalog, manifest

    model = model or DEFAULT_MODEL
    path = Path(model)
    if not path.exists():
        if catalog.find(model) is not None or cache.find_cached(model) is not None:
            path = cache.require_cached(model)  # a pulled .nemo lives in its own folder
    manifest.check_model_path(path)  # a pulled model whose files changed is refused
    if path.is_dir():
        found = sorted(path.glob("*.nemo"))
        if len(found) != 1:
            raise ModelError(
                f"{path} holds {len(found)} .nemo files; give the one to use as --model"
            )
        return found[0]
    # a device or a FIFO would be read as a tar stream without end
    check_file(path, "NeMo model", MAX_NEMO_BYTES, "give a .nemo file or its folder", ModelError)
    return path


def _load(model: str | None, options: EngineOptions) -> Recognizer:
    """The registry's loader: EngineOptions -> NemoRecognizer."""
    from streamasr.backends.nemo.engine import NemoRecognizer
    from streamasr.backends.nemo.loading import check_device

    own = NemoSettings.of(options)
    check_device(options.device)  # a missing CUDA or NeMo is said before anything about the model
    return NemoRecognizer(
        resolve_model(model),
        device=options.device,
        att_context_size=own.att_context_size,
        decoder=own.decoder,
        threads=options.threads if options.device == "cpu" else None,
        trust_config=own.trust_model_config,
    )


def _recognises(model: str | None) -> bool:
    """File names only (no engine import): a .nemo file, or a folder holding one."""
    if not model:
        return False
    path = Path(model)
    if not path.exists():
        from streamasr.distribution import cache

        path = cache.find_cached(model) or path  # a .nemo pulled under a name of its own
    return path.suffix == ".nemo" or (path.is_dir() and any(path.glob("*.nemo")))


def _arithmetic(settings: BudgetSettings) -> LatencyBudget | None:
    """NeMo's arithmetic for `att_context_size=[L, R]` alone (no model read); defaults follow
    NeMo's shipped cache-aware config (17 layers, 8x subsampling)."""
    from streamasr.analysis.mask import parse_att_context_size
    from streamasr.backends.nemo.budget import nemo_budget

    given = settings.get("att_context_size")
    if given is None:
        return None
    left, right = parse_att_context_size(str(given))
    return nemo_budget(
        left, right, style=str(settings.get("style") or "chunked_limited"),
        layers=int(settings.get("layers") or 17), subsampling=int(settings.get("subsampling") or 8),
    )


def _check_file(path: Path) -> None:
    """What NeMo would run or read on load is refused before a pulled `.nemo` is installed."""
    from streamasr.backends.nemo.archive import check_file

    check_file(path)


def _describe(directory: Path) -> FolderFacts | None:
    return FolderFacts(engine="nemo") if any(directory.glob("*.nemo")) else None



def _released(entry: CatalogEntry) -> Released:
    """What the catalog records of one of its releases (chunks, budget), read by this engine."""
    from streamasr.backends.nemo.released import released

    return released(entry)


BACKEND = BackendEntry(
    name="nemo",
    summary="NVIDIA NeMo cache-aware FastConformer (.nemo), CUDA or CPU",
    recognises=_recognises,
    load=_load,
    options=OPTIONS,
    devices=("cpu", "cuda"),
    label="NeMo",
    lacks=LACKS,
    arithmetic=_arithmetic,
    released=_released,
    check_file=_check_file,
    describe=_describe,
)
