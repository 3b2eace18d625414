"""Trust in the model cache, kept: pinned first-download checksums, the check of a pulled
model's files before every use, the download cap, and a full or inode-less cache.

Every case runs `python -m streamasr.cli` in a fresh process against real files, a real HTTP
server on 127.0.0.1, and (for a full disk or no free inodes) a real tmpfs mounted in a private
user + mount namespace. Each ends with the expected exit code, one line on stderr for an
error, and nothing lost: a model installed before the failure still verifies.
"""

from __future__ import annotations

import hashlib
import http.server
import io
import json
import os
import shlex
import subprocess
import sys
import tarfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import require_tool
from test_store import TINY, ArchiveServer, cache_leftovers, server, tiny_archive
from test_store_security import streamasr

from streamasr.distribution import catalog
from streamasr.distribution.manifest import MANIFEST_NAME, read_manifest
from streamasr.distribution.pins import pin_path

__all__ = ["server", "tiny_archive"]  # fixtures shared with test_store

REPO = Path(__file__).resolve().parent.parent
CLIP = REPO / "models" / "tiny-en" / "test_wavs" / "0.wav"


def other_archive() -> bytes:
    """The same model with one more file: a release whose bytes changed."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:bz2", compresslevel=1) as tar:
        tar.add(TINY, arcname="tiny-random-transducer")
        note = b"re-exported\n"
        info = tarfile.TarInfo("tiny-random-transducer/NOTES.txt")
        info.size = len(note)
        tar.addfile(info, io.BytesIO(note))
    return buffer.getvalue()


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def error_line(result: subprocess.CompletedProcess[str]) -> str:
    """The one line an error leaves on stderr (and nothing else there)."""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ") and "Traceback" not in result.stderr
    return lines[0]


def pulled(home: Path, archive: bytes, tmp_path: Path, name: str = "tiny") -> Path:
    """Install `archive` under `name` through the CLI (a local file: no server needed)."""
    path = tmp_path / f"{name}-{sha(archive)[:8]}.tar.bz2"
    path.write_bytes(archive)
    result = streamasr(home, "models", "pull", name, "--archive", str(path))
    assert result.returncode == 0, result.stderr
    return Path(result.stdout.strip())


# --- pinned checksums ---------------------------------------------------------------------


def test_a_first_download_is_pinned_and_other_bytes_are_refused_until_accepted(
    server: ArchiveServer, tmp_path: Path, tiny_archive: bytes
) -> None:
    home = tmp_path / "cache"
    url = server.serve("/tiny.tar.bz2", tiny_archive)
    first = streamasr(home, "models", "pull", "tiny", "--url", url)
    assert first.returncode == 0, first.stderr
    assert f"recorded on first download: {sha(tiny_archive)}" in first.stderr
    pin = json.loads(pin_path(home, "tiny").read_text())
    assert pin["sha256"] == sha(tiny_archive) and pin["source"] == url

    changed = other_archive()
    server.serve("/tiny.tar.bz2", changed)  # the same address now serves other bytes
    refused = streamasr(home, "models", "pull", "tiny", "--url", url, "--force")
    assert refused.returncode == 1
    line = error_line(refused)
    assert sha(tiny_archive) in line and sha(changed) in line
    assert "--accept-new-checksum" in line and "installed copy, if any, is unchanged" in line
    assert streamasr(home, "models", "verify", "tiny").returncode == 0  # nothing lost
    assert cache_leftovers(home) == ["tiny"]  # the refused download is gone
    manifest = read_manifest(home / "tiny")
    assert manifest["archive_sha256"] == sha(tiny_archive)

    # the pin lives outside the model folder: removing the folder does not launder the change
    for path in sorted((home / "tiny").iterdir()):
        path.unlink()
    (home / "tiny").rmdir()
    again = streamasr(home, "models", "pull", "tiny", "--url", url)
    assert again.returncode == 1 and sha(tiny_archive) in error_line(again)
    assert cache_leftovers(home) == []

    accepted = streamasr(home, "models", "pull", "tiny", "--url", url, "--accept-new-checksum")
    assert accepted.returncode == 0, accepted.stderr
    assert f"pinned now, replacing {sha(tiny_archive)}" in accepted.stderr
    assert json.loads(pin_path(home, "tiny").read_text())["sha256"] == sha(changed)
    same = streamasr(home, "models", "pull", "tiny", "--url", url, "--force")
    assert same.returncode == 0, same.stderr
    assert "matches the sha256 pinned at the first download" in same.stderr
    verified = streamasr(home, "models", "verify", "tiny")
    assert verified.returncode == 0 and "pinned at the first download" in verified.stderr


def test_a_published_checksum_cannot_be_accepted_away(tmp_path: Path,
                                                      tiny_archive: bytes) -> None:
    archive = tmp_path / "a.tar.bz2"
    archive.write_bytes(tiny_archive)
    result = streamasr(tmp_path / "cache", "models", "pull", "en-20M", "--archive",
                       str(archive), "--accept-new-checksum")
    assert result.returncode == 2
    assert "--sha256" in error_line(result)


def test_an_install_from_before_pins_is_pinned_by_its_manifest(
    tmp_path: Path, tiny_archive: bytes
) -> None:
    """A cache written by the previous version: no pin file, manifests without mtimes."""
    home = tmp_path / "cache"
    directory = pulled(home, tiny_archive, tmp_path)
    pin_path(home, "tiny").unlink()
    manifest = json.loads((directory / MANIFEST_NAME).read_text())
    for info in manifest["files"].values():
        del info["mtime_ns"]
    (directory / MANIFEST_NAME).write_text(json.dumps(manifest))

    changed = tmp_path / "changed.tar.bz2"
    changed.write_bytes(other_archive())
    refused = streamasr(home, "models", "pull", "tiny", "--archive", str(changed), "--force")
    assert refused.returncode == 1
    assert sha(tiny_archive) in error_line(refused) and str(changed) in refused.stderr

    # the old manifest is hashed once on first use, then records sizes and mtimes
    used = streamasr(home, "file", str(CLIP), "--model", "tiny", "--format", "jsonl")
    assert used.returncode == 0, used.stderr
    upgraded = read_manifest(directory)["files"]
    assert all(  # type: ignore[union-attr]
        info["mtime_ns"] == (directory / rel).stat().st_mtime_ns
        for rel, info in upgraded.items()  # type: ignore[union-attr]
    )


# --- the check before use -----------------------------------------------------------------


def _edit_same_size(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


EDITS = {
    "same-size": _edit_same_size,
    "other-size": lambda path: path.write_bytes(path.read_bytes() + b"\0"),
    "removed": lambda path: path.unlink(),
}


@pytest.mark.parametrize("edit", sorted(EDITS))
def test_an_edited_cached_file_is_refused_before_use(
    tmp_path: Path, tiny_archive: bytes, edit: str
) -> None:
    home = tmp_path / "cache"
    directory = pulled(home, tiny_archive, tmp_path)
    encoder = directory / "encoder-epoch-0-avg-1-chunk-16-left-64.onnx"
    time.sleep(0.01)  # a new mtime even on coarse clocks
    EDITS[edit](encoder)
    by_path = (str(directory),) if edit == "same-size" else ()
    for model in ("tiny", *by_path):  # by name, and by the folder's path
        result = streamasr(home, "file", str(CLIP), "--model", model)
        assert result.returncode == 1 and result.stdout == ""
        line = error_line(result)
        assert encoder.name in line
        assert "`streamasr models verify tiny`" in line
        assert "`streamasr models pull tiny --force`" in line
    latency = streamasr(home, "latency", "--model", "tiny")  # reads the files' metadata
    assert latency.returncode == 1 and encoder.name in error_line(latency)
    repaired = streamasr(home, "models", "pull", "tiny", "--archive",
                         str(tmp_path / f"tiny-{sha(tiny_archive)[:8]}.tar.bz2"), "--force")
    assert repaired.returncode == 0, repaired.stderr
    assert streamasr(home, "file", str(CLIP), "--model", "tiny").returncode == 0


def test_an_added_onnx_file_is_refused_before_use(tmp_path: Path, tiny_archive: bytes) -> None:
    """An ONNX file the manifest does not list would be picked up by the loader unchecked."""
    home = tmp_path / "cache"
    directory = pulled(home, tiny_archive, tmp_path)
    (directory / "encoder-epoch-9-avg-1-chunk-16-left-128.onnx").write_bytes(b"x")
    result = streamasr(home, "file", str(CLIP), "--model", "tiny")
    assert result.returncode == 1 and "is not in the manifest" in error_line(result)


def test_a_touched_but_unchanged_file_is_hashed_once_and_recorded(
    tmp_path: Path, tiny_archive: bytes
) -> None:
    home = tmp_path / "cache"
    directory = pulled(home, tiny_archive, tmp_path)
    tokens = directory / "tokens.txt"
    os.utime(tokens, ns=(tokens.stat().st_atime_ns, tokens.stat().st_mtime_ns + 10**9))
    result = streamasr(home, "file", str(CLIP), "--model", "tiny", "--format", "jsonl")
    assert result.returncode == 0, result.stderr
    recorded = read_manifest(directory)["files"]["tokens.txt"]  # type: ignore[index]
    assert recorded["mtime_ns"] == tokens.stat().st_mtime_ns


def test_verify_catches_an_edit_that_kept_size_and_mtime(
    tmp_path: Path, tiny_archive: bytes
) -> None:
    home = tmp_path / "cache"
    directory = pulled(home, tiny_archive, tmp_path)
    joiner = directory / "joiner-epoch-0-avg-1-chunk-16-left-64.onnx"
    before = joiner.stat()
    _edit_same_size(joiner)
    os.utime(joiner, ns=(before.st_atime_ns, before.st_mtime_ns))
    cheap = streamasr(home, "file", str(CLIP), "--model", "tiny", "--format", "jsonl")
    assert cheap.returncode == 0, cheap.stderr  # size and mtime cannot see this edit
    full = streamasr(home, "file", str(CLIP), "--model", "tiny", "--verify")
    assert full.returncode == 1 and full.stdout == ""
    line = error_line(full)
    assert joiner.name in line and "other content" in line
    assert "`streamasr models verify tiny`" in line and "pull tiny --force" in line
    dataset = tmp_path / "one.jsonl"
    dataset.write_text(json.dumps({"audio": str(CLIP), "text": "x"}) + "\n")
    bench = streamasr(home, "bench", str(dataset), "--model", "tiny", "--verify",
                      "--out", str(tmp_path / "bench"))
    assert bench.returncode == 1 and joiner.name in error_line(bench)
    assert not (tmp_path / "bench").exists()  # refused before anything ran


def test_verify_on_an_intact_model_runs_it(tmp_path: Path, tiny_archive: bytes) -> None:
    home = tmp_path / "cache"
    pulled(home, tiny_archive, tmp_path)
    result = streamasr(home, "file", str(CLIP), "--model", "tiny", "--verify", "--format",
                       "jsonl")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.splitlines()[-1])["type"] == "summary"


# --- the download cap ---------------------------------------------------------------------


class _Forever(http.server.BaseHTTPRequestHandler):
    """Streams zeros with no Content-Length until the client hangs up."""

    protocol_version = "HTTP/1.0"
    announce: int | None = None  # a Content-Length to claim instead

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
        self.send_response(200)
        if self.announce is not None:
            self.send_header("Content-Length", str(self.announce))
        self.end_headers()
        block = b"\0" * (1 << 16)
        try:
            while True:
                self.wfile.write(block)
        except OSError:
            pass


@pytest.fixture()
def forever() -> Iterator[str]:
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Forever)
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_a_server_streaming_forever_stops_at_the_cap(forever: str, tmp_path: Path) -> None:
    home = tmp_path / "cache"
    start = time.monotonic()
    result = streamasr(home, "models", "pull", "endless", "--url", f"{forever}/e.tar.bz2",
                       "--max-download-mb", "3")
    assert result.returncode == 1
    line = error_line(result)
    assert "larger than 3.0 MB" in line and "--max-download-mb" in line
    assert cache_leftovers(home) == []  # the .part file is gone
    # a catalog model stops at twice its catalog size without being told
    entry = min((e for e in catalog.CATALOG if e.file_name is None), key=lambda e: e.size_mb)
    capped = streamasr(home, "models", "pull", entry.name, "--url", f"{forever}/c.tar.bz2")
    assert capped.returncode == 1
    line = error_line(capped)
    assert f"larger than {2 * entry.size_mb:.1f} MB" in line and "--max-download-mb" in line
    assert cache_leftovers(home) == []
    assert time.monotonic() - start < 60


def test_an_announced_size_over_the_cap_is_refused_before_a_byte_is_written(
    forever: str, tmp_path: Path
) -> None:
    _Forever.announce = 50 << 20
    try:
        result = streamasr(tmp_path / "cache", "models", "pull", "big", "--url",
                           f"{forever}/b.tar.bz2", "--max-download-mb", "10")
    finally:
        _Forever.announce = None
    assert result.returncode == 1
    assert "the server announces 50.0 MB" in error_line(result)
    assert cache_leftovers(tmp_path / "cache") == []


# --- a full cache, a cache without free inodes --------------------------------------------


def in_tmpfs(mount: Path, options: str, script: str, timeout: float = 240
             ) -> subprocess.CompletedProcess[str]:
    """Run `script` (sh) where `mount` is a fresh tmpfs, in a private user + mount namespace
    (as tests/test_bench_hardening.py does): a full disk for real, without touching the host."""
    require_tool("unshare")
    mount.mkdir()
    return subprocess.run(
        ["unshare", "-rm", "sh", "-c",
         f"mount -t tmpfs -o {options} tmpfs {shlex.quote(str(mount))} && {script}"],
        capture_output=True, text=True, cwd=REPO, timeout=timeout,
        env={**os.environ, "PYTHONPATH": str(REPO), "STREAMASR_HOME": str(mount / "cache")},
    )


def _cli(out: Path, label: str, *args: str) -> str:
    """A shell line running the CLI, its stdout, stderr and exit code kept in `out`."""
    command = shlex.join([sys.executable, "-m", "streamasr.cli", *args])
    base = shlex.quote(str(out / label))
    return f"{command} >{base}.out 2>{base}.err; echo $? >{base}.rc"


def _read(out: Path, label: str) -> subprocess.CompletedProcess[str]:
    return subprocess.CompletedProcess(
        [label], int((out / f"{label}.rc").read_text()), (out / f"{label}.out").read_text(),
        (out / f"{label}.err").read_text(),
    )


def test_no_free_inodes_in_the_cache_is_one_line(tmp_path: Path, tiny_archive: bytes) -> None:
    mount, out = tmp_path / "mnt", tmp_path / "out"
    out.mkdir()
    archive = tmp_path / "a.tar.bz2"
    archive.write_bytes(tiny_archive)
    fill = f"i=0; while touch {shlex.quote(str(mount))}/cache/f$i 2>/dev/null; do i=$((i+1)); done"
    script = " && ".join([
        _cli(out, "first", "models", "pull", "tiny", "--archive", str(archive)),
        fill,
        _cli(out, "second", "models", "pull", "other", "--archive", str(archive)),
        _cli(out, "force", "models", "pull", "tiny", "--archive", str(archive), "--force"),
        _cli(out, "use", "file", str(CLIP), "--model", "tiny", "--format", "jsonl"),
        _cli(out, "verify", "models", "verify", "tiny"),
    ])
    done = in_tmpfs(mount, "size=64m,nr_inodes=40", script)
    assert done.returncode == 0, done.stderr
    assert _read(out, "first").returncode == 0, _read(out, "first").stderr
    for label in ("second", "force"):
        result = _read(out, label)
        assert result.returncode == 1, result.stderr
        line = error_line(result)
        assert "No space left on device" in line and "df -i" in line, line
        assert "STREAMASR_HOME" in line
    assert _read(out, "use").returncode == 0, _read(out, "use").stderr  # nothing lost
    assert _read(out, "verify").returncode == 0, _read(out, "verify").stdout


def test_a_disk_that_fills_during_a_download_is_one_line(forever: str,
                                                         tmp_path: Path) -> None:
    """No size announced: the disk fills mid-download. The .part is deleted, not retried."""
    mount, out = tmp_path / "mnt", tmp_path / "out"
    out.mkdir()
    cache = mount / "cache"
    script = " && ".join([
        _cli(out, "stream", "models", "pull", "endless", "--url", f"{forever}/e.tar.bz2",
             "--max-download-mb", "100"),
        f"ls -A {shlex.quote(str(cache))} > {shlex.quote(str(out / 'left'))}",
    ])
    done = in_tmpfs(mount, "size=4m", script)
    assert done.returncode == 0, done.stderr
    result = _read(out, "stream")
    assert result.returncode == 1
    line = error_line(result)
    assert "No space left on device" in line and "partial download was deleted" in line
    assert (out / "left").read_text().split() == [".locks"]
