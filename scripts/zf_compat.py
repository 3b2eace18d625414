"""Make the PyPI ``zipformer`` package importable beside a CPU-only torch 2.13.

Why this exists: ``zipformer`` 0.1.3 declares ``torch<2.8`` and imports
``atdataset``, ``torchaudio``, ``tqdm`` and ``torch.utils.tensorboard`` at module
level (its ``__init__`` pulls in the inference CLI, the exporter pulls in the
training CLI). ``atdataset``/``torchaudio`` do not import beside torch 2.13, and
pulling them in would replace the CPU torch with a multi-GB build.

The model code and ONNX exporter used by our scripts never call those names:
they are only used for data loading, SpecAugment, tensorboard logging and
progress bars in the package's own training/inference CLIs. So, *only when the
real module cannot be imported*, we register a minimal stand-in module in
``sys.modules``. Any stand-in that is actually called raises, so nothing can
silently depend on it. ``fix_random_seed`` is the one real function supplied,
because the package's optimizer module calls it.

It also sets ``K2_ONNX_EXPORT=1`` (the package then skips ``torch.compile`` of its
activation functions) and makes ``torch.onnx.export`` default to the TorchScript exporter
(``dynamo=False``): torch >= 2.9 defaults to the dynamo exporter, which cannot
trace this model's streaming code path.

Install the package without its pinned dependencies::

    pip install --no-deps zipformer==0.1.3 simple-sentencepiece onnxconverter_common
"""

from __future__ import annotations

import functools
import importlib
import importlib.machinery
import os
import random
import sys
import types
from typing import Any

import numpy as np
import torch

_INSTALLED = False


def _unavailable(name: str) -> Any:
    """Return a callable/class stand-in that refuses to run."""

    def _refuse(*_args: Any, **_kwargs: Any) -> Any:
        raise RuntimeError(
            f"{name} is a stand-in (see scripts/zf_compat.py); the real package "
            "is not installed because it does not import beside this torch."
        )

    return _refuse


def fix_random_seed(seed: int) -> None:
    """Seed python, numpy and torch (what atdataset.fix_random_seed does)."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def _can_import(name: str) -> bool:
    try:
        importlib.import_module(name)
    except Exception:  # noqa: BLE001 - a broken binary raises OSError etc., not only ImportError
        for key in [k for k in sys.modules if k == name or k.startswith(name + ".")]:
            del sys.modules[key]
        return False
    return True


def _stand_in(name: str, attrs: dict[str, Any]) -> None:
    module = types.ModuleType(name)
    # torch._dynamo walks sys.modules and needs a spec on every module.
    module.__spec__ = importlib.machinery.ModuleSpec(name, loader=None)
    module.__doc__ = "Stand-in registered by scripts/zf_compat.py (training-only names)."
    for key, value in attrs.items():
        setattr(module, key, value)
    sys.modules[name] = module


class _SpecAugmentStandIn:
    """Only used for SpecAugment during the package's own training loop."""

    def __init__(self, *_args: Any, **_kwargs: Any) -> None:
        raise RuntimeError("SpecAugment stand-in (scripts/zf_compat.py): not available here")


class _SummaryWriterStandIn:
    def __init__(self, *_args: Any, **_kwargs: Any) -> None:
        raise RuntimeError("tensorboard stand-in (scripts/zf_compat.py): not available here")


def install() -> None:
    """Register stand-ins (only for modules that do not import) and patch the exporter."""
    global _INSTALLED
    if _INSTALLED:
        return
    # The package wraps SwooshL/SwooshR in torch.compile unless this is set; the
    # compiled path cannot be exported and needs a C++ toolchain at first call.
    os.environ.setdefault("K2_ONNX_EXPORT", "1")
    if not _can_import("atdataset"):
        _stand_in(
            "atdataset",
            {
                "SpecAugment": _SpecAugmentStandIn,
                "time_warp": _unavailable("atdataset.time_warp"),
                "fix_random_seed": fix_random_seed,
                "ATDataloader": _unavailable("atdataset.ATDataloader"),
                "Fbank": _unavailable("atdataset.Fbank"),
            },
        )
    if not _can_import("torchaudio"):
        _stand_in("torchaudio", {})
    if not _can_import("tqdm"):
        _stand_in("tqdm", {"tqdm": lambda iterable=None, *a, **k: iterable})
    if not _can_import("torch.utils.tensorboard"):
        _stand_in("torch.utils.tensorboard", {"SummaryWriter": _SummaryWriterStandIn})

    original_export = torch.onnx.export
    if not getattr(original_export, "_zf_compat", False):

        @functools.wraps(original_export)
        def export(*args: Any, **kwargs: Any) -> Any:
            kwargs.setdefault("dynamo", False)
            return original_export(*args, **kwargs)

        export._zf_compat = True  # type: ignore[attr-defined]
        torch.onnx.export = export
    _INSTALLED = True
