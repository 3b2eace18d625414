"""The model cache: checksummed, resumable downloads, safe extraction, verification.

Model downloads break, and a tool that unpacks straight into its cache leaves half a model
there when they do. Here an archive is downloaded to `<cache>/<name>.tar.bz2.part` (resumed
with an HTTP Range request after a dropped connection or a stall), checked against the sha256
the catalog or the user gives, unpacked into a fresh temporary folder inside the cache, and
only then renamed into place. The sha256, size and mtime of every extracted file go into
`<model>/.streamasr-manifest.json`, which `verify` checks later, and which every use of the
model checks cheaply first (`streamasr.store_verify`). A single-file model (a NeMo `.nemo`)
takes the same path without the unpacking.

The transfer itself is `streamasr.store_download`: it stops at a size cap (decided here:
twice the catalog's size, or --max-download-mb), and before it starts when the server
announces more than the cap or than the disk has free. An archive
with no published checksum is pinned on first download (`store_verify`): a later pull with
other bytes is refused unless --accept-new-checksum.

Unpacking trusts neither `tarfile.extract` nor `Path.resolve()`: a model needs no links, so
any link, device or FIFO refuses the whole archive, and every file is written by this module
with O_NOFOLLOW | O_EXCL under directories it opened itself, counting the bytes against a cap.

Nothing here prints: progress goes to an injected callback, details to the "streamasr" logger.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import re
import shutil
import tarfile
import tempfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath
from urllib.parse import urlparse

from streamasr import __version__
from streamasr.catalog import CatalogEntry, find, lookup
from streamasr.errors import ModelError, UsageError
from streamasr.punctuation import is_punctuation_folder
from streamasr.store_download import (
    BLOCK_BYTES,
    DEFAULT_RETRIES,
    DEFAULT_TIMEOUT_S,
    MIN_WINDOW_BYTES,
    ProgressFn,
    download,
)
from streamasr.store_download import DISK_FULL as _DISK_FULL
from streamasr.store_download import cache_failure as _cache_failure
from streamasr.store_download import mb as _mb
from streamasr.store_verify import (
    MANIFEST_FORMAT,
    MANIFEST_NAME,
    Pin,
    UseCheck,
    VerifyReport,
    check_before_use,
    check_model_path,
    hash_tree,
    manifest_problem,
    pin_mismatch,
    read_manifest,
    read_pin,
    sha256_file,
    verify_folder,
    write_manifest,
    write_pin,
)

__all__ = [  # names other modules and tests import from here, wherever they now live
    "BLOCK_BYTES", "DEFAULT_RETRIES", "DEFAULT_TIMEOUT_S", "MIN_WINDOW_BYTES", "ProgressFn",
    "download", "MANIFEST_FORMAT", "MANIFEST_NAME", "Pin", "UseCheck", "VerifyReport",
    "check_before_use", "check_model_path", "hash_tree", "manifest_problem", "read_manifest",
    "sha256_file",
]

log = logging.getLogger("streamasr")

LOCK_DIR = ".locks"
PART_SUFFIX = ".tar.bz2.part"
#: Unpacked-size cap: a catalog model may unpack to CATALOG_SIZE_FACTOR x its download size
#: (weights barely compress, so a real release unpacks to about 1-1.2x); any other archive
#: to ARCHIVE_SIZE_FACTOR x its own size, but at least MIN_CAP_MB; a single-file model to
#: DEFAULT_SINGLE_FILE_MB unless the catalog knows its size. --max-unpacked-mb overrides all.
CATALOG_SIZE_FACTOR = 3
ARCHIVE_SIZE_FACTOR = 20
MIN_CAP_MB = 256
DEFAULT_SINGLE_FILE_MB = 8192
#: Download cap: a catalog model may download CATALOG_DOWNLOAD_FACTOR x its catalog size (an
#: estimated size is within a few percent); anything else DEFAULT_DOWNLOAD_MB. A server that
#: streams forever stops there instead of filling the disk. --max-download-mb overrides.
CATALOG_DOWNLOAD_FACTOR = 2
DEFAULT_DOWNLOAD_MB = 8192
NEMO_SUFFIX = ".nemo"
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")

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


@dataclass(frozen=True)
class PullTarget:
    """What to install: cache name, where from, and the checksum to hold it to."""

    name: str
    url: str | None
    expected_sha256: str | None
    expected_bytes: int | None
    checksum_source: str | None  # "catalog", "--sha256" or None (recorded on first download)
    file_name: str | None = None  # a single-file model (.nemo): installed under this name
    catalog_mb: float | None = None  # the catalog's download size, for the size cap


def pull_target(name: str, url: str | None = None, sha256: str | None = None,
                have_archive: bool = False, archive_name: str | None = None) -> PullTarget:
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
        source_name = archive_name or PurePosixPath(urlparse(url or "").path).name
        return PullTarget(
            name, url, _lower(sha256), None, "--sha256" if sha256 else None,
            _single_file_name(source_name),
        )
    file_name = entry.file_name
    if sha256 is not None:
        return PullTarget(
            entry.name, url or entry.url, sha256.lower(), None, "--sha256", file_name,
            entry.size_mb,
        )
    source = "catalog" if entry.archive_sha256 else None
    return PullTarget(
        entry.name, url or mirrored(entry.url), entry.archive_sha256, entry.archive_bytes,
        source, file_name, entry.size_mb,
    )


def mirrored(url: str) -> str:
    """A catalog URL, or the same file name under $STREAMASR_MIRROR (a local or company
    mirror of the releases; what arrives is still held to the catalog's checksum or pin)."""
    mirror = os.environ.get("STREAMASR_MIRROR", "").strip()
    if not mirror:
        return url
    return f"{mirror.rstrip('/')}/{PurePosixPath(urlparse(url).path).name}"


def _single_file_name(source_name: str) -> str | None:
    """A `.nemo` download is installed as one file under its own (safe) name."""
    if not source_name.endswith(NEMO_SUFFIX):
        return None
    return source_name if _NAME_RE.match(source_name) else "model.nemo"


def unpacked_cap_bytes(target: PullTarget, source_bytes: int, max_unpacked_mb: float | None
                       ) -> int:
    """How many bytes a pull may install; the rule is in the constants above."""
    if max_unpacked_mb is not None:
        return int(max_unpacked_mb * (1 << 20))
    if target.catalog_mb is not None:
        return int(CATALOG_SIZE_FACTOR * max(target.catalog_mb, 1.0) * (1 << 20))
    if target.file_name is not None:
        return DEFAULT_SINGLE_FILE_MB << 20
    return max(ARCHIVE_SIZE_FACTOR * source_bytes, MIN_CAP_MB << 20)


def part_path(root: Path, target: PullTarget) -> Path:
    """Where a download of `target` collects its bytes until it is complete and checked."""
    if target.file_name is not None:
        return root / f"{target.name}{NEMO_SUFFIX}.part"
    return root / f"{target.name}{PART_SUFFIX}"


def _lower(value: str | None) -> str | None:
    return value.lower() if value else None


@dataclass(frozen=True)
class PullResult:
    """What a pull did."""

    name: str
    directory: Path
    already_installed: bool
    archive_sha256: str | None = None
    checksum_source: str | None = None  # "catalog", "--sha256", "pinned", None: recorded now
    files: int = 0
    installed_bytes: int = 0
    downloaded_bytes: int = 0  # fetched by this run
    resumed_from_bytes: int = 0  # already in the .part file when this run started
    replaced_sha256: str | None = None  # the pinned sum this pull replaced (accepted change)


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
    max_unpacked_mb: float | None = None,
    min_window_bytes: int = MIN_WINDOW_BYTES,
    max_download_mb: float | None = None,
    accept_new_checksum: bool = False,
) -> PullResult:
    """Download (or take `archive`), check, unpack safely and install a model into the cache.

    A resumed download that fails its checksum (or does not unpack) is fetched again from
    byte zero, once: the bytes kept from an earlier run were the damaged part. `force`
    reinstalls, and discards any `.part` file first. Without a published checksum the first
    download's sha256 is pinned, and other bytes are refused unless `accept_new_checksum`.
    """
    if url is not None and archive is not None:
        raise UsageError("give either --url or --archive, not both")
    _check_positive("--timeout", timeout_s)
    if max_unpacked_mb is not None:
        _check_positive("--max-unpacked-mb", max_unpacked_mb)
    if max_download_mb is not None:
        _check_positive("--max-download-mb", max_download_mb)
    target = pull_target(
        name, url, sha256, have_archive=archive is not None,
        archive_name=archive.name if archive is not None else None,
    )
    if accept_new_checksum and target.checksum_source == "catalog":
        raise UsageError(
            f"--accept-new-checksum replaces a sha256 recorded on first download; the one of "
            f"{target.name} is published in the catalog. To install other bytes, state their "
            "sha256 with --sha256"
        )
    root = cache or cache_dir()
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ModelError(
            f"cannot create the model cache {root}: {exc.strerror}. "
            "Set STREAMASR_HOME to a writable folder"
        ) from exc
    try:
        return _pull_into(
            target, root, name, archive=archive, force=force, progress=progress, stage=stage,
            retries=retries, timeout_s=timeout_s, retry_wait_s=retry_wait_s,
            max_unpacked_mb=max_unpacked_mb, min_window_bytes=min_window_bytes,
            max_download_mb=max_download_mb, accept_new_checksum=accept_new_checksum,
        )
    except OSError as exc:  # the cache itself failed us: full, out of inodes, read-only
        raise ModelError(_cache_failure(root, exc)) from exc


