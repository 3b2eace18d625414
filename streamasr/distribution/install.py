"""`models pull`: get a model's bytes, hold them to a checksum, and install them atomically.

Model downloads break, and a tool that unpacks straight into its cache leaves half a model
there when they do. Here an archive is downloaded to `<cache>/<name>.tar.bz2.part` (resumed
with an HTTP Range request after a dropped connection or a stall: `distribution.download`),
checked against the sha256 the catalog or the user gives, unpacked into a fresh temporary
folder inside the cache (`distribution.extract`), and only then renamed into place. The
sha256, size and mtime of every extracted file go into the model's manifest
(`distribution.manifest`), which `verify` and every use check later. A single-file model (a
NeMo `.nemo`) takes the same path without the unpacking.

The caps are decided here: a download stops at twice the catalog's size (or
--max-download-mb), an archive unpacks to at most three times it (or --max-unpacked-mb). An
archive with no published checksum is pinned on first download (`distribution.pins`): a
later pull with other bytes is refused unless --accept-new-checksum.

Nothing here prints: progress goes to an injected callback, details to the "streamasr" logger.
"""

from __future__ import annotations

import logging
import math
import os
import re
import shutil
import tarfile
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath
from urllib.parse import urlparse

from streamasr.distribution.cache import (
    NAME_RE,
    NEMO_SUFFIX,
    cache_dir,
    is_model_folder,
    is_punctuation_folder,
    lock_model,
    remove_stale_temps,
)
from streamasr.distribution.catalog import find, lookup
from streamasr.distribution.download import (
    DEFAULT_RETRIES,
    DEFAULT_TIMEOUT_S,
    MIN_WINDOW_BYTES,
    ProgressFn,
    cache_failure,
    download,
    mb,
)
from streamasr.distribution.extract import CorruptArchive, safe_extract
from streamasr.distribution.hooks import NO_HOOKS, InstallHooks
from streamasr.distribution.manifest import MANIFEST_FORMAT, hash_tree, sha256_file, write_manifest
from streamasr.distribution.pins import Pin, pin_mismatch, read_pin, write_pin
from streamasr.errors import ModelError, UsageError
from streamasr.version import __version__

log = logging.getLogger("streamasr")

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

#: stage("unpacking"), called when a pull moves on to a step without byte progress.
StageFn = Callable[[str], None]


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
        if not NAME_RE.match(name):
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
    return source_name if NAME_RE.match(source_name) else "model.nemo"


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
    hooks: InstallHooks = NO_HOOKS,
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
            hooks=hooks,
        )
    except OSError as exc:  # the cache itself failed us: full, out of inodes, read-only
        raise ModelError(cache_failure(root, exc)) from exc


def _pull_into(
    target: PullTarget, root: Path, name: str, *, archive: Path | None, force: bool,
    progress: ProgressFn | None, stage: StageFn | None, retries: int, timeout_s: float,
    retry_wait_s: float, max_unpacked_mb: float | None, min_window_bytes: int,
    max_download_mb: float | None, accept_new_checksum: bool, hooks: InstallHooks,
) -> PullResult:
    """`pull` once the target and the cache are settled: under the model's lock."""
    final = root / target.name
    say = stage or (lambda _text: None)
    with lock_model(root, target.name):
        remove_stale_temps(root, target.name)
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
                    move_source=archive is None, hooks=hooks,
                )
            except CorruptArchive as exc:
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
    hooks.prepare_folder(directory)  # optimised graphs now, so the first load is a quick one
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
        raise CorruptArchive(str(pin_mismatch(pin, actual, source_label or str(path), what)))
    raise CorruptArchive(
        f"archive sha256 {actual} does not match {target.expected_sha256} from {where}: the file "
        f"is corrupt, truncated, or not the released archive. {what}. Pull again, or from "
        "another mirror with --url"
    )


def _install(
    source: Path, root: Path, final: Path, target: PullTarget, force: bool,
    manifest: dict[str, object], cap_bytes: int, move_source: bool, hooks: InstallHooks,
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
            _place_single_file(source, temp / target.file_name, cap_bytes, move_source,
                               hooks.check_file)
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


def _place_single_file(source: Path, dest: Path, cap_bytes: int, move: bool,
                       check_file: Callable[[Path], None]) -> None:
    """Put a `.nemo` into the temporary folder: moved if downloaded, copied if the user's."""
    size = source.stat().st_size
    if size > cap_bytes:
        raise ModelError(
            f"{source.name} is {mb(size)}, more than the {mb(cap_bytes)} a model may take "
            "here. If it is genuine, raise the cap with --max-unpacked-mb"
        )
    if not _is_nemo_file(source):
        raise CorruptArchive(
            f"{source.name} is not a NeMo model (a .nemo is a tar archive holding "
            "model_config.yaml); the download may be damaged or the address wrong"
        )
    # what NeMo would run or read on load is refused now, before it enters the cache
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

