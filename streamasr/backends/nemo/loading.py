"""Loading a .nemo: torch and NeMo imported when needed, the archive vetted first, one restore
per file and device shared by every recognizer of it.

torch and nemo are imported inside functions: `import streamasr` must not need them.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path

from streamasr.cuda import GPU_INSTALL as GPU_EXTRA
from streamasr.errors import DependencyError, ModelError, UsageError

log = logging.getLogger("streamasr")


def import_torch():
    """torch, or a DependencyError naming the extra that brings it."""
    try:
        import torch
    except ImportError as exc:
        raise DependencyError(
            f"the NeMo backend needs torch and nemo_toolkit, which are not installed; "
            f"run: {GPU_EXTRA}"
        ) from exc
    return torch


def check_device(device: str) -> str:
    """'cpu', 'cuda' or 'cuda:N'; CUDA must really be there.

    On the CPU torch is only looked up, not imported (~4 s): a .nemo the archive check
    refuses never pays for it. CUDA needs torch to ask, so a missing GPU is said first.
    """
    if device != "cpu" and not (device == "cuda" or device.startswith("cuda:")):
        raise UsageError(f"--device {device!r} is not a device; use cpu, cuda or cuda:N")
    if device == "cpu":
        import importlib.util

        if importlib.util.find_spec("torch") is None:
            import_torch()  # raises the DependencyError with the install line
        return device
    torch = import_torch()
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise DependencyError(
                f"CUDA is not available (torch {torch.__version__} "
                f"{'has no CUDA build' if torch.version.cuda is None else 'finds no GPU'}); "
                "use --device cpu, or on an NVIDIA machine install a CUDA torch and "
                f"{GPU_EXTRA}"
            )
        index = int(device.split(":")[1]) if ":" in device else 0
        if index >= torch.cuda.device_count():
            raise UsageError(
                f"--device {device}: only {torch.cuda.device_count()} CUDA device(s) here"
            )
    return device


@contextlib.contextmanager
def quiet_nemo() -> Iterator[None]:
    """NeMo logs every config detail at INFO level; keep only its errors while loading."""
    from nemo.utils import logging as nemo_logging

    level = nemo_logging.getEffectiveLevel()
    nemo_logging.setLevel(logging.ERROR)
    try:
        yield
    finally:
        nemo_logging.setLevel(level)


def import_nemo_asr():
    """nemo.collections.asr, or a DependencyError with the install line."""
    # its telemetry stub announces at import that it is disabled; nothing for a user to act on
    logging.getLogger("nv_one_logger").setLevel(logging.ERROR)
    try:
        with contextlib.redirect_stdout(None):
            import nemo.collections.asr as nemo_asr
    except ImportError as exc:
        raise DependencyError(
            f"the NeMo backend needs nemo_toolkit[asr], which is not installed "
            f"({exc.name or exc}); run: {GPU_EXTRA}"
        ) from exc
    return nemo_asr


def require_nemo() -> None:
    """A missing NeMo is said before anything about the model; importing it (~9 s) waits
    until the model file has been checked."""
    import importlib.util

    if importlib.util.find_spec("nemo") is None:
        import_nemo_asr()


_LOADED: dict[tuple[str, str, int, bool], object] = {}


def load_model(path: Path, device: str, trust_config: bool = False):
    """Restore a .nemo once per (file, device); recognizers at other look-aheads share it.

    The archive is unpacked and its config checked before torch and NeMo are imported
    (nemo_archive.py says why; a refused file costs neither); `trust_config` lets in classes
    outside the allowlist, with a warning.
    """
    from streamasr.backends.nemo import archive as nemo_archive

    key = (str(path.resolve()), device, path.stat().st_mtime_ns, trust_config)
    if key not in _LOADED:
        with nemo_archive.opened(path, trust_config) as vetted:
            torch = import_torch()
            nemo_asr = import_nemo_asr()
            try:
                with quiet_nemo():
                    _LOADED[key] = nemo_archive.restore(nemo_asr, torch, vetted, device)
            except ModelError:
                raise
            except Exception as exc:  # NeMo raises many types for a bad archive
                first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
                raise ModelError(
                    f"NeMo could not load {path}: {first}. "
                    "Check that it is a complete .nemo file"
                ) from exc
    return _LOADED[key]