def _pull_into(
    target: PullTarget, root: Path, name: str, *, archive: Path | None, force: bool,
    progress: ProgressFn | None, stage: StageFn | None, retries: int, timeout_s: float,
    retry_wait_s: float, max_unpacked_mb: float | None, min_window_bytes: int,
    max_download_mb: float | None, accept_new_checksum: bool,
) -> PullResult:
    """`pull` once the target and the cache are settled: under the model's lock."""
    final = root / target.name
    say = stage or (lambda _text: None)
    with _locked(root, target.name):
        _remove_stale_temps(root, target.name)
        part = part_path(root, target)
        if is_model_folder(final) and not force:
            part.unlink(missing_ok=True)  # left by a pull killed after its last rename
            return PullResult(target.name, final, already_installed=True)
        if force:
            part.unlink(missing_ok=True)
        pin = read_pin(root, target.name) if target.checksum_source != "catalog" else None
        if pin is not None and target.checksum_source is None and not accept_new_checksum:
            target = replace(target, expected_sha256=pin.sha256, checksum_source="pinned")
        resumed_from = downloaded = 0
        attempts = 1 if archive is not None else 2
        for attempt in range(attempts):
            if archive is not None:
                source_path, source_label = _local_archive(archive), str(archive)
            else:
                if target.url is None:
                    raise UsageError(f"{name} has no download address; pass --url or --archive")
                resumed_from = part.stat().st_size if part.exists() else 0
                say("downloading")
                cap, cap_option = download_cap(target, max_download_mb, max_unpacked_mb)
                downloaded += download(
                    target.url, part, name=name, progress=progress, retries=retries,
                    timeout_s=timeout_s, expected_bytes=target.expected_bytes,
                    retry_wait_s=retry_wait_s, min_window_bytes=min_window_bytes,
                    max_bytes=cap, cap_option=cap_option,
                )
                source_path, source_label = part, target.url
            try:
                say("checking sha256")
                archive_sha = _check_archive(
                    source_path, target, remove_on_mismatch=archive is None, pin=pin,
                    source_label=source_label,
                )
                say("unpacking" if target.file_name is None else "installing")
                source_bytes = source_path.stat().st_size
                manifest = {
                    "format": MANIFEST_FORMAT,
                    "name": target.name,
                    "source": source_label,
                    "archive_sha256": archive_sha,
                    "archive_bytes": source_bytes,
                    "archive_checksum": target.checksum_source or "recorded",
                    "installed_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                    "streamasr_version": __version__,
                }
                directory, files = _install(
                    source_path, root, final, target, force, manifest,
                    unpacked_cap_bytes(target, source_bytes, max_unpacked_mb),
                    move_source=archive is None,
                )
            except _Corrupt as exc:
                if archive is None:
                    part.unlink(missing_ok=True)
                if resumed_from and attempt + 1 < attempts:
                    log.warning(
                        "the resumed download of %s is damaged (%s); downloading it again "
                        "from the start", target.name, exc,
                    )
                    say("restarting from zero")
                    continue
                raise
            except (ModelError, OSError):
                if archive is None:  # a refused download is of no use to a later pull
                    part.unlink(missing_ok=True)
                raise
            break
        if archive is None:
            part.unlink(missing_ok=True)
        if target.checksum_source != "catalog":
            write_pin(root, target.name, archive_sha, source_bytes, source_label)
    replaced = pin.sha256 if pin is not None and pin.sha256 != archive_sha else None
    if replaced:
        log.warning("%s: the pinned sha256 %s was replaced by %s", target.name, replaced,
                    archive_sha)
    log.info("installed %s in %s", target.name, directory)
    return PullResult(
        target.name, directory, False, archive_sha, target.checksum_source, len(files),
        sum(int(f["bytes"]) for f in files.values()),  # type: ignore[call-overload]
        downloaded, resumed_from, replaced,
    )


