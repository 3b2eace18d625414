"""Safe unpacking of a model archive: only plain files and folders, never outside the target.

Unpacking trusts neither `tarfile.extract` nor `Path.resolve()`: a model needs no links, so
any link, device or FIFO refuses the whole archive, and every file is written by this module
with O_NOFOLLOW | O_EXCL under directories it opened itself, counting the bytes against a cap
so that a size bomb stops as soon as it passes it.
"""

from __future__ import annotations

import contextlib
import os
import re
import tarfile
import zlib
from pathlib import Path, PurePosixPath

from streamasr.distribution.download import DISK_FULL, mb
from streamasr.errors import ModelError

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


class CorruptArchive(ModelError):
    """The bytes are not what was expected: a checksum mismatch or an unreadable archive."""


class ArchiveTooBig(ModelError):
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
        raise CorruptArchive(
            f"{archive.name} is not a readable tar archive ({exc}); the download may be "
            "truncated or the file is not a model release. Pull again with --force"
        ) from exc
    except (EOFError, zlib.error, _LzmaError) as exc:
        raise CorruptArchive(f"{archive.name} could not be unpacked: {exc}") from exc
    except OSError as exc:
        if exc.errno is None:  # a decompressor's "invalid data", not the disk
            raise CorruptArchive(f"{archive.name} could not be unpacked: {exc}") from exc
        if exc.errno in DISK_FULL:  # `pull` says what to do about a full cache
            raise
        raise ModelError(f"{archive.name} could not be unpacked: {exc}") from exc
    except tarfile.TarError as exc:
        raise CorruptArchive(f"{archive.name} was refused while unpacking: {exc}") from exc
    return written


def _refusal(archive: Path, member: tarfile.TarInfo, why: str) -> ModelError:
    return ModelError(
        f"refusing to unpack {archive.name}: member {member.name!r} {why}. A genuine model "
        "release never does this; the archive is damaged or malicious. Nothing was installed"
    )


def _too_big(archive: Path, max_bytes: int) -> ArchiveTooBig:
    return ArchiveTooBig(
        f"refusing to unpack {archive.name}: it unpacks to more than {mb(max_bytes)}, the cap "
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
            if exc.errno in DISK_FULL:
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

