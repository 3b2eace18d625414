"""Write ONNX Runtime's optimised form of ONNX graphs, with the ONNX Runtime sherpa-onnx runs.

Why this way: an optimised graph is only safe to load with the ONNX Runtime build that wrote
it, and sherpa-onnx bundles its own (not the `onnxruntime` Python package, which may be
another version or absent). So this talks to sherpa-onnx's library through its stable C API
(`OrtGetApiBase`, function-table slots fixed since API version 1). It runs in a child
process (`python -m streamasr.backends.sherpa.graph_build LIB LEVEL SRC DST [SRC DST ...]`):
a native failure there cannot take the caller down, and nothing it allocates outlives it.
Before that, graph_rewrite.py rewrites what it knows to be slow (same math, fewer passes).
Exit 0: every DST written; 1: a line on stderr says what failed.
"""

from __future__ import annotations

import ctypes
import sys
from typing import Any  # ctypes function prototypes carry no useful types

# slots of struct OrtApi (onnxruntime_c_api.h), unchanged since ORT_API_VERSION 1
_GET_ERROR_MESSAGE = 2
_CREATE_ENV = 3
_CREATE_SESSION = 7
_CREATE_SESSION_OPTIONS = 10
_SET_OPTIMIZED_MODEL_FILE_PATH = 11
_SET_GRAPH_OPTIMIZATION_LEVEL = 23
_SET_INTRA_OP_NUM_THREADS = 24
_API_VERSION = 1
_LOG_ERROR = 3  # ORT_LOGGING_LEVEL_ERROR

_P = ctypes.c_void_p
_PP = ctypes.POINTER(ctypes.c_void_p)


class OrtLibrary:
    """The few C API calls needed to load a graph once and save its optimised form."""

    def __init__(self, path: str) -> None:
        lib = ctypes.CDLL(path)
        lib.OrtGetApiBase.restype = _P
        base = ctypes.cast(lib.OrtGetApiBase(), _PP)
        get_api = ctypes.CFUNCTYPE(_P, ctypes.c_uint32)(base[0])
        get_version = ctypes.CFUNCTYPE(ctypes.c_char_p)(base[1])
        self.version = (get_version() or b"").decode()
        api = get_api(_API_VERSION)
        if not api:
            raise RuntimeError(f"{path} does not offer ONNX Runtime C API version 1")
        self._api = ctypes.cast(api, _PP)
        self._message = ctypes.CFUNCTYPE(ctypes.c_char_p, _P)(self._api[_GET_ERROR_MESSAGE])
        self._env = _P()
        create_env = self._fn(_CREATE_ENV, ctypes.c_int, ctypes.c_char_p, _PP)
        self._check(create_env(_LOG_ERROR, b"streamasr-graph-cache", ctypes.byref(self._env)))

    def _fn(self, slot: int, *args: Any) -> Any:
        return ctypes.CFUNCTYPE(_P, *args)(self._api[slot])

    def _check(self, status: int | None) -> None:
        if status:
            raise RuntimeError((self._message(status) or b"unknown error").decode(errors="replace"))

    def save_optimised(self, source: str, target: str, level: int) -> None:
        """Load `source` at graph optimisation `level`; ONNX Runtime writes `target`."""
        self.open_session(source, level, target)

    def open_session(self, source: str, level: int, target: str | None = None) -> None:
        """Create (and leak: this process is short-lived) one session on one thread; with
        `target`, ONNX Runtime also writes the optimised graph there."""
        options = _P()
        self._check(self._fn(_CREATE_SESSION_OPTIONS, _PP)(ctypes.byref(options)))
        self._check(self._fn(_SET_INTRA_OP_NUM_THREADS, _P, ctypes.c_int)(options, 1))
        self._check(self._fn(_SET_GRAPH_OPTIMIZATION_LEVEL, _P, ctypes.c_int)(options, level))
        if target is not None:
            set_path = self._fn(_SET_OPTIMIZED_MODEL_FILE_PATH, _P, ctypes.c_char_p)
            self._check(set_path(options, target.encode()))
        session = _P()
        create = self._fn(_CREATE_SESSION, _P, ctypes.c_char_p, _P, _PP)
        self._check(create(self._env, source.encode(), options, ctypes.byref(session)))


def library_version(path: str) -> str:
    """The version string of the ONNX Runtime library at `path` (no session is created)."""
    lib = ctypes.CDLL(path)
    lib.OrtGetApiBase.restype = _P
    base = ctypes.cast(lib.OrtGetApiBase(), _PP)
    return (ctypes.CFUNCTYPE(ctypes.c_char_p)(base[1])() or b"").decode()


def rewritten(source: str, target: str) -> str:
    """The graph to optimise: `source` with graph_rewrite's rewrites applied, staged beside
    `target` (how many is written to `target`.rewrites for the cache's record), or `source`
    itself when none applies (or the file is not one the onnx package can read)."""
    from streamasr.backends.sherpa.graph_rewrite import rewrite_file

    staged = f"{target}.rewritten.onnx"
    try:
        count = rewrite_file(source, staged)
    except Exception:  # an optimisation only: what ONNX Runtime makes of the file decides
        count = 0
    with open(f"{target}.rewrites", "w") as note:
        note.write(f"{count}\n")
    return staged if count else source


def main(argv: list[str]) -> int:
    """LIB LEVEL REWRITES SRC DST [SRC DST ...] (REWRITES: graph_rewrite.key(), or "off")"""
    if len(argv) < 5 or len(argv) % 2 == 0:
        print("usage: graph_build LIB LEVEL REWRITES SRC DST [SRC DST ...]", file=sys.stderr)
        return 2
    try:
        ort = OrtLibrary(argv[0])
        level = int(argv[1])
        rewrite = argv[2] != "off"
        for source, target in zip(argv[3::2], argv[4::2], strict=True):
            staged = rewritten(source, target) if rewrite else source
            ort.save_optimised(staged, target, level)
    except (OSError, RuntimeError, ValueError) as exc:
        print(f"graph optimisation failed: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
