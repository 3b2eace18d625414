"""The model store against a real HTTP server on 127.0.0.1: pull, resume, checksums, safety.

The archives are real tar.bz2 files of the bundled tiny transducer, laid out like a
sherpa-onnx release (one top folder named after the model).
"""

from __future__ import annotations

import hashlib
import http.server
import io
import re
import socket
import tarfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from streamasr.backends.registry import released
from streamasr.backends.sherpa.budget import PUBLISHED_ALIASES
from streamasr.backends.sherpa.modeldir import resolve_model
from streamasr.distribution import catalog
from streamasr.distribution.cache import LOCK_DIR, cache_dir, find_cached, verify_installed
from streamasr.distribution.install import PART_SUFFIX, pull
from streamasr.distribution.manifest import read_manifest
from streamasr.distribution.pins import PIN_DIR
from streamasr.errors import ModelError, UsageError

REPO = Path(__file__).resolve().parent.parent
TINY = REPO / "models" / "tiny-random-transducer"


def build_archive(top: str = "tiny-random-transducer") -> bytes:
    """A release-shaped tar.bz2 of the bundled tiny transducer."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:bz2", compresslevel=1) as tar:
        tar.add(TINY, arcname=top)
    return buffer.getvalue()


@dataclass
class ServerState:
    """What the server serves and what it saw."""

    files: dict[str, bytes] = field(default_factory=dict)
    drop_after: int | None = None  # first GET of a file closes after this many bytes
    drops_left: int = 0
    ignore_range: bool = False
    stall_s: float = 0.0  # with drop_after: go silent this long before closing
    trickle_s: float = 0.0  # send one byte, then wait this long, and so on
    redirects: dict[str, str] = field(default_factory=dict)
    requests: list[tuple[str, str | None]] = field(default_factory=list)


class _Handler(http.server.BaseHTTPRequestHandler):
    """GET with single-range support (206 / 416), and a connection that can drop midway."""

    state: ServerState
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:  # keep test output clean
        pass

    def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
        state = self.server.state  # type: ignore[attr-defined]
        range_header = self.headers.get("Range")
        state.requests.append((self.path, range_header))
        if self.path in state.redirects:  # as GitHub sends release downloads elsewhere
            self.send_response(302)
            self.send_header("Location", state.redirects[self.path])
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body = state.files.get(self.path)
        if body is None:
            self.send_error(404, "Not Found")
            return
        start = 0
        match = re.fullmatch(r"bytes=(\d+)-", range_header or "")
        if match and not state.ignore_range:
            start = int(match.group(1))
            if start >= len(body):
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{len(body)}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
        else:
            self.send_response(200)
        payload = body[start:]
        self.send_header("Content-Type", "application/x-bzip2")
        self.send_header("Content-Length", str(len(payload)))
        self.send_header("Accept-Ranges", "bytes")
        self.end_headers()
        if state.trickle_s:
            try:
                for index in range(len(payload)):
                    self.wfile.write(payload[index : index + 1])
                    self.wfile.flush()
                    time.sleep(state.trickle_s)
            except OSError:  # the client gave up on us, as it should
                self.close_connection = True
            return
        if state.drop_after is not None and state.drops_left > 0:
            state.drops_left -= 1
            self.wfile.write(payload[: state.drop_after])
            self.wfile.flush()
            time.sleep(state.stall_s)
            self.connection.shutdown(socket.SHUT_RDWR)
            self.close_connection = True
            return
        self.wfile.write(payload)


class ArchiveServer:
    """A threaded HTTP server on an ephemeral 127.0.0.1 port."""

    def __init__(self) -> None:
        self.state = ServerState()
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.httpd.state = self.state  # type: ignore[attr-defined]
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}{path}"

    def serve(self, path: str, body: bytes) -> str:
        self.state.files[path] = body
        return self.url(path)

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture(scope="session")
def tiny_archive() -> bytes:
    return build_archive()


@pytest.fixture()
def server() -> Iterator[ArchiveServer]:
    srv = ArchiveServer()
    yield srv
    srv.close()


@pytest.fixture()
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "cache"
    monkeypatch.setenv("STREAMASR_HOME", str(path))
    return path


def cache_leftovers(cache: Path) -> list[str]:
    """Everything in the cache except the lock and checksum-pin folders."""
    if not cache.exists():
        return []
    return sorted(
        p.name for p in cache.iterdir() if p.name not in (LOCK_DIR, PIN_DIR)
    )


def fast(**kwargs: object) -> dict[str, object]:
    return {"retry_wait_s": 0.0, **kwargs}


def test_pull_installs_a_model_that_resolves_and_records_checksums(
    server: ArchiveServer, cache: Path, tiny_archive: bytes
) -> None:
    url = server.serve("/tiny.tar.bz2", tiny_archive)
    seen: list[tuple[int, int | None]] = []
    stages: list[str] = []
    result = pull(
        "tiny", url=url, progress=lambda d, t: seen.append((d, t)), stage=stages.append, **fast()
    )
    assert stages == ["downloading", "checking sha256", "unpacking"]
    assert result.directory == cache / "tiny" and not result.already_installed
    assert result.checksum_source is None  # custom model: recorded, not checked
    assert result.archive_sha256 == hashlib.sha256(tiny_archive).hexdigest()
    assert result.downloaded_bytes == len(tiny_archive)
    assert seen[-1] == (len(tiny_archive), len(tiny_archive))
    assert all(a[0] <= b[0] for a, b in zip(seen, seen[1:], strict=False))
    manifest = read_manifest(result.directory)
    originals = sorted(p.name for p in TINY.iterdir())
    assert sorted(manifest["files"]) == originals
    for name, info in manifest["files"].items():
        assert info["sha256"] == hashlib.sha256((TINY / name).read_bytes()).hexdigest()
    assert manifest["archive_checksum"] == "recorded"
    files = resolve_model(str(result.directory), chunk=16)
    assert files.kind == "transducer" and files.chunk == 16
    assert cache_leftovers(cache) == ["tiny"]  # no .part, no temporary folder
    assert find_cached("tiny") == result.directory


def test_dropped_connection_resumes_with_a_range_request(
    server: ArchiveServer, cache: Path, tiny_archive: bytes
) -> None:
    url = server.serve("/tiny.tar.bz2", tiny_archive)
    cut = len(tiny_archive) // 3
    server.state.drop_after, server.state.drops_left = cut, 1
    result = pull("tiny", url=url, **fast())
    assert server.state.requests == [("/tiny.tar.bz2", None), ("/tiny.tar.bz2", f"bytes={cut}-")]
    assert result.archive_sha256 == hashlib.sha256(tiny_archive).hexdigest()
    assert result.downloaded_bytes == len(tiny_archive)
    assert verify_installed("tiny").ok


def test_resume_survives_a_redirect_and_a_stalled_connection(
    server: ArchiveServer, cache: Path, tiny_archive: bytes
) -> None:
    target = server.serve("/objects/tiny.tar.bz2", tiny_archive)
    server.state.redirects["/releases/tiny.tar.bz2"] = target
    cut = 250_000
    server.state.drop_after, server.state.drops_left, server.state.stall_s = cut, 1, 0.6
    result = pull(
        "tiny", url=server.url("/releases/tiny.tar.bz2"), timeout_s=0.2, **fast()
    )
    paths = [path for path, _ in server.state.requests]
    assert paths == ["/releases/tiny.tar.bz2", "/objects/tiny.tar.bz2"] * 2
    ranges = [header for _, header in server.state.requests]
    assert ranges[:2] == [None, None]
    # Resumed from what reached the disk (a block cut by the timeout is fetched again), and the
    # Range header follows the redirect.
    assert ranges[2] == ranges[3] and ranges[2] is not None
    start = int(re.fullmatch(r"bytes=(\d+)-", ranges[2]).group(1))  # type: ignore[union-attr]
    assert 0 < start <= cut
    assert result.archive_sha256 == hashlib.sha256(tiny_archive).hexdigest()


def test_a_failed_pull_keeps_the_part_file_and_the_next_pull_resumes_it(
    server: ArchiveServer, cache: Path, tiny_archive: bytes
) -> None:
    url = server.serve("/tiny.tar.bz2", tiny_archive)
    cut = 100_000
    server.state.drop_after, server.state.drops_left = cut, 1
    with pytest.raises(ModelError, match="run the same pull again to resume"):
        pull("tiny", url=url, retries=0, **fast())
    part = cache / f"tiny{PART_SUFFIX}"
    assert part.read_bytes() == tiny_archive[:cut]
    assert not (cache / "tiny").exists()

    result = pull("tiny", url=url, retries=0, **fast())
    assert server.state.requests[-1] == ("/tiny.tar.bz2", f"bytes={cut}-")
    assert result.resumed_from_bytes == cut
    assert result.downloaded_bytes == len(tiny_archive) - cut
    assert result.archive_sha256 == hashlib.sha256(tiny_archive).hexdigest()
    assert not part.exists()


def test_a_server_that_ignores_range_restarts_the_file_cleanly(
    server: ArchiveServer, cache: Path, tiny_archive: bytes
) -> None:
    url = server.serve("/tiny.tar.bz2", tiny_archive)
    (cache).mkdir()
    (cache / f"tiny{PART_SUFFIX}").write_bytes(tiny_archive[:5000])
    server.state.ignore_range = True
    result = pull("tiny", url=url, **fast())
    assert server.state.requests == [("/tiny.tar.bz2", "bytes=5000-")]
    assert result.archive_sha256 == hashlib.sha256(tiny_archive).hexdigest()


def test_a_complete_part_file_is_not_downloaded_again(
    server: ArchiveServer, cache: Path, tiny_archive: bytes
) -> None:
    url = server.serve("/tiny.tar.bz2", tiny_archive)
    cache.mkdir()
    (cache / f"tiny{PART_SUFFIX}").write_bytes(tiny_archive)
    result = pull("tiny", url=url, **fast())  # server answers 416: nothing left to send
    assert server.state.requests == [("/tiny.tar.bz2", f"bytes={len(tiny_archive)}-")]
    assert result.downloaded_bytes == 0 and verify_installed("tiny").ok


def test_checksum_mismatch_is_refused_and_leaves_nothing(
    server: ArchiveServer, cache: Path, tiny_archive: bytes
) -> None:
    url = server.serve("/tiny.tar.bz2", tiny_archive)
    wrong = "0" * 64
    with pytest.raises(ModelError, match="does not match .* from --sha256.*deleted"):
        pull("tiny", url=url, sha256=wrong, **fast())
    assert cache_leftovers(cache) == []


def test_a_mirror_serving_other_bytes_fails_the_catalog_checksum(
    server: ArchiveServer, cache: Path, tiny_archive: bytes
) -> None:
    entry = catalog.lookup("en-20M")
    assert entry.archive_sha256 is not None
    url = server.serve(f"/{entry.name}.tar.bz2", tiny_archive)
    with pytest.raises(ModelError, match=f"does not match {entry.archive_sha256} from the catalog"):
        pull("en-20M", url=url, **fast())
    assert cache_leftovers(cache) == []


def test_matching_sha256_is_accepted_and_reported(
    server: ArchiveServer, cache: Path, tiny_archive: bytes
) -> None:
    url = server.serve("/tiny.tar.bz2", tiny_archive)
    digest = hashlib.sha256(tiny_archive).hexdigest()
    result = pull("tiny", url=url, sha256=digest.upper(), **fast())
    assert result.checksum_source == "--sha256"
    assert verify_installed("tiny").archive_checksum == "--sha256"


def _file_member(name: str, data: bytes = b"evil") -> tuple[tarfile.TarInfo, io.BytesIO]:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    return info, io.BytesIO(data)


def _special(name: str, kind: bytes, target: str = "") -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = target
    return info, None


BAD_MEMBERS = {
    "dotdot": (lambda: _file_member("m/../../evil"), "'..'"),
    "absolute": (lambda: _file_member("/tmp/streamasr-evil"), "absolute"),
    "symlink": (lambda: _special("m/link", tarfile.SYMTYPE, "../../outside"), "links outside"),
    "abs-symlink": (lambda: _special("m/link", tarfile.SYMTYPE, "/etc/passwd"), "links outside"),
    "hardlink": (lambda: _special("m/h", tarfile.LNKTYPE, "../etc/passwd"), "links outside"),
    "fifo": (lambda: _special("m/pipe", tarfile.FIFOTYPE), "special file"),
}


@pytest.mark.parametrize("label", sorted(BAD_MEMBERS))
def test_malicious_archives_are_refused(tmp_path: Path, cache: Path, label: str) -> None:
    make, why = BAD_MEMBERS[label]
    bad = tmp_path / "bad.tar.bz2"
    with tarfile.open(bad, "w:bz2") as tar:
        tar.add(TINY / "tokens.txt", arcname="m/tokens.txt")
        tar.addfile(*make())
    with pytest.raises(ModelError, match=f"refusing to unpack.*{why}"):
        pull(f"bad-{label}", archive=bad)
    assert cache_leftovers(cache) == []
    assert not (tmp_path / "evil").exists() and not (cache.parent / "evil").exists()
    assert not Path("/tmp/streamasr-evil").exists()


def test_a_truncated_archive_leaves_no_half_model(
    tmp_path: Path, cache: Path, tiny_archive: bytes
) -> None:
    truncated = tmp_path / "t.tar.bz2"
    truncated.write_bytes(tiny_archive[: len(tiny_archive) // 2])
    with pytest.raises(ModelError, match="could not be unpacked|not a readable tar"):
        pull("tiny", archive=truncated)
    assert cache_leftovers(cache) == []
    assert truncated.exists()  # the user's own file is never deleted


def test_an_archive_without_a_model_is_refused(tmp_path: Path, cache: Path) -> None:
    path = tmp_path / "x.tar.bz2"
    with tarfile.open(path, "w:bz2") as tar:
        tar.addfile(*_file_member("x/readme.txt", b"hello"))
    with pytest.raises(ModelError, match="does not hold a sherpa-onnx model"):
        pull("x", archive=path)
    assert cache_leftovers(cache) == []


def test_verify_reports_changed_missing_and_extra_files(
    tmp_path: Path, cache: Path, tiny_archive: bytes
) -> None:
    archive = tmp_path / "tiny.tar.bz2"
    archive.write_bytes(tiny_archive)
    directory = pull("tiny", archive=archive).directory
    clean = verify_installed("tiny")
    assert clean.ok and clean.checked == len(list(TINY.iterdir())) and clean.extra == ()

    tokens = directory / "tokens.txt"
    tokens.write_text(tokens.read_text() + "x 9999\n")
    joiner = next(directory.glob("joiner-*chunk-32*.onnx"))
    joiner.unlink()
    (directory / "notes.txt").write_text("mine")
    report = verify_installed("tiny")
    assert not report.ok
    assert report.changed == ("tokens.txt",)
    assert report.missing == (joiner.name,)
    assert report.extra == ("notes.txt",)


def test_same_size_change_is_detected_by_hash(
    tmp_path: Path, cache: Path, tiny_archive: bytes
) -> None:
    archive = tmp_path / "tiny.tar.bz2"
    archive.write_bytes(tiny_archive)
    directory = pull("tiny", archive=archive).directory
    encoder = next(directory.glob("encoder-*chunk-16*.onnx"))
    data = bytearray(encoder.read_bytes())
    data[len(data) // 2] ^= 0xFF
    encoder.write_bytes(bytes(data))
    assert verify_installed("tiny").changed == (encoder.name,)


def test_pull_again_is_a_no_op_and_force_reinstalls(
    server: ArchiveServer, cache: Path, tiny_archive: bytes
) -> None:
    url = server.serve("/tiny.tar.bz2", tiny_archive)
    directory = pull("tiny", url=url, **fast()).directory
    (directory / "tokens.txt").write_text("damaged")
    again = pull("tiny", url=url, **fast())
    assert again.already_installed and len(server.state.requests) == 1
    assert not verify_installed("tiny").ok
    pull("tiny", url=url, force=True, **fast())
    assert verify_installed("tiny").ok
    assert cache_leftovers(cache) == ["tiny"]


def test_archive_install_under_a_catalog_name_is_found_by_alias(
    tmp_path: Path, cache: Path, tiny_archive: bytes
) -> None:
    entry = catalog.lookup("multi-zh-hans")
    assert entry.archive_sha256 is None  # not published: recorded on first download
    archive = tmp_path / "a.tar.bz2"
    archive.write_bytes(tiny_archive)
    result = pull("multi-zh-hans", archive=archive)
    assert result.directory == cache / entry.name
    assert find_cached("multi-zh-hans") == result.directory
    assert find_cached(entry.name) == result.directory
    assert read_manifest(result.directory)["archive_checksum"] == "recorded"


def test_unknown_name_suggests_the_closest_catalog_names(cache: Path) -> None:
    with pytest.raises(ModelError, match="`streamasr models list` shows"):
        pull("no-such-model")
    with pytest.raises(ModelError, match="did you mean en, en-20M"):
        verify_installed("en-20N")


def test_http_404_is_a_clear_error(server: ArchiveServer, cache: Path) -> None:
    with pytest.raises(ModelError, match="HTTP 404 Not Found.*--archive FILE"):
        pull("tiny", url=server.url("/missing.tar.bz2"), **fast())
    assert cache_leftovers(cache) == []


def test_unreachable_server_suggests_a_mirror_or_a_manual_download(cache: Path) -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(ModelError, match="cannot reach 127.0.0.1.*--url URL.*--archive FILE"):
        pull("tiny", url=f"http://127.0.0.1:{port}/x.tar.bz2", **fast())


def test_bad_option_combinations_are_usage_errors(cache: Path, tmp_path: Path) -> None:
    with pytest.raises(UsageError):
        pull("tiny", url="http://127.0.0.1/x", archive=tmp_path / "x")
    with pytest.raises(UsageError, match="64 hex"):
        pull("tiny", url="http://127.0.0.1/x", sha256="abc")
    with pytest.raises(UsageError, match="folder name"):
        pull("../escape", url="http://127.0.0.1/x")


def test_cache_dir_follows_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("STREAMASR_HOME", str(tmp_path / "h"))
    assert cache_dir() == tmp_path / "h"
    monkeypatch.delenv("STREAMASR_HOME")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert cache_dir() == tmp_path / "x" / "streamasr" / "models"


def test_catalog_aliases_agree_with_the_latency_table() -> None:
    for alias, release in PUBLISHED_ALIASES.items():
        entry = catalog.find(alias)
        assert entry is not None and entry.name == release, alias
    names = [e.name for e in catalog.CATALOG]
    aliases = [a for e in catalog.CATALOG for a in e.aliases]
    assert len(set(names)) == len(names) and len(set(aliases)) == len(aliases)
    for entry in catalog.CATALOG:
        if entry.kind == "punctuation":  # for `file --punctuate`: no chunks, its own release
            assert entry.url.endswith(f"/punctuation-models/{entry.name}.tar.bz2")
            assert entry.engine == "sherpa-onnx" and not released(entry).chunks
            assert entry.size_mb > 0
            continue
        if entry.single_file:  # a .nemo on Hugging Face: one file, not a release tarball
            assert entry.url == (
                f"https://huggingface.co/nvidia/{entry.name}/resolve/main/{entry.file_name}"
            )
            assert entry.engine == "nemo" and entry.file_name.endswith(".nemo")
        else:
            assert entry.url.endswith(f"/asr-models/{entry.name}.tar.bz2")
            assert entry.engine == "sherpa-onnx"
        assert entry.kind in ("transducer", "ctc", "hybrid") and released(entry).chunks
        assert entry.language and entry.token_type and entry.size_mb > 0
        if entry.archive_sha256 is not None:
            assert re.fullmatch(r"[0-9a-f]{64}", entry.archive_sha256)
