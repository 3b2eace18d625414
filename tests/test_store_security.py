"""Hostile model archives, installed the way a user or an attacker would: a fresh
`streamasr models pull` process, through `--archive` and through `--url` against a real HTTP
server on 127.0.0.1.

The store refuses every link, so these archives must fail before anything is written outside
the temporary folder, and leave nothing in the cache.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from test_store import TINY, ArchiveServer, cache_leftovers, server

from streamasr.distribution.install import pull, pull_target, unpacked_cap_bytes
from streamasr.distribution.manifest import MANIFEST_NAME
from streamasr.errors import ModelError

__all__ = ["server"]  # fixture shared with test_store

REPO = Path(__file__).resolve().parent.parent
SECRET = b"the original contents\n"


def streamasr(home: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """`python -m streamasr.cli ...` in a fresh process with its own cache."""
    env = {**os.environ, "STREAMASR_HOME": str(home), "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "streamasr.cli", *args],
        capture_output=True, text=True, env=env, timeout=timeout, cwd=REPO,
    )


def _add_model(tar: tarfile.TarFile, top: str = "m", *, full: bool = True) -> None:
    """The tiny model's files (or only tokens.txt, where the rest would just cost time)."""
    for path in sorted(TINY.iterdir()):
        if full or path.name == "tokens.txt":
            tar.add(path, arcname=f"{top}/{path.name}")


def _link(name: str, target: str, kind: bytes = tarfile.SYMTYPE) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = target
    return info


def _dir(name: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = tarfile.DIRTYPE
    info.mode = 0o755
    return info


def _file(name: str, data: bytes) -> tuple[tarfile.TarInfo, io.BytesIO]:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    return info, io.BytesIO(data)


def path_max_escape_archive(path: Path, outside: Path, model_dir: Path) -> Path:
    """The CVE-2025-4517 shape: nested long-named folders reached through one-letter symlinks
    until the real path passes PATH_MAX (so `os.path.realpath` stops resolving and an
    unpatched tar `data` filter accepts what follows), then a link that is lexically inside
    the extraction folder but really far above it, and through it a hardlink to an outside
    file followed by a regular member that writes into it, and a file planted outside.
    Python 3.11.7's `tarfile.extractall(filter="data")` overwrites the outside file with it.
    """
    long_name = "d" * 247
    steps = "abcdefghijklmnopq"  # 17 x 248 characters: past a 4096-byte PATH_MAX
    assert len(model_dir.parts) < len(steps)  # climbing len(steps) + 1 levels reaches "/"
    with tarfile.open(path, "w:bz2") as tar:
        _add_model(tar, full=False)
        prefix = ""
        for step in steps:
            tar.addfile(_dir(prefix + long_name))
            tar.addfile(_link(prefix + step, long_name))
            prefix += step + "/"
        # Really the extraction folder; unresolvable (too long) for realpath, which then
        # reads the rest of a path through it lexically.
        tar.addfile(_link(prefix + "l", "../" * len(steps)))
        # Lexically back in the extraction folder; really len(steps) + 1 levels above it.
        climb = "../" * (len(steps) + 1)
        tar.addfile(_link("escape", prefix + "l/" + climb + str(outside).lstrip("/")))
        tar.addfile(_link("m/overwrite", "escape/secret.txt", tarfile.LNKTYPE))
        tar.addfile(*_file("m/overwrite", b"pwned\n"))
        tar.addfile(*_file("escape/planted.txt", b"planted\n"))
    return path


def plain_hardlink_archive(tmp: Path, outside: Path, label: str) -> Path:
    """Hardlinks without any symlink, each followed by a member writing through it: to an
    absolute outside path, relative out of the folder, and to a file inside the archive
    (harmless in itself, refused all the same)."""
    target = outside / "secret.txt"
    link = {
        "absolute": _link("m/tokens2.txt", str(target), tarfile.LNKTYPE),
        "relative": _link("m/h", "../" * 12 + str(target).lstrip("/"), tarfile.LNKTYPE),
        "inside": _link("m/copy.txt", "m/tokens.txt", tarfile.LNKTYPE),
    }[label]
    path = tmp / f"hardlink-{label}.tar.bz2"
    with tarfile.open(path, "w:bz2") as tar:
        _add_model(tar, full=False)
        tar.addfile(link)
        tar.addfile(*_file(link.name, b"pwned\n"))
    return path


@pytest.fixture()
def outside(tmp_path: Path) -> Path:
    """A folder beside the cache holding a file an attacker wants to overwrite."""
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "secret.txt").write_bytes(SECRET)
    return folder


