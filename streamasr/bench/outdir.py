"""The `--out` folder: proved writable before any decoding, and filled as utterances finish.

A bench can run for hours; a folder that turns out to be a file, read-only or on a full disk
must stop it at the start, not after the last utterance. Records are appended to
`utterances.jsonl` one line per finished utterance and flushed at once, so a run that dies
midway (a kill, a full disk later on) keeps everything measured until then.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
from pathlib import Path
from typing import IO, Any

from streamasr.errors import StreamAsrError, UsageError
from streamasr.text.printable import json_escaped

RECORDS_NAME = "utterances.jsonl"
PROBE_NAME = ".streamasr-write-probe"
PROBE_BYTES = 256 * 1024  # enough to meet a nearly full disk, not enough to matter


class ResultsFolderError(StreamAsrError):
    """The results folder cannot be written; exit 1."""


def check_out(out: Path) -> None:
    """Create `out` if needed and prove it takes a file of real size; raise if it cannot."""
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} is a file; give a folder for the results (it is created)")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ResultsFolderError(
            f"--out {out}: cannot create the folder ({_reason(exc)})"
        ) from None
    probe = out / PROBE_NAME
    try:
        with probe.open("wb") as handle:
            handle.write(b"\0" * PROBE_BYTES)
            handle.flush()
            os.fsync(handle.fileno())
    except OSError as exc:
        raise ResultsFolderError(
            f"--out {out} is not writable ({_reason(exc)}); choose another folder"
        ) from None
    finally:
        # on a read-only file system even removing a file that is not there fails
        with contextlib.suppress(OSError):
            probe.unlink(missing_ok=True)


def write_result_file(path: Path, text: str) -> None:
    """Write one results file whole; a failure (disk filled up during the run) is one line."""
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        records = path.parent / RECORDS_NAME
        raise ResultsFolderError(
            f"cannot write {path} ({_reason(exc)}); the utterances measured are in {records}"
        ) from None


def _reason(exc: OSError) -> str:
    if exc.errno == errno.ENOSPC:
        return "no space left on the disk, or no free inodes"
    if exc.errno == errno.EDQUOT:
        return "disk quota exceeded"
    if exc.errno == errno.EROFS:
        return "read-only file system"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return "permission denied"
    return exc.strerror or str(exc)


class RecordLog:
    """`OUT/utterances.jsonl`: one JSON line per finished utterance, flushed as it is written."""

    def __init__(self, out: Path) -> None:
        self.path = out / RECORDS_NAME
        self.count = 0
        try:
            self._handle: IO[str] | None = self.path.open("w", encoding="utf-8")
        except OSError as exc:
            raise ResultsFolderError(f"cannot write {self.path} ({_reason(exc)})") from None

    def write(self, record: dict[str, Any]) -> None:
        """Append one record and flush it to the operating system."""
        if self._handle is None:
            return
        try:
            self._handle.write(json_escaped(json.dumps(record, ensure_ascii=False)) + "\n")
            self._handle.flush()
        except OSError as exc:
            raise ResultsFolderError(
                f"cannot write {self.path} ({_reason(exc)}); the {self.count} records "
                "written before are kept"
            ) from None
        self.count += 1

    def close(self) -> None:
        """Close the file (safe to call twice)."""
        if self._handle is not None:
            try:
                self._handle.close()
            except OSError:
                pass
            self._handle = None