def download_cap(target: PullTarget, max_download_mb: float | None,
                 max_unpacked_mb: float | None) -> tuple[int, str]:
    """How many bytes a download may bring, and the option that raises that cap. A `.nemo`
    is installed as downloaded, so its unpacked cap bounds the download too."""
    if max_download_mb is not None:
        cap = int(max_download_mb * (1 << 20))
    elif target.catalog_mb is not None:
        cap = int(CATALOG_DOWNLOAD_FACTOR * max(target.catalog_mb, 1.0) * (1 << 20))
    else:
        cap = DEFAULT_DOWNLOAD_MB << 20
    if target.file_name is not None:
        unpacked = unpacked_cap_bytes(target, 0, max_unpacked_mb)
        if unpacked < cap:
            return unpacked, "--max-unpacked-mb"
    return cap, "--max-download-mb"


def _check_positive(option: str, value: float) -> None:
    if not math.isfinite(value) or value <= 0:
        raise UsageError(f"{option} {value!r}: give a positive, finite number")


class _Corrupt(ModelError):
    """The bytes are not what was expected: a checksum mismatch or an unreadable archive."""


def _local_archive(archive: Path) -> Path:
    path = archive.expanduser()
    if not path.is_file():
        raise ModelError(f"--archive {archive}: no such file")
    return path


