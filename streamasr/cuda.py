"""Is there a CUDA device here? Asked of the NVIDIA driver itself, before torch or NeMo.

Why: `--gpu` on a machine without a GPU must say so at once, not after importing (or asking
the user to install) 2 GB of torch and NeMo. The driver's own library answers in
milliseconds: no libcuda means no NVIDIA driver; a driver that counts zero devices means no
GPU. Only when a device is there does the NeMo backend go on to torch.
"""

from __future__ import annotations

import ctypes

from streamasr.errors import DependencyError
from streamasr.extras import install_hint

# what installs the NeMo engine, from an install (pip or pipx) or from a clone; the `gpu` extra
# names the same
GPU_INSTALL = (
    f"{install_hint(packages=('torch', 'nemo_toolkit[asr]'))}; in a clone: pip install -e '.[gpu]'"
)
DRIVER_LIBRARY = "libcuda.so.1"


def cuda_device_count() -> int:
    """CUDA devices the driver reports; 0 without a driver or when it cannot start."""
    try:
        driver = ctypes.CDLL(DRIVER_LIBRARY)
    except OSError:
        return 0
    count = ctypes.c_int(0)
    if driver.cuInit(0) != 0 or driver.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return 0
    return count.value


def require_cuda_device(device: str) -> None:
    """A DependencyError naming the fix when `device` (cuda or cuda:N) does not exist here."""
    count = cuda_device_count()
    if count == 0:
        raise DependencyError(
            f"CUDA is not available: no NVIDIA GPU or driver found ({DRIVER_LIBRARY} reports no "
            f"device); use --device cpu, or on an NVIDIA machine install the engine: "
            f"{GPU_INSTALL}"
        )
    _, _, index = device.partition(":")
    if index.isdigit() and int(index) >= count:
        raise DependencyError(f"--device {device}: only {count} CUDA device(s) here")
