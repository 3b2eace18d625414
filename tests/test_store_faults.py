"""Faults a model pull meets in the field, against a real HTTP server on 127.0.0.1: a
trickling server, a damaged `.part` in the cache, a damaged manifest, and single-file `.nemo`
models (checksummed, resumable, never half installed)."""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
import time
from pathlib import Path

import pytest
from test_store import ArchiveServer, cache, cache_leftovers, fast, server, tiny_archive
from test_store_security import streamasr
from warm_nemo import WarmNemo

from streamasr.distribution import catalog
from streamasr.distribution.cache import find_cached, installed_models, verify_installed
from streamasr.distribution.install import PART_SUFFIX, pull
from streamasr.distribution.manifest import MANIFEST_NAME, read_manifest
from streamasr.errors import ModelError

__all__ = ["cache", "server", "tiny_archive"]  # fixtures shared with test_store


# --- a trickle is a stall -------------------------------------------------------------------


def test_a_trickling_server_is_a_stall(server: ArchiveServer, cache: Path,
                                       tiny_archive: bytes) -> None:
    """One byte every 0.1 s never trips a socket timeout; too few bytes per window does."""
    url = server.serve("/tiny.tar.bz2", tiny_archive)
    server.state.trickle_s = 0.1
    start = time.monotonic()
    with pytest.raises(ModelError, match=r"failed after 2 attempt\(s\): stalled: \d+ bytes"):
        pull("tiny", url=url, timeout_s=0.6, retries=1, min_window_bytes=1024, **fast())
    assert time.monotonic() - start < 10  # two windows and a little, not the whole file
    assert len(server.state.requests) == 2
    assert server.state.requests[1][1] is not None  # the retry asked for the rest (Range)
    part = cache / f"tiny{PART_SUFFIX}"
    assert 0 < part.stat().st_size < 100  # what trickled in is kept for the next pull
    assert not (cache / "tiny").exists()


def test_a_trickle_through_the_cli_ends_with_a_clear_error(
    server: ArchiveServer, tmp_path: Path, tiny_archive: bytes
) -> None:
    url = server.serve("/tiny.tar.bz2", tiny_archive)
    server.state.trickle_s = 0.2
    result = streamasr(tmp_path / "cache", "models", "pull", "tiny", "--url", url,
                       "--timeout", "0.5")
    assert result.returncode == 1
    assert "stalled" in result.stderr and "run the same pull again" in result.stderr
    assert "Traceback" not in result.stderr


# --- a damaged .part ------------------------------------------------------------------------


def _garbage_part(cache: Path, size: int = 5000) -> Path:
    cache.mkdir(exist_ok=True)
    part = cache / f"tiny{PART_SUFFIX}"
    part.write_bytes(os.urandom(size))
    return part


def test_a_resumed_download_failing_its_checksum_restarts_from_zero_once(
    server: ArchiveServer, cache: Path, tiny_archive: bytes
) -> None:
    url = server.serve("/tiny.tar.bz2", tiny_archive)
    _garbage_part(cache)
    digest = hashlib.sha256(tiny_archive).hexdigest()
    stages: list[str] = []
    result = pull("tiny", url=url, sha256=digest, stage=stages.append, **fast())
    assert server.state.requests == [("/tiny.tar.bz2", "bytes=5000-"), ("/tiny.tar.bz2", None)]
    assert "restarting from zero" in stages
    assert result.archive_sha256 == digest and verify_installed("tiny").ok
    assert cache_leftovers(cache) == ["tiny"]


def test_a_resumed_download_that_does_not_unpack_restarts_from_zero_once(
    server: ArchiveServer, cache: Path, tiny_archive: bytes
) -> None:
    """No checksum to compare with (a custom model): an unreadable archive tells instead."""
    url = server.serve("/tiny.tar.bz2", tiny_archive)
    _garbage_part(cache)
    result = pull("tiny", url=url, **fast())
    assert [r for _, r in server.state.requests] == ["bytes=5000-", None]
    assert result.archive_sha256 == hashlib.sha256(tiny_archive).hexdigest()
    assert verify_installed("tiny").ok


def test_a_restart_happens_once_and_then_the_error_stands(
    server: ArchiveServer, cache: Path, tiny_archive: bytes
) -> None:
    url = server.serve("/tiny.tar.bz2", tiny_archive)
    _garbage_part(cache)
    with pytest.raises(ModelError, match="does not match"):
        pull("tiny", url=url, sha256="0" * 64, **fast())
    assert len(server.state.requests) == 2
    assert cache_leftovers(cache) == []  # no .part left to poison the next pull