def _check_archive(path: Path, target: PullTarget, remove_on_mismatch: bool,
                   pin: Pin | None = None, source_label: str = "") -> str:
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
    if target.checksum_source == "pinned" and pin is not None:
        raise _Corrupt(str(pin_mismatch(pin, actual, source_label or str(path), what)))
    raise _Corrupt(
        f"archive sha256 {actual} does not match {target.expected_sha256} from {where}: the file "
        f"is corrupt, truncated, or not the released archive. {what}. Pull again, or from "
        "another mirror with --url"
    )


def _install(
    source: Path, root: Path, final: Path, target: PullTarget, force: bool,
    manifest: dict[str, object], cap_bytes: int, move_source: bool,
) -> tuple[Path, dict[str, dict[str, object]]]:
    """Unpack into a fresh temporary folder in the cache, write the manifest, rename it in."""
    name = target.name
    temp = Path(tempfile.mkdtemp(prefix=f".{name}.partial-", dir=root))
    try:
        if target.file_name is None:
            safe_extract(source, temp, cap_bytes)
            model_root = _model_root(temp, source)
        else:
            model_root = temp
            _place_single_file(source, temp / target.file_name, cap_bytes, move_source)
        files = hash_tree(model_root)
        write_manifest(model_root, {**manifest, "files": files})
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


def _place_single_file(source: Path, dest: Path, cap_bytes: int, move: bool) -> None:
    """Put a `.nemo` into the temporary folder: moved if downloaded, copied if the user's."""
    size = source.stat().st_size
    if size > cap_bytes:
        raise ModelError(
            f"{source.name} is {_mb(size)}, more than the {_mb(cap_bytes)} a model may take "
            "here. If it is genuine, raise the cap with --max-unpacked-mb"
        )
    if not _is_nemo_file(source):
        raise _Corrupt(
            f"{source.name} is not a NeMo model (a .nemo is a tar archive holding "
            "model_config.yaml); the download may be damaged or the address wrong"
        )
    # what NeMo would run or read on load is refused now, before it enters the cache
    from streamasr.backends.nemo_archive import check_file

    check_file(source)
    if move:
        os.replace(source, dest)
    else:
        shutil.copyfile(source, dest)


