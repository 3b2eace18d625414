"""Files read whole (a model, a vocabulary, a word list, a settings file) are checked first:
a regular file, no larger than such a file can be.

Why: reading `/dev/zero` whole runs until memory is gone, a FIFO waits for a writer that may
never come, and a 3 GB file named where a 2 MB model belongs costs 3 GB before any parser can
refuse it. Each caller names the kind of file, its cap, the fix and the error class (a model
file is a ModelError, exit 1; a file an option names as a list or setting is a UsageError,
exit 2), and gets one line instead.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from streamasr.errors import StreamAsrError

MIB = 1024 * 1024


def check_file(
    path: Path | str, what: str, max_bytes: int, fix: str, error: type[StreamAsrError]
) -> int:
    """The size of `path`, a regular file of at most `max_bytes` (links followed), for a file
    that another library reads whole (sherpa-onnx loading a model); else `error`, one line
    naming `what` the file is and `fix`."""
    try:
        info = os.stat(path)
    except OSError as exc:
        raise _unreadable(path, what, fix, error, exc) from None
    _check(info, path, what, max_bytes, fix, error)
    return info.st_size


def read_whole(
    path: Path | str, what: str, max_bytes: int, fix: str, error: type[StreamAsrError]
) -> bytes:
    """The bytes of `path`, checked as `check_file` does on the file actually opened (opened
    without waiting, so a FIFO is refused, not waited on); a file that grows past the cap
    while read is refused too."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise _unreadable(path, what, fix, error, exc) from None
    try:  # checked before fdopen, which refuses a folder with an IsADirectoryError
        _check(os.fstat(fd), path, what, max_bytes, fix, error)
    except BaseException:
        os.close(fd)
        raise
    with os.fdopen(fd, "rb") as handle:
        try:
            data = handle.read(max_bytes + 1)
        except OSError as exc:
            raise _unreadable(path, what, fix, error, exc) from None
    if len(data) > max_bytes:
        raise error(f"{what} {path} grew past {_size(max_bytes)} while it was read; {fix}")
    return data


def _check(
    info: os.stat_result,
    path: Path | str,
    what: str,
    max_bytes: int,
    fix: str,
    error: type[StreamAsrError],
) -> None:
    mode = info.st_mode
    if stat.S_ISDIR(mode):
        raise error(f"{what} {path} is a folder, not a file; {fix}")
    if not stat.S_ISREG(mode):
        raise error(f"{what} {path} is {_kind(mode)}, not a regular file; {fix}")
    if info.st_size > max_bytes:
        raise error(
            f"{what} {path} is {info.st_size} bytes, larger than such a file can be "
            f"(at most {_size(max_bytes)}); {fix}"
        )


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a plain file"


def _unreadable(
    path: Path | str, what: str, fix: str, error: type[StreamAsrError], exc: OSError
) -> StreamAsrError:
    if isinstance(exc, FileNotFoundError):
        return error(f"{what} {path} does not exist; {fix}")
    if isinstance(exc, IsADirectoryError):
        return error(f"{what} {path} is a folder, not a file; {fix}")
    return error(f"{what} {path} cannot be read ({exc.strerror or exc}); {fix}")


def _size(size_bytes: int) -> str:
    if size_bytes >= MIB:
        return f"{size_bytes / MIB:.0f} MiB"
    if size_bytes >= 1024:
        return f"{size_bytes / 1024:.0f} KiB"
    return f"{size_bytes} bytes"