def test_force_discards_the_part_file(server: ArchiveServer, tmp_path: Path,
                                      tiny_archive: bytes) -> None:
    home = tmp_path / "cache"
    url = server.serve("/tiny.tar.bz2", tiny_archive)
    _garbage_part(home)
    result = streamasr(home, "models", "pull", "tiny", "--url", url, "--force")
    assert result.returncode == 0, result.stderr
    assert server.state.requests == [("/tiny.tar.bz2", None)]  # no Range: started over
    assert "resumed" not in result.stderr
    assert cache_leftovers(home) == ["tiny"]


# --- a damaged manifest ---------------------------------------------------------------------

DAMAGE = {
    "files-a-list": lambda m: {**m, "files": list(m["files"])},
    "entry-a-string": lambda m: {**m, "files": {k: "x" for k in m["files"]}},
    "bytes-a-string": lambda m: {
        **m, "files": {k: {**v, "bytes": "12"} for k, v in m["files"].items()}},
    "sha256-a-number": lambda m: {
        **m, "files": {k: {**v, "sha256": 5} for k, v in m["files"].items()}},
    "archive-sha-a-list": lambda m: {**m, "archive_sha256": [1, 2]},
    "not-an-object": lambda m: [m],
    "escaping-name": lambda m: {
        **m, "files": {"../../etc/passwd": next(iter(m["files"].values()))}},
}


@pytest.mark.parametrize("label", sorted(DAMAGE))
def test_a_damaged_manifest_says_so_and_how_to_repull(
    tmp_path: Path, tiny_archive: bytes, label: str
) -> None:
    home = tmp_path / "cache"
    archive = tmp_path / "a.tar.bz2"
    archive.write_bytes(tiny_archive)
    directory = pull("tiny", archive=archive, cache=home).directory
    manifest_path = directory / MANIFEST_NAME
    manifest = json.loads(manifest_path.read_text())
    manifest_path.write_text(json.dumps(DAMAGE[label](manifest)))
    result = streamasr(home, "models", "verify", "tiny")
    assert result.returncode == 1
    assert "manifest" in result.stderr and "is damaged" in result.stderr
    assert "streamasr models pull tiny --force" in result.stderr
    assert "Traceback" not in result.stderr
    if label != "bytes-a-string":
        return
    repaired = streamasr(home, "models", "pull", "tiny", "--archive", str(archive), "--force")
    assert repaired.returncode == 0, repaired.stderr
    assert streamasr(home, "models", "verify", "tiny").returncode == 0


# --- single-file .nemo models ---------------------------------------------------------------