def assert_untouched(outside: Path, home: Path) -> None:
    assert (outside / "secret.txt").read_bytes() == SECRET
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    assert cache_leftovers(home) == []


def test_path_max_symlink_chain_is_refused_through_archive(tmp_path: Path, outside: Path) -> None:
    home = tmp_path / "cache"
    bad = path_max_escape_archive(tmp_path / "cve.tar.bz2", outside, home / "evil")
    result = streamasr(home, "models", "pull", "evil", "--archive", str(bad))
    assert result.returncode == 1, result.stderr
    assert "refusing to unpack cve.tar.bz2" in result.stderr
    assert "symbolic link" in result.stderr and "Traceback" not in result.stderr
    assert result.stdout == ""
    assert_untouched(outside, home)
    assert bad.exists()  # the user's own file is never deleted


def test_path_max_symlink_chain_is_refused_through_url(
    tmp_path: Path, outside: Path, server: ArchiveServer
) -> None:
    home = tmp_path / "cache"
    bad = path_max_escape_archive(tmp_path / "cve.tar.bz2", outside, home / "evil")
    url = server.serve("/evil.tar.bz2", bad.read_bytes())
    result = streamasr(home, "models", "pull", "evil", "--url", url)
    assert result.returncode == 1, result.stderr
    assert "refusing to unpack" in result.stderr and "Traceback" not in result.stderr
    assert_untouched(outside, home)  # the downloaded .part is gone too


@pytest.mark.parametrize("label", ["absolute", "relative", "inside"])
def test_hardlinks_are_refused(
    tmp_path: Path, outside: Path, server: ArchiveServer, label: str
) -> None:
    home = tmp_path / "cache"
    bad = plain_hardlink_archive(tmp_path, outside, label)
    by_archive = streamasr(home, "models", "pull", "evil", "--archive", str(bad))
    assert by_archive.returncode == 1
    assert "hard link" in by_archive.stderr and "Traceback" not in by_archive.stderr
    assert_untouched(outside, home)
    url = server.serve(f"/{label}.tar.bz2", bad.read_bytes())
    by_url = streamasr(home, "models", "pull", "evil", "--url", url)
    assert by_url.returncode == 1 and "hard link" in by_url.stderr
    assert_untouched(outside, home)


def test_a_member_named_twice_cannot_replace_the_first(tmp_path: Path) -> None:
    path = tmp_path / "twice.tar.bz2"
    with tarfile.open(path, "w:bz2") as tar:
        _add_model(tar, full=False)
        tar.addfile(*_file("m/tokens.txt", b"replaced\n"))
    home = tmp_path / "cache"
    result = streamasr(home, "models", "pull", "twice", "--archive", str(path))
    assert result.returncode == 1 and "appears twice" in result.stderr
    assert cache_leftovers(home) == []


def test_an_archive_made_by_gnu_tar_with_dot_entries_installs(tmp_path: Path) -> None:
    """Genuine archives often start with `./`; refusing links must not refuse those."""
    path = tmp_path / "dot.tar.bz2"
    subprocess.run(["tar", "-cjf", str(path), "-C", str(TINY), "."], check=True)
    home = tmp_path / "cache"
    result = streamasr(home, "models", "pull", "dot", "--archive", str(path))
    assert result.returncode == 0, result.stderr
    directory = Path(result.stdout.strip())
    assert sorted(p.name for p in directory.iterdir() if p.name != MANIFEST_NAME) == sorted(
        p.name for p in TINY.iterdir()
    )
    for original in TINY.iterdir():
        assert (directory / original.name).read_bytes() == original.read_bytes()
    assert streamasr(home, "models", "verify", "dot").returncode == 0


# --- the unpacked-size cap ------------------------------------------------------------------


