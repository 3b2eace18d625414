"""The model cache: checksummed, resumable downloads, safe extraction, verification.

Model downloads break, and a tool that unpacks straight into its cache leaves half a model
there when they do. Here an archive is downloaded to `<cache>/<name>.tar.bz2.part` (resumed
with an HTTP Range request after a dropped connection), checked against the sha256 the
catalog or the user gives, unpacked into a temporary folder inside the cache with every
member checked, and only then renamed into place. The sha256 of every extracted file goes
into `<model>/.streamasr-manifest.json`, which `verify` checks later.

Nothing here prints: progress goes to an injected callback, details to the "streamasr" logger.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import json
import logging
import os
import re
import shutil
import socket
import tarfile
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath
from urllib.parse import urlparse

from streamasr import __version__
from streamasr.catalog import CatalogEntry, find, lookup
from streamasr.errors import ModelError, UsageError

log = logging.getLogger("streamasr")

MANIFEST_NAME = ".streamasr-manifest.json"
MANIFEST_FORMAT = 1
LOCK_DIR = ".locks"
PART_SUFFIX = ".tar.bz2.part"
BLOCK_BYTES = 1 << 16
DEFAULT_RETRIES = 3
DEFAULT_TIMEOUT_S = 30.0
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_CONTENT_RANGE_RE = re.compile(r"bytes\s+(\d+)-(\d+)/(\d+|\*)")

#: progress(bytes_done, bytes_total_or_None), called as bytes arrive.
ProgressFn = Callable[[int, "int | None"], None]
#: stage("unpacking"), called when a pull moves on to a step without byte progress.
StageFn = Callable[[str], None]


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
    if not _NAME_RE.match(name):
        return None
    directory = (cache or cache_dir()) / canonical_name(name)
    if (directory / "tokens.txt").is_file():
        return directory
    return None


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
        if p.is_dir() and not p.name.startswith(".") and (p / "tokens.txt").is_file()
    ]


@dataclass(frozen=True)
class PullTarget:
    """What to install: cache name, where from, and the checksum to hold it to."""

    name: str
    url: str | None
    expected_sha256: str | None
    expected_bytes: int | None
    checksum_source: str | None  # "catalog", "--sha256" or None (recorded on first download)


def pull_target(name: str, url: str | None = None, sha256: str | None = None,
                have_archive: bool = False) -> PullTarget:
    """Resolve a name plus overrides; a custom name needs --url or --archive."""
    if sha256 is not None and not re.fullmatch(r"[0-9a-fA-F]{64}", sha256):
        raise UsageError(f"--sha256 must be 64 hex digits, got {sha256!r}")
    entry = find(name)
    if entry is None:
        if url is None and not have_archive:
            lookup(name)  # raises with the catalog listed
        if not _NAME_RE.match(name):
            raise UsageError(
                f"model name {name!r} cannot be a folder name; use letters, digits, '.', '_', '-'"
            )
        return PullTarget(name, url, _lower(sha256), None, "--sha256" if sha256 else None)
    if sha256 is not None:
        return PullTarget(entry.name, url or entry.url, sha256.lower(), None, "--sha256")
    source = "catalog" if entry.archive_sha256 else None
    return PullTarget(
        entry.name, url or entry.url, entry.archive_sha256, entry.archive_bytes, source
    )


def _lower(value: str | None) -> str | None:
    return value.lower() if value else None


@dataclass(frozen=True)
class PullResult:
    """What a pull did."""

    name: str
    directory: Path
    already_installed: bool
    archive_sha256: str | None = None
    checksum_source: str | None = None  # "catalog", "--sha256", or None: recorded now
    files: int = 0
    installed_bytes: int = 0
    downloaded_bytes: int = 0  # fetched by this run
    resumed_from_bytes: int = 0  # already in the .part file when this run started


def pull(
    name: str,
    *,
    url: str | None = None,
    archive: Path | None = None,
    sha256: str | None = None,
    force: bool = False,
    progress: ProgressFn | None = None,
    stage: StageFn | None = None,
    cache: Path | None = None,
    retries: int = DEFAULT_RETRIES,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    retry_wait_s: float = 1.0,
) -> PullResult:
    """Download (or take `archive`), check, unpack safely and install a model into the cache."""
    if url is not None and archive is not None:
        raise UsageError("give either --url or --archive, not both")
    target = pull_target(name, url, sha256, have_archive=archive is not None)
    root = cache or cache_dir()
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ModelError(
            f"cannot create the model cache {root}: {exc.strerror}. "
            "Set STREAMASR_HOME to a writable folder"
        ) from exc
    final = root / target.name
    say = stage or (lambda _text: None)
    with _locked(root, target.name):
        _remove_stale_temps(root, target.name)
        part = root / f"{target.name}{PART_SUFFIX}"
        if (final / "tokens.txt").is_file() and not force:
            part.unlink(missing_ok=True)  # left by a pull killed after its last rename
            return PullResult(target.name, final, already_installed=True)
        resumed_from = downloaded = 0
        if archive is not None:
            source_path, source_label = _local_archive(archive), str(archive)
        else:
            if target.url is None:
                raise UsageError(f"{name} has no download address; pass --url or --archive")
            resumed_from = part.stat().st_size if part.exists() else 0
            say("downloading")
            downloaded = download(
                target.url, part, name=name, progress=progress, retries=retries,
                timeout_s=timeout_s, expected_bytes=target.expected_bytes,
                retry_wait_s=retry_wait_s,
            )
            source_path, source_label = part, target.url
        say("checking sha256")
        archive_sha = _check_archive(source_path, target, remove_on_mismatch=archive is None)
        say("unpacking")
        manifest = {
            "format": MANIFEST_FORMAT,
            "name": target.name,
            "source": source_label,
            "archive_sha256": archive_sha,
            "archive_bytes": source_path.stat().st_size,
            "archive_checksum": target.checksum_source or "recorded",
            "installed_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "streamasr_version": __version__,
        }
        directory, files = _install(source_path, root, final, target.name, force, manifest)
        if archive is None:
            part.unlink(missing_ok=True)
    log.info("installed %s in %s", target.name, directory)
    return PullResult(
        target.name, directory, False, archive_sha, target.checksum_source, len(files),
        sum(f["bytes"] for f in files.values()), downloaded, resumed_from,
    )


def _local_archive(archive: Path) -> Path:
    path = archive.expanduser()
    if not path.is_file():
        raise ModelError(f"--archive {archive}: no such file")
    return path


def _check_archive(path: Path, target: PullTarget, remove_on_mismatch: bool) -> str:
    """Hash the archive; a mismatch removes a downloaded file and is an error."""
    actual = sha256_file(path)
    if target.expected_sha256 is None or actual == target.expected_sha256:
        return actual
    where = "the catalog" if target.checksum_source == "catalog" else "--sha256"
    if remove_on_mismatch:
        path.unlink(missing_ok=True)
        what = "The downloaded file was deleted and nothing was installed"
    else:
        what = "Nothing was installed"
    raise ModelError(
        f"archive sha256 {actual} does not match {target.expected_sha256} from {where}: the file "
        f"is corrupt, truncated, or not the released archive. {what}. Pull again, or from "
        "another mirror with --url"
    )


def _install(
    archive: Path, root: Path, final: Path, name: str, force: bool, manifest: dict[str, object]
) -> tuple[Path, dict[str, dict[str, object]]]:
    """Unpack into a temporary folder in the cache, write the manifest, rename it into place."""
    temp = Path(tempfile.mkdtemp(prefix=f".{name}.partial-", dir=root))
    try:
        safe_extract(archive, temp)
        model_root = _model_root(temp, archive)
        files = hash_tree(model_root)
        _write_manifest(model_root, {**manifest, "files": files})
        old = None
        if final.exists():
            if not force:
                raise ModelError(
                    f"{final} exists but is not a complete model; remove it or pull with --force"
                )
            old = root / f".{name}.old-{os.getpid()}"
            final.rename(old)
        model_root.rename(final)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        return final, files
    finally:
        shutil.rmtree(temp, ignore_errors=True)


def _model_root(temp: Path, archive: Path) -> Path:
    """The folder holding tokens.txt: the archive's single top folder, or its top level."""
    entries = list(temp.iterdir())
    root = entries[0] if len(entries) == 1 and entries[0].is_dir() else temp
    if not (root / "tokens.txt").is_file() or not any(root.glob("*.onnx")):
        raise ModelError(
            f"{archive.name} does not hold a sherpa-onnx model: no tokens.txt and .onnx files "
            "at its top level (or in its single top folder)"
        )
    return root


