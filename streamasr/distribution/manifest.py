"""What the model cache trusts: the manifest of each install and the check before each use.

- **The manifest** (`<model>/.streamasr-manifest.json`) records, per installed file, its
  sha256, size and mtime_ns. `models verify` re-hashes everything against it.
- **The check before use.** Every use of a pulled model (`file`, `mic`, `bench`, `latency`,
  the library) first compares each file's size and mtime with the manifest: a stat per file,
  no reading. A file whose mtime moved is hashed, and kept if its sha256 still matches (the
  new mtime is written back, so the next use is cheap again); a size or content change is an
  error naming `models verify` and `pull --force`. `--verify` hashes every file regardless,
  for an edit that restored the mtime. A manifest from before sizes and mtimes were recorded
  is hashed once and then upgraded.

- **A local folder** (a model of the user's, never pulled) has no manifest until
  `streamasr models verify PATH --record` writes one (`"origin": "local"`, no archive); from
  then on the check before use covers it as it covers a pulled model, and its errors name
  `models verify PATH` and `--record` instead of a pull.

Checksums of the archive itself, trusted on first download, are `distribution.pins`.
Nothing here prints; details go to the "streamasr" logger.
"""

from __future__ import annotations

import json
import logging
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from streamasr.errors import ModelError, UsageError

log = logging.getLogger("streamasr")

