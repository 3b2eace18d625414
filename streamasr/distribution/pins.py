"""Trust on first use: the archive sha256 of a model whose checksum nobody publishes.

That sha256 is pinned in `<cache>/.pins/<name>.json`, outside the model folder, so that a
`pull --force` (which replaces the folder) or a removed folder cannot launder a changed
archive: a later pull whose bytes differ is refused unless `--accept-new-checksum` says the
change is expected. A model installed before pins existed is pinned from its manifest.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from streamasr.distribution.manifest import MANIFEST_NAME, SHA256_RE, is_count, read_manifest
from streamasr.errors import ModelError

log = logging.getLogger("streamasr")

PIN_DIR = ".pins"


@dataclass(frozen=True)
class Pin:
    """The archive sha256 a model was first installed with, when nobody published one."""

    name: str
    sha256: str
    archive_bytes: int | None
    source: str  # where those bytes came from (URL or file)
    pinned_at: str
    where: str  # the pin file, or the manifest it was read from


def pin_path(root: Path, name: str) -> Path:
    return root / PIN_DIR / f"{name}.json"


def read_pin(root: Path, name: str) -> Pin | None:
    """The pin of `name`: its pin file, else the manifest of an install that predates pins."""
    path = pin_path(root, name)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return _pin_from_manifest(root / name)
    except (OSError, ValueError) as exc:
        raise ModelError(
            f"the checksum pin {path} is unreadable ({exc}); delete it to trust the next "
            "download of this model afresh"
        ) from exc
    sha, size = data.get("sha256") if isinstance(data, dict) else None, None
    if isinstance(data, dict) and is_count(data.get("archive_bytes")):
        size = data["archive_bytes"]
    if not isinstance(sha, str) or not SHA256_RE.fullmatch(sha):
        raise ModelError(
            f"the checksum pin {path} is damaged (no sha256); delete it to trust the next "
            "download of this model afresh"
        )
    return Pin(name, sha, size, str(data.get("source", "?")), str(data.get("pinned_at", "?")),
               str(path))


def _pin_from_manifest(directory: Path) -> Pin | None:
    """An install from before pins: its manifest recorded the first download's sha256."""
    if not (directory / MANIFEST_NAME).is_file():
        return None
    with contextlib.suppress(ModelError):
        manifest = read_manifest(directory)
        sha = manifest.get("archive_sha256")
        if manifest.get("archive_checksum", "recorded") in ("recorded", "pinned") and (
            isinstance(sha, str) and SHA256_RE.fullmatch(sha)
        ):
            size = manifest.get("archive_bytes")
            return Pin(directory.name, sha, size if is_count(size) else None,  # type: ignore[arg-type]
                       str(manifest.get("source", "?")), str(manifest.get("installed_at", "?")),
                       str(directory / MANIFEST_NAME))
    return None


def write_pin(root: Path, name: str, sha256: str, archive_bytes: int, source: str) -> None:
    """Pin `sha256` for `name` (atomically). A failure is logged: the model's manifest keeps
    the same sum, and `read_pin` falls back to it."""
    path = pin_path(root, name)
    data = {
        "name": name, "sha256": sha256, "archive_bytes": archive_bytes, "source": source,
        "pinned_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(exist_ok=True)
        temp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        temp.replace(path)
    except OSError as exc:
        log.warning("could not write the checksum pin %s (%s); the manifest keeps the sum",
                    path, exc.strerror or exc)
    finally:
        with contextlib.suppress(OSError):
            temp.unlink(missing_ok=True)


def pin_mismatch(pin: Pin, actual: str, source: str, what: str) -> ModelError:
    """The refusal of an archive that differs from the pinned first download."""
    return ModelError(
        f"the archive of {pin.name} from {source} has sha256 {actual}, but the first download "
        f"(pinned {pin.pinned_at} in {pin.where}) had {pin.sha256}: the release was replaced, "
        f"or this source serves other bytes. {what}; the installed copy, if any, is "
        "unchanged. If the change is expected, run the same pull with --accept-new-checksum"
    )
