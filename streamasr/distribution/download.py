"""Downloads into the model cache: resumable, stall-aware, size-capped, disk-aware.

`download` fetches a URL into a `.part` file and resumes it with HTTP Range requests after a
dropped connection or a stall (too few bytes per timeout window, so a trickle counts). It
stops at a byte cap, refuses up front a body the server announces beyond the cap or beyond
the disk's free space, and treats a cache that cannot take the bytes (full, out of inodes,
read-only) as a final error, deleting the `.part`, rather than a network fault to retry.
`streamasr.distribution.pull` decides the cap and checks the bytes afterwards.
"""

from __future__ import annotations

import contextlib
import errno
import http.client
import logging
import os
import re
import shutil
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import IO
from urllib.parse import urlparse

from streamasr.errors import ModelError
from streamasr.version import __version__

log = logging.getLogger("streamasr")

BLOCK_BYTES = 1 << 16
DEFAULT_RETRIES = 3
DEFAULT_TIMEOUT_S = 30.0
#: A download that brings fewer bytes than this in one timeout window has stalled.
MIN_WINDOW_BYTES = 16 << 10
DISK_FULL = (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC))
_CONTENT_RANGE_RE = re.compile(r"bytes\s+(\d+)-(\d+)/(\d+|\*)")

#: progress(bytes_done, bytes_total_or_None), called as bytes arrive.
ProgressFn = Callable[[int, "int | None"], None]


def cache_failure(root: Path, exc: OSError) -> str:
    """One line for an OSError of the cache itself, naming the fix for full, inode-less or
    read-only caches."""
    where = exc.filename or root
    if exc.errno in DISK_FULL:
        fix = (
            "the disk holding the model cache is full (no space or no free inodes: see "
            "`df -h` and `df -i`); free some, or set STREAMASR_HOME to a folder on another disk"
        )
    elif exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        fix = "the model cache is not writable; set STREAMASR_HOME to a writable folder"
    else:
        fix = "pull again once that is fixed"
    return f"cannot write to the model cache ({where}: {exc.strerror or exc}): {fix}. " \
        "Nothing was installed; models already in the cache are unchanged"


class _Interrupted(Exception):
    """The transfer stopped early; the .part file keeps what arrived."""


def download(
    url: str,
    part: Path,
    *,
    name: str,
    progress: ProgressFn | None = None,
    retries: int = DEFAULT_RETRIES,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    expected_bytes: int | None = None,
    retry_wait_s: float = 1.0,
    min_window_bytes: int = MIN_WINDOW_BYTES,
    max_bytes: int | None = None,
    cap_option: str = "--max-download-mb",
) -> int:
    """Fetch `url` into `part`, resuming from what `part` holds; returns bytes fetched now.

    A dropped connection, or a stall (fewer than `min_window_bytes` in a `timeout_s` window:
    a server that trickles a byte every few seconds is stalled too), is retried `retries`
    times with a Range request for the rest. When the retries run out the .part file stays,
    and the next pull resumes from it. More than `max_bytes` in all is refused (before a
    byte is written when the server says so up front), and so is a body the disk cannot hold;
    either deletes the .part file.
    """
    fetched = [0]
    failures = 0
    while True:
        have = part.stat().st_size if part.exists() else 0
        if expected_bytes is not None and have == expected_bytes:
            log.info("%s already holds all %d bytes", part.name, have)
            return fetched[0]
        if expected_bytes is not None and have > expected_bytes:
            log.warning("%s is larger than the release; starting over", part.name)
            part.unlink()
            have = 0
        request = urllib.request.Request(url, headers={"User-Agent": f"streamasr/{__version__}"})
        if have:
            request.add_header("Range", f"bytes={have}-")
            log.info("resuming %s from byte %d", url, have)
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as response:
                _receive(response, part, have, progress, fetched,
                         _Pace(timeout_s, min_window_bytes), max_bytes, cap_option)
            return fetched[0]
        except urllib.error.HTTPError as exc:
            if exc.code == 416 and have:
                if _range_total(exc.headers.get("Content-Range", "")) == have:
                    return fetched[0]
                log.warning("server refused the range of %s; starting over", part.name)
                part.unlink()
                continue
            raise _http_error(exc, url, name) from exc
        except urllib.error.URLError as exc:
            if isinstance(exc.reason, (socket.gaierror, ConnectionRefusedError)):
                raise ModelError(_unreachable(url, name, str(exc.reason))) from exc
            failure: BaseException = exc
        except (_Interrupted, OSError, http.client.HTTPException) as exc:
            failure = exc
        failures += 1
        kept = part.stat().st_size if part.exists() else 0
        if failures > retries:
            raise ModelError(
                f"download of {url} failed after {failures} attempt(s): {_describe(failure)}. "
                f"{mb(kept)} are kept in {part}; run the same pull again to resume from there. "
                f"{_manual_hint(url, name)}"
            ) from failure
        log.warning(
            "download interrupted (%s); resuming, attempt %d of %d",
            _describe(failure), failures + 1, retries + 1,
        )
        time.sleep(retry_wait_s * failures)