MANIFEST_NAME = ".streamasr-manifest.json"
MANIFEST_FORMAT = 1
SHA256_RE = re.compile(r"[0-9a-f]{64}")
#: The manifest's "origin" for a folder recorded in place (`models verify PATH --record`).
LOCAL_ORIGIN = "local"
#: Files a model loader picks up by globbing: one of these that the manifest does not list
#: would be run unchecked, so it fails the check before use (other extra files are ignored).
_LOADED_SUFFIXES = (".onnx", ".nemo")


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file, read in blocks. hashlib is imported here, not above: it maps
    OpenSSL (3.5 MB resident), which a check before use that only stats files never needs."""
    import hashlib

    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def file_record(path: Path) -> dict[str, object]:
    """What the manifest keeps of one file: sha256, size and mtime_ns."""
    info = path.stat()
    return {"sha256": sha256_file(path), "bytes": info.st_size, "mtime_ns": info.st_mtime_ns}


def hash_tree(root: Path) -> dict[str, dict[str, object]]:
    """sha256, size and mtime_ns of every regular file under root, by POSIX relative path."""
    files: dict[str, dict[str, object]] = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink() and path.name != MANIFEST_NAME:
            files[path.relative_to(root).as_posix()] = file_record(path)
    return files


def write_manifest(directory: Path, manifest: dict[str, object]) -> None:
    """Write the manifest atomically (a temporary file of this process, then a rename)."""
    temp = directory / f"{MANIFEST_NAME}.{os.getpid()}.tmp"
    try:
        temp.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        temp.replace(directory / MANIFEST_NAME)
    finally:
        temp.unlink(missing_ok=True)


def read_manifest(directory: Path) -> dict[str, object]:
    """The manifest of a pulled model; an error naming the fix if absent or unreadable."""
    path = directory / MANIFEST_NAME
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ModelError(
            f"{directory} has no {MANIFEST_NAME}, so there is nothing to verify against; it "
            f"was not installed by `streamasr models pull`. Pull it again with --force"
        ) from exc
    except (OSError, ValueError) as exc:
        raise ModelError(f"{path} is unreadable ({exc}); {repull_hint(directory)}") from exc
    problem = manifest_problem(data)
    if problem:
        raise ModelError(f"the manifest {path} is damaged ({problem}); {repull_hint(directory)}")
    return data


def repull_hint(directory: Path) -> str:
    return f"re-pull the model with `streamasr models pull {directory.name} --force`"


def is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def manifest_problem(data: object) -> str | None:
    """What is wrong with a parsed manifest, or None: every field read later is typed."""
    if not isinstance(data, dict):
        return "not a JSON object"
    files = data.get("files")
    if not isinstance(files, dict):
        return "'files' is not an object"
    for rel, info in files.items():
        if not isinstance(info, dict):
            return f"the entry for {rel!r} is not an object"
        digest = info.get("sha256")
        if not isinstance(digest, str) or not SHA256_RE.fullmatch(digest):
            return f"the sha256 of {rel!r} is not 64 hex digits"
        if not is_count(info.get("bytes")):
            return f"the size of {rel!r} is not a byte count"
        if "mtime_ns" in info and not is_count(info["mtime_ns"]):
            return f"the mtime_ns of {rel!r} is not a whole number"
        pure = PurePosixPath(rel)
        if pure.is_absolute() or ".." in pure.parts or not rel:
            return f"the file name {rel!r} points outside the model folder"
    archive_sha = data.get("archive_sha256")
    if archive_sha is not None and not isinstance(archive_sha, str):
        return "'archive_sha256' is not a string"
    if not isinstance(data.get("archive_checksum", "recorded"), str):
        return "'archive_checksum' is not a string"
    if not isinstance(data.get("origin", ""), str):
        return "'origin' is not a string"
    return None


def is_local(manifest: dict[str, object]) -> bool:
    """A manifest `models verify PATH --record` wrote (no pull, no archive behind it)."""
    return manifest.get("origin") == LOCAL_ORIGIN


def record_folder(directory: Path) -> int:
    """Pin a local model folder's files: write a local manifest of every file in it (sha256,
    size, mtime_ns); the number of files. A folder a pull installed keeps its own manifest,
    and a linked model file could not be checked before use, so both are refused."""
    existing = directory / MANIFEST_NAME
    if existing.is_file():
        try:
            data = json.loads(existing.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            data = {}  # a damaged manifest is replaced by a new record
        if isinstance(data, dict) and "archive_sha256" in data and not is_local(data):
            raise ModelError(
                f"{directory} was installed by `streamasr models pull`: its checksums are "
                f"those of the release; check it with `streamasr models verify "
                f"{directory.name}`, or reinstall it with `streamasr models pull "
                f"{directory.name} --force`"
            )
    if not any(p.suffix in _LOADED_SUFFIXES for p in directory.iterdir()):
        raise UsageError(f"{directory} holds no .onnx or .nemo file, so it is no model folder; "
                         "give the folder the model's files are in")
    for path in sorted(directory.iterdir()):
        if path.suffix in _LOADED_SUFFIXES and path.is_symlink():
            raise ModelError(
                f"{path} is a symbolic link; --record pins the files of the folder itself: "
                "copy the file into the folder, then record it"
            )
    files = hash_tree(directory)
    try:
        write_manifest(directory, {"format": MANIFEST_FORMAT, "origin": LOCAL_ORIGIN,
                                   "files": files})
    except OSError as exc:
        raise ModelError(
            f"cannot write {existing} ({exc.strerror or exc}); --record keeps the checksums "
            "in the model folder: make it writable, or record a copy of the folder"
        ) from None
    return len(files)


# --- full verification ---------------------------------------------------------------------


@dataclass(frozen=True)
class VerifyReport:
    """Files of a pulled model compared with its manifest."""

    name: str
    directory: Path
    checked: int
    missing: tuple[str, ...]
    changed: tuple[str, ...]
    extra: tuple[str, ...]  # present but not in the manifest; reported, not a failure
    archive_sha256: str | None
    archive_checksum: str  # "catalog", "--sha256", "pinned" or "recorded"
    local: bool = False  # recorded in place (`verify PATH --record`): no archive behind it

    @property
    def ok(self) -> bool:
        return not self.missing and not self.changed


def verify_folder(directory: Path) -> VerifyReport:
    """Re-hash every file of a model folder against its manifest."""
    manifest = read_manifest(directory)
    expected: dict[str, dict[str, object]] = manifest["files"]  # type: ignore[assignment]
    missing, changed = [], []
    for rel, info in sorted(expected.items()):
        path = directory / rel
        if not path.is_file():
            missing.append(rel)
        elif path.stat().st_size != info.get("bytes") or sha256_file(path) != info.get("sha256"):
            changed.append(rel)
    present = {
        p.relative_to(directory).as_posix()
        for p in directory.rglob("*")
        if p.is_file() and not p.name.startswith(MANIFEST_NAME)
    }
    extra = sorted(present - set(expected))
    return VerifyReport(
        directory.name, directory, len(expected), tuple(missing), tuple(changed), tuple(extra),
        manifest.get("archive_sha256"),  # type: ignore[arg-type]
        str(manifest.get("archive_checksum", "recorded")),
        is_local(manifest),
    )


# --- the check before each use -------------------------------------------------------------


class ModelChangedError(ModelError):
    """A pulled model's files are not the ones its manifest recorded."""


