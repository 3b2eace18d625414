"""`streamasr latency --model` for a sherpa-onnx model: its budget from the export's metadata
(or the catalog's record of a released one). Measuring is not the engine's: with `measure`,
this is the budget of the files `latency --measure` then loads and times (commands/latency.py,
session/measure.py), and a model it cannot load is refused here, before anything loads."""

from __future__ import annotations

from pathlib import Path

from streamasr.analysis.latency import LatencyBudget
from streamasr.backends.base import EngineOptions
from streamasr.backends.sherpa.budget import budget_from_metadata, exports_of
from streamasr.backends.sherpa.modeldir import resolve_model
from streamasr.backends.sherpa.onnx_meta import read_encoder_metadata
from streamasr.backends.sherpa.options import SherpaSettings
from streamasr.backends.sherpa.released import released
from streamasr.distribution import cache, catalog
from streamasr.distribution.local_models import list_bundled
from streamasr.errors import ModelError, UsageError


def model_budget(model: str | None, options: EngineOptions, measure: bool) -> LatencyBudget:
    """A sherpa-onnx model's budget: a catalog name, an encoder file, a bundled model or a
    directory.

    Catalog names resolve through the catalog (settings, no download needed) and, for
    `--measure`, through the model cache the way `file --model NAME` finds them: `measure`
    asks for the budget of the files that will be loaded.
    """
    own = SherpaSettings.of(options)
    chunk, fp32 = own.chunk, own.fp32

    entry = catalog.find(model) if model is not None else None
    if model is not None and entry is not None and not Path(model).exists():
        if not measure:
            return released(entry).budget(chunk)
        if not exports_of(entry):
            raise UsageError(
                f"--measure runs the model's files; {entry.name} is a NeMo FastConformer "
                "release, which is not downloaded here: pass --model PATH.nemo (its .nemo "
                "file or folder) to measure it, or drop --measure for its derived budget"
            )
        if cache.find_cached(model) is None:
            raise UsageError(
                f"--measure runs the real engine, so it needs the model's files; {model} is "
                f"not in the cache {cache.cache_dir()}. Download it with "
                f"`streamasr models pull {model}`, or pass --model DIR"
            )
    elif model is not None and model.endswith(".onnx") and Path(model).is_file():
        if measure:
            raise UsageError("--measure needs the model directory, not one .onnx file")
        meta = read_encoder_metadata(model)
        if chunk is not None and chunk != meta.chunk:
            raise UsageError(
                f"{Path(model).name} was exported for chunk {meta.chunk}, not --chunk {chunk}"
            )
        return budget_from_metadata(meta)
    elif model is not None and not Path(model).exists() and model not in list_bundled():
        if cache.find_cached(model) is None:  # a custom name pulled with --url/--archive
            raise ModelError(
                f"unknown model {model!r}: not a directory, a released model or a bundled one; "
                f"{catalog.did_you_mean(model, list_bundled())}. Or pass a model directory"
            )
    files = resolve_model(model, chunk, prefer_int8=not fp32)
    return budget_from_metadata(files.metadata)