def _receive(
    response: http.client.HTTPResponse,
    part: Path,
    have: int,
    progress: ProgressFn | None,
    fetched: list[int],
    pace: _Pace,
    max_bytes: int | None = None,
    cap_option: str = "--max-download-mb",
) -> None:
    """Append one response to the .part file (counting into fetched[0]); raise if it ends
    early, stalls, grows past `max_bytes`, or the disk cannot take it."""
    length = response.headers.get("Content-Length")
    body_bytes = int(length) if length and length.isdigit() else None
    if response.status == 206 and have:
        start, total = _content_range(response.headers.get("Content-Range", ""))
        if start != have:
            part.unlink(missing_ok=True)
            raise _Interrupted(f"server resumed at byte {start}, not {have}; starting over")
        mode = "ab"
    else:
        if have:
            log.warning("server ignored the range request; downloading from the start")
        have, mode, total = 0, "wb", None
    if total is None and body_bytes is not None:
        total = have + body_bytes
    if max_bytes is not None and total is not None and total > max_bytes:
        raise _over_cap(part, max_bytes, cap_option, f"the server announces {mb(total)}")
    if total is not None:
        _check_free_space(part, total - have)
    done = have
    if progress:
        progress(done, total)
    try:  # unbuffered: a full disk fails the write that overfills it, not a later close
        handle = open(part, mode, buffering=0)  # noqa: SIM115 - closed below
    except OSError as exc:
        raise _write_failure(part, exc) from exc
    with handle:
        try:
            # read1: whatever has arrived, so a trickle cannot hide inside one long read
            while block := response.read1(BLOCK_BYTES):
                try:
                    _write_all(handle, block)
                except OSError as exc:
                    handle.close()
                    raise _write_failure(part, exc) from exc
                done += len(block)
                fetched[0] += len(block)
                if max_bytes is not None and done > max_bytes:
                    handle.close()
                    raise _over_cap(part, max_bytes, cap_option, "it was stopped there")
                if progress:
                    progress(done, total)
                pace.arrived(len(block), done)
        except (OSError, http.client.HTTPException) as exc:
            raise _Interrupted(f"{_describe(exc)} after {mb(done)}") from exc
    if total is not None and done < total:
        raise _Interrupted(f"connection closed after {mb(done)} of {mb(total)}")


def _write_all(handle: IO[bytes], block: bytes) -> None:
    """Write all of `block` (a raw write may take part of it when the disk is nearly full)."""
    view = memoryview(block)
    while view:
        written = handle.write(view)
        if not written:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        view = view[written:]


def _over_cap(part: Path, max_bytes: int, cap_option: str, how: str) -> ModelError:
    part.unlink(missing_ok=True)
    return ModelError(
        f"the download is larger than {mb(max_bytes)}, the cap for this model ({how}); the "
        f"partial file was deleted and nothing was installed. If it is genuine, raise the cap "
        f"with {cap_option}"
    )


def _check_free_space(part: Path, needed: int) -> None:
    """Refuse a body the cache's disk cannot hold, before writing any of it."""
    try:
        free = shutil.disk_usage(part.parent).free
    except OSError:
        return
    if needed > free:
        part.unlink(missing_ok=True)
        raise ModelError(
            f"the download needs {mb(needed)} but the disk holding the model cache "
            f"{part.parent} has {mb(free)} free; nothing was written. Free some space, or set "
            "STREAMASR_HOME to a folder on another disk"
        )


def _write_failure(part: Path, exc: OSError) -> ModelError:
    """The cache cannot take the download (full, out of inodes, read-only): not a network
    fault, so it is not retried, and the .part file is deleted rather than kept."""
    with contextlib.suppress(OSError):
        part.unlink(missing_ok=True)
    return ModelError(cache_failure(part.parent, exc).replace(
        "Nothing was installed", "The partial download was deleted and nothing was installed"
    ))


class _Pace:
    """Counts the bytes of each `window_s` window; too few in one is a stall."""

    def __init__(self, window_s: float, min_bytes: int) -> None:
        self.window_s, self.min_bytes = window_s, min_bytes
        self.start = time.monotonic()
        self.count = 0

    def arrived(self, count: int, done: int) -> None:
        self.count += count
        now = time.monotonic()
        if now - self.start < self.window_s:
            return
        if self.count < self.min_bytes:
            raise _Interrupted(
                f"stalled: {self.count} bytes in {now - self.start:.1f} s, fewer than "
                f"{self.min_bytes} per {self.window_s:g} s window, after {mb(done)}"
            )
        self.start, self.count = now, 0


def _content_range(header: str) -> tuple[int, int | None]:
    match = _CONTENT_RANGE_RE.search(header)
    if not match:
        return -1, None
    total = match.group(3)
    return int(match.group(1)), (int(total) if total != "*" else None)


def _range_total(header: str) -> int | None:
    match = re.search(r"/(\d+)", header)
    return int(match.group(1)) if match else None


def _http_error(exc: urllib.error.HTTPError, url: str, name: str) -> ModelError:
    if exc.code == 404:
        return ModelError(
            f"{url} answered HTTP 404 Not Found: there is no archive at that address. Check "
            f"the model name or --url. {_manual_hint(url, name)}"
        )
    return ModelError(
        f"{url} answered HTTP {exc.code} {exc.reason}. Try again later, or use a mirror "
        f"with --url. {_manual_hint(url, name)}"
    )


def _unreachable(url: str, name: str, reason: str) -> str:
    host = urlparse(url).hostname or url
    return (
        f"cannot reach {host} ({reason}); is this machine offline? Pull from a reachable "
        f"mirror with --url URL, or {_manual_hint(url, name, sentence=False)}"
    )


def _manual_hint(url: str, name: str, sentence: bool = True) -> str:
    first = "Download" if sentence else "download"
    return (
        f"{first} {url} by hand and install it with "
        f"`streamasr models pull {name} --archive FILE`"
    )


def _describe(exc: BaseException) -> str:
    if isinstance(exc, urllib.error.URLError):
        return str(exc.reason)
    return str(exc) or type(exc).__name__


def mb(num_bytes: int) -> str:
    return f"{num_bytes / (1 << 20):.1f} MB"