def _is_nemo_file(path: Path) -> bool:
    try:
        with tarfile.open(path, "r:*") as tar:
            return any(PurePosixPath(m.name).name == "model_config.yaml" for m in tar)
    except (tarfile.TarError, OSError, EOFError):
        return False


def _model_root(temp: Path, archive: Path) -> Path:
    """The folder holding tokens.txt (or a punctuation model): the archive's single top
    folder, or its top level."""
    entries = list(temp.iterdir())
    root = entries[0] if len(entries) == 1 and entries[0].is_dir() else temp
    speech = (root / "tokens.txt").is_file() and any(root.glob("*.onnx"))
    if not speech and not is_punctuation_folder(root):
        raise ModelError(
            f"{archive.name} does not hold a sherpa-onnx model: no tokens.txt and .onnx files "
            "(nor a punctuation model's bpe.vocab and model.onnx) at its top level (or in its "
            "single top folder)"
        )
    return root


# --- unpacking ---------------------------------------------------------------------------

_DIR_FD = (
    os.open in os.supports_dir_fd and os.mkdir in os.supports_dir_fd
    and hasattr(os, "O_NOFOLLOW") and hasattr(os, "O_DIRECTORY")
)
try:
    from lzma import LZMAError as _LzmaError
except ImportError:  # pragma: no cover - Python built without lzma
    _LzmaError = EOFError  # type: ignore[assignment,misc]
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_BINARY = getattr(os, "O_BINARY", 0)


class _TooBig(ModelError):
    """The archive unpacks to more than the cap."""


def safe_extract(archive: Path, dest: Path, max_bytes: int | None = None) -> int:
    """Unpack the regular files and folders of a tar archive into the empty folder `dest`.

    Any link (symbolic or hard), device, FIFO, absolute path or `..` refuses the archive: a
    model needs none of them, and refusing them all is what makes escaping `dest` impossible
    on every Python version, whatever `Path.resolve()` or tar filters would say. Files are
    written here, with O_NOFOLLOW | O_EXCL, below folders opened one component at a time;
    their bytes are counted while written, and passing `max_bytes` stops at once. Returns the
    bytes written. On any error the caller removes `dest`.
    """
    written = 0
    try:
        with tarfile.open(archive, "r:*") as tar:
            root_fd = os.open(dest, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0)) if _DIR_FD else -1
            try:
                for member in tar:
                    parts = _member_parts(member, archive)
                    if member.isdir():
                        if parts:
                            _close(_open_dirs(root_fd, dest, parts, archive, member))
                        continue
                    if not parts:
                        raise _refusal(archive, member, "has an empty name")
                    if max_bytes is not None and written + member.size > max_bytes:
                        raise _too_big(archive, max_bytes)
                    written = _write_member(
                        tar, member, root_fd, dest, parts, archive, written, max_bytes
                    )
            finally:
                _close(root_fd)
    except tarfile.ReadError as exc:
        raise _Corrupt(
            f"{archive.name} is not a readable tar archive ({exc}); the download may be "
            "truncated or the file is not a model release. Pull again with --force"
        ) from exc
    except (EOFError, zlib.error, _LzmaError) as exc:
        raise _Corrupt(f"{archive.name} could not be unpacked: {exc}") from exc
    except OSError as exc:
        if exc.errno is None:  # a decompressor's "invalid data", not the disk
            raise _Corrupt(f"{archive.name} could not be unpacked: {exc}") from exc
        if exc.errno in _DISK_FULL:  # `pull` says what to do about a full cache
            raise
        raise ModelError(f"{archive.name} could not be unpacked: {exc}") from exc
    except tarfile.TarError as exc:
        raise _Corrupt(f"{archive.name} was refused while unpacking: {exc}") from exc
    return written


