"""Files a cluster task writes: placed atomically, once, with every attempt on record.

Ray retries a task whose worker or node died. A retry must not write an input's outputs a
second time, nor a bench shard's rows twice, and the driver never sees the results
themselves, only where they are. So a task:

- notes its attempt (`attempts/KEY.PID-RANDOM`), so the driver can count retries;
- returns at once when its outputs are already in place (`done/KEY`, written after them);
- writes into a folder of its own under `tmp/` and renames each file into place: a reader
  sees a whole file or none, and two attempts racing (a node that was only presumed dead)
  both place the same bytes.

The state folder (`.streamasr-ray` in the output folder) belongs to one run: the driver
clears it before the first task and removes it at the end, also after Ctrl-C, so that only
complete outputs are left.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from pathlib import Path

STATE_NAME = ".streamasr-ray"


def state_dir(out: Path) -> Path:
    """The run's state folder inside the output folder."""
    return out / STATE_NAME


def fresh_state(out: Path) -> Path:
    """A new, empty state folder (what an earlier run left there is no evidence of this one)."""
    state = state_dir(out)
    shutil.rmtree(state, ignore_errors=True)
    for sub in ("attempts", "done", "tmp"):
        (state / sub).mkdir(parents=True, exist_ok=True)
    return state


def remove_state(out: Path) -> None:
    """Remove the state folder: attempt notes, done marks, half-written temporary files."""
    shutil.rmtree(state_dir(out), ignore_errors=True)


def _unique() -> str:
    return f"{os.getpid()}-{uuid.uuid4().hex[:8]}"


def note_attempt(state: Path, key: str) -> None:
    """Record that an attempt at task `key` started (one empty file per attempt)."""
    (state / "attempts" / f"{key}.{_unique()}").touch()


def attempts(state: Path) -> dict[str, int]:
    """Attempts started per task key."""
    counts: dict[str, int] = {}
    with contextlib.suppress(OSError):
        for entry in os.scandir(state / "attempts"):
            key = entry.name.rsplit(".", 1)[0]
            counts[key] = counts.get(key, 0) + 1
    return counts


def is_done(state: Path, key: str) -> bool:
    """True when an earlier attempt placed every output of task `key`."""
    return (state / "done" / key).exists()


def mark_done(state: Path, key: str) -> None:
    """Record that task `key` placed every output (after the last rename)."""
    (state / "done" / key).touch()


def temp_folder(state: Path, key: str) -> Path:
    """A folder only this attempt writes into. Its parent is not made again: a task still
    running after its run ended (and removed the state folder) fails instead of leaving one."""
    folder = state / "tmp" / f"{key}.{_unique()}"
    folder.mkdir()
    return folder


def place(temp: Path, final: Path) -> None:
    """Move a finished file into place in one step (same file system: a rename)."""
    os.replace(temp, final)
