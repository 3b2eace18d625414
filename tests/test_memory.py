"""The command line holds glibc's mmap threshold (streamasr/memory.py), so freed
large blocks leave the process instead of staying resident in the heap. Checked with glibc's
own malloc in a fresh process: after a freed 16 MiB block (which raises glibc's threshold when
nothing holds it), 4 MiB blocks freed below a live one go back to the system only with the
threshold held."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from streamasr import memory

REPO = Path(__file__).resolve().parent.parent

CHILD = """
import ctypes, os, sys
if sys.argv[1] == "cli":
    from streamasr.cli import run
    assert run(["--version"]) == 0
libc = ctypes.CDLL(None)
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
page = os.sysconf("SC_PAGE_SIZE")
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * page
libc.free(libc.malloc(16 << 20))  # mapped, then freed: glibc raises its threshold to 16 MiB
blocks = [libc.malloc(4 << 20) for _ in range(8)]
for block in blocks:
    ctypes.memset(block, 1, 4 << 20)
above = libc.malloc(64)  # a live block above them keeps the heap from being trimmed
resident = rss()
for block in blocks:
    libc.free(block)
print((resident - rss()) >> 20, file=sys.stderr)
"""


def child_figure(code: str, mode: str) -> int:
    """Run `code` with `mode` in a fresh process (glibc's own defaults, no threshold in the
    environment); the number it printed last on stderr."""
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_MMAP_THRESHOLD_"}
    done = subprocess.run(
        [sys.executable, "-c", code, mode], cwd=REPO, capture_output=True, text=True,
        env=env, check=True,
    )
    return int(done.stderr.strip().splitlines()[-1])


def released_mib(mode: str) -> int:
    """MiB given back to the system when the eight 4 MiB blocks are freed."""
    return child_figure(CHILD, mode)


glibc = pytest.mark.skipif(
    not sys.platform.startswith("linux") or not os.confstr("CS_GNU_LIBC_VERSION"),
    reason="glibc's allocator",
)


@glibc
def test_the_command_line_gives_freed_large_blocks_back() -> None:
    assert released_mib("plain") < 8  # glibc as it comes: they stay resident
    assert released_mib("cli") >= 24


def test_a_threshold_the_user_set_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", str(64 << 20))
    assert memory.return_large_blocks() is False


FAULTS = """
import ctypes, resource, sys
from streamasr import memory
assert memory.return_large_blocks()
if sys.argv[1] == "server":
    assert memory.reuse_freed_blocks()
libc = ctypes.CDLL(None)
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
size = 512 << 10  # a batched step's tensors are of this order
def cycle():
    block = libc.malloc(size)
    ctypes.memset(block, 1, size)
    libc.free(block)
cycle()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(50):
    cycle()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before, file=sys.stderr)
"""


def page_faults(mode: str) -> int:
    """Page faults of 50 rounds of allocating, touching and freeing a 512 KiB block."""
    return child_figure(FAULTS, mode)


@glibc
def test_a_server_reuses_freed_blocks_instead_of_mapping_each() -> None:
    """`streamasr serve` after its model load: a block freed by one step is reused by the next
    (with the command line's threshold every one is a new mapping, its pages faulted in)."""
    pages = (512 << 10) // os.sysconf("SC_PAGE_SIZE")
    assert page_faults("command line") >= 50 * pages * 0.9
    assert page_faults("server") < 50 * pages * 0.1
