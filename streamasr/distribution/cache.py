"""The model cache: where pulled models live, which folders count as installed, and locks.

A pull renames a model folder into place as its very last step, so a folder here is either a
complete install or absent; `find_cached` and `installed_models` only ever see complete ones.
`open_cached` adds the check before use (`streamasr.distribution.manifest`). One pull per
model runs at a time (`lock_model`); the leftovers of a pull that was killed are removed by the
next one under the same lock. Nothing here prints.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from streamasr.distribution.catalog import CatalogEntry, find, lookup
from streamasr.distribution.manifest import (
    MANIFEST_NAME,
    VerifyReport,
    check_before_use,
    check_model_path,
    verify_folder,
)
from streamasr.errors import ModelError, UsageError

LOCK_DIR = ".locks"
NEMO_SUFFIX = ".nemo"
#: What a model name may look like: it becomes a folder name in the cache.
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
#: A punctuation model's files (sherpa-onnx's online layout), the model in the order it is
#: preferred (the release ships both).
PUNCTUATION_FILES = ("model.onnx", "model.int8.onnx")
PUNCTUATION_VOCAB = "bpe.vocab"


def cache_dir() -> Path:
    """Where pulled models live: $STREAMASR_HOME, else $XDG_CACHE_HOME/streamasr/models."""
    env = os.environ.get("STREAMASR_HOME")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "streamasr" / "models"


def canonical_name(name: str) -> str:
    """The cache folder name for `name`: the release name for catalog aliases."""
    entry = find(name)
    return entry.name if entry else name


def find_cached(name: str, cache: Path | None = None) -> Path | None:
    """The pulled model folder for a catalog name/alias or custom name, or None.

    Only complete installs can be found: a pull renames the folder into place as its last step.
    """
    if not NAME_RE.match(name):
        return None
    directory = (cache or cache_dir()) / canonical_name(name)
    return directory if is_model_folder(directory) else None


def open_cached(name: str, cache: Path | None = None, *, full: bool = False) -> Path | None:
    """`find_cached`, then the check before use: a pulled model whose files changed since
    it was installed is an error naming `models verify` and `pull --force`."""
    directory = find_cached(name, cache)
    if directory is not None:
        check_before_use(directory, name, full=full)
    return directory


def verify_before_use(model: str | None, cache: Path | None = None) -> None:
    """`--verify`: hash every file of the model `model` names (a pulled name, or the path of
    a pulled folder or of a file in one) against its manifest; nothing to do for others."""
    if not model:
        return
    path = Path(model).expanduser()
    if path.exists():
        check_model_path(path, full=True)
    else:
        open_cached(model, cache, full=True)


def folder_argument(name: str) -> Path | None:
    """The folder `name` is a path of (`models verify PATH`), or None for a pulled model's
    name; a file is a usage error (checksums are recorded for a folder)."""
    path = Path(name).expanduser()
    looks_like_path = "/" in name or name.startswith(".") or find_cached(name) is None
    if not (looks_like_path and path.exists()):
        return None
    if not path.is_dir():
        raise UsageError(f"{name} is a file; give the model folder it is in")
    return path.resolve()


def is_punctuation_folder(directory: Path) -> bool:
    """A folder in sherpa-onnx's online punctuation layout (bpe.vocab and a model file)."""
    return (directory / PUNCTUATION_VOCAB).is_file() and any(
        (directory / name).is_file() for name in PUNCTUATION_FILES
    )


def is_model_folder(directory: Path) -> bool:
    """A complete install: a sherpa-onnx folder (tokens.txt, or a punctuation model's
    bpe.vocab and model.onnx) or a single-file `.nemo` model."""
    if (directory / "tokens.txt").is_file() or is_punctuation_folder(directory):
        return True
    return (directory / MANIFEST_NAME).is_file() and any(directory.glob(f"*{NEMO_SUFFIX}"))


@dataclass(frozen=True)
class InstalledModel:
    """A model folder in the cache."""

    name: str
    directory: Path
    has_manifest: bool


def installed_models(cache: Path | None = None) -> list[InstalledModel]:
    """Every model folder in the cache (temporary and hidden entries are skipped)."""
    root = cache or cache_dir()
    if not root.is_dir():
        return []
    return [
        InstalledModel(p.name, p, (p / MANIFEST_NAME).is_file())
        for p in sorted(root.iterdir())
        if p.is_dir() and not p.name.startswith(".") and is_model_folder(p)
    ]


def verify_installed(name: str, cache: Path | None = None) -> VerifyReport:
    """Re-hash every file of a pulled model against the manifest written when it was pulled."""
    return verify_folder(require_cached(name, cache))


def require_cached(name: str, cache: Path | None = None) -> Path:
    """The pulled model's folder, or an error saying how to pull it."""
    directory = find_cached(name, cache)
    if directory is not None:
        return directory
    entry = find(name)
    if entry is None and not (cache or cache_dir()).joinpath(name).is_dir():
        lookup(name)  # unknown everywhere: list the catalog
    raise ModelError(
        f"model {name!r} is not in the cache {cache or cache_dir()}; "
        f"run `streamasr models pull {name}` first"
    )


def describe_entry_state(entry: CatalogEntry, cache: Path | None = None) -> str:
    """'yes', 'yes (no manifest)' or 'no', for tables."""
    directory = find_cached(entry.name, cache)
    if directory is None:
        return "no"
    return "yes" if (directory / MANIFEST_NAME).is_file() else "yes (no manifest)"


# --- locking -----------------------------------------------------------------------------


@contextlib.contextmanager
def lock_model(root: Path, name: str) -> Iterator[None]:
    """One pull per model at a time (POSIX advisory lock; no locking where fcntl is absent)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        yield
        return
    lock_dir = root / LOCK_DIR
    lock_dir.mkdir(exist_ok=True)  # an OSError here (a full cache) is told by `pull`
    with open(lock_dir / f"{name}.lock", "w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            raise ModelError(
                f"another streamasr is pulling {name} into {root} right now; wait for it"
            ) from exc
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def remove_stale_temps(root: Path, name: str) -> None:
    """Leftovers of a pull that was killed mid-extraction (we hold the lock, so not live)."""
    for stale in root.glob(f".{name}.partial-*"):
        shutil.rmtree(stale, ignore_errors=True)
    for stale in root.glob(f".{name}.old-*"):
        shutil.rmtree(stale, ignore_errors=True)