def nemo_file(seed: int = 0) -> bytes:
    """A `.nemo`-shaped file: a tar archive with model_config.yaml and a weights file. The
    store never loads it; it installs the bytes, so the shape is what matters here."""
    weights = hashlib.sha256(str(seed).encode()).digest() * 8192  # 256 KiB
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data in (("model_config.yaml", b"target: tiny\n"),
                           ("model_weights.ckpt", weights)):
            info = tarfile.TarInfo(f"./{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


@pytest.fixture(scope="module")
def nemo_bytes() -> bytes:
    return nemo_file()


def test_a_nemo_file_installs_as_one_checksummed_file(
    server: ArchiveServer, cache: Path, nemo_bytes: bytes
) -> None:
    url = server.serve("/models/tiny-stream.nemo", nemo_bytes)
    digest = hashlib.sha256(nemo_bytes).hexdigest()
    result = pull("tiny-nemo", url=url, sha256=digest, **fast())
    assert result.directory == cache / "tiny-nemo" and result.files == 1
    assert (result.directory / "tiny-stream.nemo").read_bytes() == nemo_bytes
    manifest = read_manifest(result.directory)
    installed = result.directory / "tiny-stream.nemo"
    assert manifest["files"] == {"tiny-stream.nemo": {
        "sha256": digest, "bytes": len(nemo_bytes), "mtime_ns": installed.stat().st_mtime_ns}}
    assert verify_installed("tiny-nemo").ok
    assert find_cached("tiny-nemo") == result.directory
    assert [m.name for m in installed_models(cache)] == ["tiny-nemo"]
    assert cache_leftovers(cache) == ["tiny-nemo"]  # no .part, no temporary folder
    again = pull("tiny-nemo", url=url, **fast())
    assert again.already_installed and len(server.state.requests) == 1


def test_a_catalog_nemo_model_resumes_and_installs_under_its_name(
    server: ArchiveServer, cache: Path, nemo_bytes: bytes
) -> None:
    entry = catalog.lookup("parakeet-eou-120m")
    assert entry.single_file and entry.engine == "nemo"
    url = server.serve(f"/{entry.file_name}", nemo_bytes)
    cut = len(nemo_bytes) // 3
    server.state.drop_after, server.state.drops_left = cut, 1
    result = pull("parakeet-eou-120m", url=url, **fast())
    assert server.state.requests[1] == (f"/{entry.file_name}", f"bytes={cut}-")
    assert result.directory == cache / entry.name
    assert (result.directory / entry.file_name).read_bytes() == nemo_bytes
    assert result.checksum_source is None  # not published: recorded on first download
    assert verify_installed("parakeet-eou-120m").ok


def test_an_interrupted_nemo_download_is_never_half_installed(
    server: ArchiveServer, cache: Path, nemo_bytes: bytes
) -> None:
    url = server.serve("/x.nemo", nemo_bytes)
    server.state.drop_after, server.state.drops_left = 10_000, 1
    with pytest.raises(ModelError, match="run the same pull again to resume"):
        pull("tiny-nemo", url=url, retries=0, **fast())
    assert find_cached("tiny-nemo") is None and not (cache / "tiny-nemo").exists()
    assert (cache / "tiny-nemo.nemo.part").stat().st_size == 10_000
    result = pull("tiny-nemo", url=url, retries=0, **fast())
    assert result.resumed_from_bytes == 10_000
    assert (result.directory / "x.nemo").read_bytes() == nemo_bytes


def test_a_nemo_with_the_wrong_checksum_or_shape_is_refused(
    server: ArchiveServer, cache: Path, nemo_bytes: bytes
) -> None:
    url = server.serve("/x.nemo", nemo_bytes)
    with pytest.raises(ModelError, match="does not match"):
        pull("tiny-nemo", url=url, sha256="1" * 64, **fast())
    assert cache_leftovers(cache) == []
    junk = server.serve("/junk.nemo", os.urandom(50_000))
    with pytest.raises(ModelError, match="is not a NeMo model"):
        pull("junk-nemo", url=junk, **fast())
    assert cache_leftovers(cache) == []


def test_a_nemo_over_the_cap_is_stopped_while_downloading(
    server: ArchiveServer, cache: Path, nemo_bytes: bytes
) -> None:
    url = server.serve("/x.nemo", nemo_bytes)
    with pytest.raises(ModelError, match="larger than 0.1 MB"):
        pull("tiny-nemo", url=url, max_unpacked_mb=0.1, **fast())
    assert cache_leftovers(cache) == []


def test_a_local_nemo_installs_through_the_cli_and_stays_where_it_was(
    tmp_path: Path, nemo_bytes: bytes
) -> None:
    home = tmp_path / "cache"
    local = tmp_path / "mine.nemo"
    local.write_bytes(nemo_bytes)
    result = streamasr(home, "models", "pull", "mine", "--archive", str(local))
    assert result.returncode == 0, result.stderr
    assert (Path(result.stdout.strip()) / "mine.nemo").read_bytes() == nemo_bytes
    assert local.read_bytes() == nemo_bytes  # copied, never moved
    listed = json.loads(streamasr(home, "models", "list", "-f", "json").stdout)
    assert {row["name"]: row["installed"] for row in listed["models"]}["mine"] == "yes"
    assert streamasr(home, "models", "verify", "mine").returncode == 0


def test_a_pulled_nemo_model_runs_by_its_name(
    server: ArchiveServer, cache: Path, warm_nemo: WarmNemo
) -> None:
    """The real tiny NeMo model, pulled under a name of its own, is found by that name and
    run by the NeMo backend without --backend: the store and the registry agree. The run
    that loads it is forked from the process that imported torch and NeMo once
    (tests/warm_nemo.py), with the same cache; the refusal keeps a fresh interpreter."""
    model = Path(__file__).resolve().parent.parent / "models" / "tiny-nemo-streaming"
    data = (model / "tiny-nemo-streaming.nemo").read_bytes()
    url = server.serve("/tiny-nemo-streaming.nemo", data)
    pull("my-nemo", url=url, sha256=hashlib.sha256(data).hexdigest(), **fast())
    clip = Path(__file__).resolve().parent.parent / "models" / "tiny-en" / "test_wavs" / "4.wav"
    done = warm_nemo.cli("file", str(clip), "--model", "my-nemo", "--device", "cpu",
                         "--att-context-size", "70,1", "--format", "jsonl",
                         env={"STREAMASR_HOME": str(cache)}, timeout=300)
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in done.stdout.splitlines()]
    finals = [r for r in records if r["type"] == "final"]
    assert finals and all(r["text"] for r in finals)
    times = [t for r in finals for t in r["token_times_s"]]
    assert times and all(abs(t / 0.08 - round(t / 0.08)) < 1e-6 for t in times)  # 80 ms frames
    missing = streamasr(cache, "file", str(clip), "--model", "parakeet-eou-120m")
    assert missing.returncode == 1
    assert "streamasr models pull parakeet-eou-120m" in missing.stderr