def _refusal(archive: Path, member: tarfile.TarInfo, why: str) -> ModelError:
    return ModelError(
        f"refusing to unpack {archive.name}: member {member.name!r} {why}. A genuine model "
        "release never does this; the archive is damaged or malicious. Nothing was installed"
    )


def _too_big(archive: Path, max_bytes: int) -> _TooBig:
    return _TooBig(
        f"refusing to unpack {archive.name}: it unpacks to more than {_mb(max_bytes)}, the cap "
        "for this model; unpacking stopped and nothing was installed. If the archive is "
        "genuine, raise the cap with --max-unpacked-mb"
    )


def _member_parts(member: tarfile.TarInfo, archive: Path) -> tuple[str, ...]:
    """The member's path components, or a refusal for anything that is not a plain
    relative file or folder."""
    if member.issym() or member.islnk():
        kind = "a symbolic link" if member.issym() else "a hard link"
        raise _refusal(
            archive, member,
            f"is {kind} (to {member.linkname!r}); a model needs no links, and links outside "
            "the model folder are how archives escape it, so every link is refused",
        )
    if not (member.isfile() or member.isdir()):
        raise _refusal(archive, member, "is a device, FIFO or other special file")
    name = member.name
    pure = PurePosixPath(name)
    if pure.is_absolute() or re.match(r"^[A-Za-z]:", name) or "\\" in name:
        raise _refusal(archive, member, "has an absolute path")
    if ".." in pure.parts:
        raise _refusal(archive, member, "climbs out of the model folder with '..'")
    if "\x00" in name:
        raise _refusal(archive, member, "has a NUL in its name")
    return tuple(part for part in pure.parts if part not in ("", "."))


def _close(fd: int) -> None:
    if fd >= 0:
        os.close(fd)


def _open_dirs(root_fd: int, dest: Path, parts: tuple[str, ...], archive: Path,
               member: tarfile.TarInfo) -> int:
    """Create and open each folder component without following links (an fd, or -1)."""
    if not _DIR_FD:  # pragma: no cover - platforms without dir_fd: no links were made
        (dest.joinpath(*parts)).mkdir(parents=True, exist_ok=True)
        return -1
    fd = os.dup(root_fd)
    try:
        for part in parts:
            with contextlib.suppress(FileExistsError):
                os.mkdir(part, 0o755, dir_fd=fd)
            try:
                child = os.open(
                    part, os.O_RDONLY | os.O_DIRECTORY | _NOFOLLOW | _CLOEXEC, dir_fd=fd
                )
            except OSError as exc:
                raise _refusal(archive, member, f"needs {part!r} to be a folder ({exc.strerror})"
                               ) from exc
            os.close(fd)
            fd = child
        return fd
    except BaseException:
        os.close(fd)
        raise


def _write_member(
    tar: tarfile.TarFile, member: tarfile.TarInfo, root_fd: int, dest: Path,
    parts: tuple[str, ...], archive: Path, written: int, max_bytes: int | None,
) -> int:
    """Write one regular file's bytes, counting them against the cap."""
    parent_fd = _open_dirs(root_fd, dest, parts[:-1], archive, member) if parts[:-1] else (
        os.dup(root_fd) if root_fd >= 0 else -1
    )
    mode = 0o755 if member.mode & 0o111 else 0o644
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC | _BINARY
    try:
        try:
            if parent_fd >= 0:
                fd = os.open(parts[-1], flags, mode, dir_fd=parent_fd)
            else:  # pragma: no cover - platforms without dir_fd
                fd = os.open(dest.joinpath(*parts), flags, mode)
        except FileExistsError as exc:
            raise _refusal(archive, member, "appears twice in the archive") from exc
        except OSError as exc:
            if exc.errno in _DISK_FULL:
                raise  # the cache is full, the archive is fine
            raise _refusal(archive, member, f"cannot be created ({exc.strerror})") from exc
        source = tar.extractfile(member)
        with os.fdopen(fd, "wb") as handle:
            if source is None:
                return written
            while block := source.read(1 << 20):
                written += len(block)
                if max_bytes is not None and written > max_bytes:
                    raise _too_big(archive, max_bytes)
                handle.write(block)
        return written
    finally:
        _close(parent_fd)


def verify(name: str, cache: Path | None = None) -> VerifyReport:
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