def zeros_archive(path: Path, megabytes: int) -> Path:
    """The tiny model plus a file of zeros: a small archive that unpacks big."""
    with tarfile.open(path, "w:gz", compresslevel=1) as tar:
        _add_model(tar)
        info = tarfile.TarInfo("m/padding.bin")
        info.size = megabytes << 20
        tar.addfile(info, _Zeros(info.size))
    return path


class _Zeros(io.RawIOBase):
    def __init__(self, size: int) -> None:
        self.left = size

    def read(self, n: int = -1) -> bytes:
        n = self.left if n < 0 else min(n, self.left)
        self.left -= n
        return bytes(n)


def sparse_archive(path: Path, tmp: Path, megabytes: int) -> Path:
    """A GNU tar sparse member: a few KB of archive whose header describes a huge file."""
    folder = tmp / "sparse-src" / "m"
    folder.mkdir(parents=True)
    for original in TINY.iterdir():
        (folder / original.name).write_bytes(original.read_bytes())
    with open(folder / "hole.bin", "wb") as handle:
        handle.truncate(megabytes << 20)
    subprocess.run(["tar", "--sparse", "-czf", str(path), "-C", str(folder.parent), "m"],
                   check=True)
    return path


def test_an_archive_over_the_cap_stops_and_leaves_nothing(tmp_path: Path) -> None:
    bomb = zeros_archive(tmp_path / "bomb.tar.gz", 48)
    assert bomb.stat().st_size < 5 << 20  # the 4 MB model; 48 MB of zeros add little
    home = tmp_path / "cache"
    result = streamasr(home, "models", "pull", "bomb", "--archive", str(bomb),
                       "--max-unpacked-mb", "8")
    assert result.returncode == 1
    assert "unpacks to more than 8.0 MB" in result.stderr
    assert "--max-unpacked-mb" in result.stderr and "Traceback" not in result.stderr
    assert cache_leftovers(home) == []
    raised = streamasr(home, "models", "pull", "bomb", "--archive", str(bomb),
                       "--max-unpacked-mb", "64")
    assert raised.returncode == 0, raised.stderr  # the cap can be raised for a genuine model


def test_a_sparse_member_is_counted_by_what_it_writes(tmp_path: Path) -> None:
    bomb = sparse_archive(tmp_path / "sparse.tar.gz", tmp_path, 512)
    assert bomb.stat().st_size < 5 << 20
    home = tmp_path / "cache"
    result = streamasr(home, "models", "pull", "sparse", "--archive", str(bomb),
                       "--max-unpacked-mb", "16")
    assert result.returncode == 1 and "unpacks to more than 16.0 MB" in result.stderr
    assert cache_leftovers(home) == []


def test_the_default_cap_refuses_a_bomb(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No option given: an archive outside the catalog may unpack to 20x its own size, at
    least 256 MB; a catalog model to 3x its download size."""
    bomb = sparse_archive(tmp_path / "sparse.tar.gz", tmp_path, 300)
    home = tmp_path / "cache"
    monkeypatch.setenv("STREAMASR_HOME", str(home))
    with pytest.raises(ModelError, match="more than 256.0 MB"):
        pull("bomb", archive=bomb)
    assert cache_leftovers(home) == []
    target = pull_target("en-kroko", have_archive=True)
    assert unpacked_cap_bytes(target, 1, None) == 3 * 55 << 20
    custom = pull_target("x", url="http://127.0.0.1/x.tar.bz2")
    assert unpacked_cap_bytes(custom, 100 << 20, None) == 2000 << 20
    assert unpacked_cap_bytes(custom, 100 << 20, 5.0) == 5 << 20


def test_bad_cap_and_timeout_values_are_usage_errors(tmp_path: Path) -> None:
    archive = tmp_path / "a.tar.bz2"
    archive.write_bytes(b"x")
    for option, value in (("--max-unpacked-mb", "0"), ("--max-unpacked-mb", "nan"),
                          ("--timeout", "-1"), ("--timeout", "inf")):
        result = streamasr(tmp_path / "cache", "models", "pull", "x", "--archive", str(archive),
                           option, value)
        assert result.returncode == 2, (option, value, result.stderr)
        assert option in result.stderr and "Traceback" not in result.stderr