def safe_extract(archive: Path, dest: Path) -> None:
    """Extract a tar archive into `dest`, refusing any member that would land outside it.

    Absolute paths, `..`, links pointing out of `dest`, and device files are refused before
    anything is written for that member; `filter="data"` is applied where Python has it.
    """
    dest_resolved = dest.resolve()
    use_filter = hasattr(tarfile, "data_filter")
    try:
        with tarfile.open(archive, "r:*") as tar:
            for member in tar:
                _check_member(member, dest_resolved, archive)
                if use_filter:
                    tar.extract(member, dest, filter="data")
                else:  # pragma: no cover - Python without extraction filters
                    tar.extract(member, dest)
    except tarfile.ReadError as exc:
        raise ModelError(
            f"{archive.name} is not a readable tar archive ({exc}); the download may be "
            "truncated or the file is not a model release. Pull again with --force"
        ) from exc
    except (EOFError, OSError) as exc:
        raise ModelError(f"{archive.name} could not be unpacked: {exc}") from exc
    except tarfile.TarError as exc:  # FilterError and friends
        raise ModelError(f"{archive.name} was refused while unpacking: {exc}") from exc


def _check_member(member: tarfile.TarInfo, dest: Path, archive: Path) -> None:
    def refuse(why: str) -> ModelError:
        return ModelError(
            f"refusing to unpack {archive.name}: member {member.name!r} {why}. A genuine model "
            "release never does this; the archive is damaged or malicious"
        )

    pure = PurePosixPath(member.name)
    if pure.is_absolute() or re.match(r"^[A-Za-z]:", member.name) or "\\" in member.name:
        raise refuse("has an absolute path")
    if ".." in pure.parts:
        raise refuse("climbs out of the model folder with '..'")
    target = (dest / pure).resolve()
    if not target.is_relative_to(dest):
        raise refuse("would be written outside the model folder")
    if member.issym() or member.islnk():
        link = PurePosixPath(member.linkname)
        base = target.parent if member.issym() else dest
        if link.is_absolute() or not (base / link).resolve().is_relative_to(dest):
            raise refuse(f"links outside the model folder (to {member.linkname!r})")
    elif not (member.isfile() or member.isdir()):
        raise refuse("is a device, FIFO or other special file")


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file, read in blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def hash_tree(root: Path) -> dict[str, dict[str, object]]:
    """sha256 and size of every regular file under root, by POSIX relative path."""
    files: dict[str, dict[str, object]] = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink() and path.name != MANIFEST_NAME:
            rel = path.relative_to(root).as_posix()
            files[rel] = {"sha256": sha256_file(path), "bytes": path.stat().st_size}
    return files


