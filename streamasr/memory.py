"""Freed large blocks go back to the system: the process's peak memory is the model's, not
the allocator's.

Why: glibc serves a block of 128 KiB or more with its own mapping, returned when the block is
freed, but raises that threshold (up to 32 MiB) each time such a block is freed. A model load
frees many (ONNX Runtime's protobuf, weights replaced by their optimised or prepacked forms;
hashing a file in 1 MiB reads), so later blocks of up to 32 MiB land in the heap, where freed
ones stay resident around the live ones. Measured on the full-size fp32 export, 60 s of audio
(`scripts/startup_cost.py --fp32`): `streamasr file` peaked at 393-424 MB, 340-349 MB with
the threshold held at 256 KiB; int8 183 -> 161 MB; tiny-en unchanged. The engine's steps
allocate from ONNX Runtime's arena, so a step's page faults barely change (one 60 s fp32
decode: ~1,500 instead of ~700). 256 KiB, not glibc's 128 KiB: at 128 KiB a decode took
~5,000 page faults for the same peak.

The command line sets it for its own process (cli.run); the library leaves a host program's
allocator alone. A MALLOC_MMAP_THRESHOLD_ in the environment is the user's choice and kept.

A server is the other way round (`reuse_freed_blocks`, once its model is loaded): what counts
is the steady state of many steps, and each batched step of many streams allocates blocks of
a few hundred KiB. With the threshold held at 256 KiB each was a fresh mapping, unmapped when
freed: measured at 32 paced clients, ~1,000 mmap/munmap/mremap calls a second and their page
faults, 2.5x sherpa-onnx's server's system time. With 32 MiB (glibc's own ceiling for its
moving threshold) they come from the heap and freed ones are reused.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

M_TRIM_THRESHOLD = -1  # glibc's mallopt parameter numbers
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 256 * 1024
SERVER_MMAP_THRESHOLD_BYTES = 32 << 20
SERVER_TRIM_THRESHOLD_BYTES = 64 << 20  # glibc keeps it at twice the mmap threshold


def return_large_blocks() -> bool:
    """Hold glibc's mmap threshold at 256 KiB; False where there is no glibc or the user set
    MALLOC_MMAP_THRESHOLD_."""
    mallopt = _glibc_mallopt()
    return mallopt is not None and bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES))


def reuse_freed_blocks() -> bool:
    """A server after its model load: blocks below 32 MiB from the heap, freed ones reused
    (no mapping per step); False where there is no glibc or the user set the threshold."""
    mallopt = _glibc_mallopt()
    if mallopt is None:
        return False
    trimmed = mallopt(M_TRIM_THRESHOLD, SERVER_TRIM_THRESHOLD_BYTES)
    return bool(mallopt(M_MMAP_THRESHOLD, SERVER_MMAP_THRESHOLD_BYTES) and trimmed)


def _glibc_mallopt() -> Callable[[int, int], int] | None:
    """glibc's mallopt, or None (not Linux, not glibc, or MALLOC_MMAP_THRESHOLD_ set)."""
    if not sys.platform.startswith("linux") or "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return None
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return None
    try:  # musl has a mallopt that does nothing
        glibc = os.confstr("CS_GNU_LIBC_VERSION")
    except (ValueError, OSError):
        glibc = None
    if not glibc:
        return None
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return mallopt