@dataclass(frozen=True)
class UseCheck:
    """What the check before use did: files compared, and how many were hashed."""

    directory: Path
    files: int
    hashed_files: int
    hashed_bytes: int


def check_before_use(directory: Path, name: str | None = None, *, full: bool = False
                     ) -> UseCheck:
    """Refuse a pulled model whose files changed since it was installed.

    Without `full`: size and mtime_ns against the manifest (a stat per file); a file whose
    mtime differs, or that an older manifest recorded without one, is hashed. With `full`:
    every file is hashed. A folder without a manifest (a bundled model, a folder of the
    user's) has nothing to check against and passes. `name` is the model as the user typed
    it, for the hints. Matching files with a new mtime are written back to the manifest.
    """
    if not (directory / MANIFEST_NAME).is_file():
        if full:
            log.warning(
                "--verify: %s has no %s (it was not pulled with `streamasr models pull`), so "
                "there is nothing to verify it against; `streamasr models verify %s --record` "
                "records its checksums", directory, MANIFEST_NAME, directory,
            )
        return UseCheck(directory, 0, 0, 0)
    label = name or directory.name
    manifest = read_manifest(directory)
    files: dict[str, dict[str, object]] = manifest["files"]  # type: ignore[assignment]
    problems: list[str] = []
    hashed = hashed_bytes = 0
    refreshed = False
    for rel, info in sorted(files.items()):
        path = directory / rel
        try:
            now = os.lstat(path)
        except OSError:
            problems.append(f"{rel} is missing")
            continue
        if not stat.S_ISREG(now.st_mode):
            problems.append(f"{rel} is no longer a regular file")
            continue
        if now.st_size != info["bytes"]:
            problems.append(f"{rel} is {now.st_size} bytes, not the {info['bytes']} recorded")
            continue
        if not full and info.get("mtime_ns") == now.st_mtime_ns:
            continue
        hashed += 1
        hashed_bytes += now.st_size
        if sha256_file(path) != info["sha256"]:
            problems.append(f"{rel} has other content than the sha256 recorded")
        elif info.get("mtime_ns") != now.st_mtime_ns:
            info["mtime_ns"] = now.st_mtime_ns
            refreshed = True
    problems += [
        f"{p.name} is not in the manifest"
        for p in sorted(directory.iterdir())
        if p.suffix in _LOADED_SUFFIXES and p.name not in files
    ]
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        if is_local(manifest):
            raise ModelChangedError(
                f"model folder {directory} changed since its checksums were recorded: "
                f"{problems[0]}{more}. Check it with `streamasr models verify {directory}`; "
                "restore the file, or if the change is yours, record the folder again with "
                f"`streamasr models verify {directory} --record`"
            )
        raise ModelChangedError(
            f"model {label} changed since it was pulled: {problems[0]}{more}. Check it with "
            f"`streamasr models verify {label}`, and reinstall it with "
            f"`streamasr models pull {label} --force`"
        )
    if refreshed:
        try:
            write_manifest(directory, manifest)
        except OSError as exc:  # a read-only or full cache: the next use hashes again
            log.debug("could not record new mtimes in %s: %s", directory, exc)
    log.debug("checked %s: %d files, %d hashed (%d bytes)", directory, len(files), hashed,
              hashed_bytes)
    return UseCheck(directory, len(files), hashed, hashed_bytes)


def check_model_path(path: Path, *, full: bool = False) -> None:
    """The check before use for a model given by path: a pulled folder, or a file in one.
    The hints name the folder, as `models verify` and `models pull` take a name."""
    if path.is_dir():
        check_before_use(path, full=full)
    elif path.is_file() and (path.parent / MANIFEST_NAME).is_file():
        check_before_use(path.parent, full=full)