def _write_manifest(directory: Path, manifest: dict[str, object]) -> None:
    temp = directory / (MANIFEST_NAME + ".tmp")
    temp.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    temp.replace(directory / MANIFEST_NAME)


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
        raise ModelError(
            f"{path} is unreadable ({exc}); pull the model again with --force"
        ) from exc
    if not isinstance(data, dict) or not isinstance(data.get("files"), dict):
        raise ModelError(f"{path} is not a streamasr manifest; pull the model again with --force")
    return data


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
    archive_checksum: str  # "catalog", "--sha256" or "recorded"

    @property
    def ok(self) -> bool:
        return not self.missing and not self.changed


def verify(name: str, cache: Path | None = None) -> VerifyReport:
    """Re-hash every file of a pulled model against the manifest written when it was pulled."""
    directory = require_cached(name, cache)
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
        if p.is_file() and p.name != MANIFEST_NAME
    }
    extra = sorted(present - set(expected))
    return VerifyReport(
        directory.name, directory, len(expected), tuple(missing), tuple(changed), tuple(extra),
        manifest.get("archive_sha256"),  # type: ignore[arg-type]
        str(manifest.get("archive_checksum", "recorded")),
    )


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


# --- download ----------------------------------------------------------------------------


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
) -> int:
    """Fetch `url` into `part`, resuming from what `part` holds; returns bytes fetched now.

    A dropped connection is retried `retries` times with a Range request for the rest. When
    the retries run out the .part file stays, and the next pull resumes from it.
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
                _receive(response, part, have, progress, fetched)
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
                f"{_mb(kept)} are kept in {part}; run the same pull again to resume from there. "
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
) -> None:
    """Append one response to the .part file (counting into fetched[0]); raise if it ends early."""
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
    done = have
    if progress:
        progress(done, total)
    with open(part, mode) as handle:
        try:
            while block := response.read(BLOCK_BYTES):
                handle.write(block)
                done += len(block)
                fetched[0] += len(block)
                if progress:
                    progress(done, total)
        except (OSError, http.client.HTTPException) as exc:
            raise _Interrupted(f"{_describe(exc)} after {_mb(done)}") from exc
    if total is not None and done < total:
        raise _Interrupted(f"connection closed after {_mb(done)} of {_mb(total)}")


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


def _mb(num_bytes: int) -> str:
    return f"{num_bytes / (1 << 20):.1f} MB"


# --- locking -----------------------------------------------------------------------------


@contextlib.contextmanager
def _locked(root: Path, name: str) -> Iterator[None]:
    """One pull per model at a time (POSIX advisory lock; no locking where fcntl is absent)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        yield
        return
    lock_dir = root / LOCK_DIR
    lock_dir.mkdir(exist_ok=True)
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


def _remove_stale_temps(root: Path, name: str) -> None:
    """Leftovers of a pull that was killed mid-extraction (we hold the lock, so not live)."""
    for stale in root.glob(f".{name}.partial-*"):
        shutil.rmtree(stale, ignore_errors=True)
    for stale in root.glob(f".{name}.old-*"):
        shutil.rmtree(stale, ignore_errors=True)


def describe_entry_state(entry: CatalogEntry, cache: Path | None = None) -> str:
    """'yes', 'yes (no manifest)' or 'no', for tables."""
    directory = find_cached(entry.name, cache)
    if directory is None:
        return "no"
    return "yes" if (directory / MANIFEST_NAME).is_file() else "yes (no manifest)"
