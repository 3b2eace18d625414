"""A local model folder (never pulled) pinned in place with `models verify PATH --record`: every
later use checks it as it checks a pulled model, so a bit-flipped encoder is refused instead of
decoding to wrong text. Each case runs the CLI in a fresh process, on a copy of a bundled model.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from test_store import TINY, tiny_archive
from test_store_security import streamasr
from test_store_trust import CLIP, error_line, pulled

from streamasr.distribution.manifest import MANIFEST_NAME

__all__ = ["tiny_archive"]  # the fixture, shared with test_store

ENCODER = "encoder-epoch-0-avg-1-chunk-16-left-64.onnx"


def folder_copy(tmp_path: Path, name: str = "mine") -> Path:
    copy = tmp_path / name
    shutil.copytree(TINY, copy)
    return copy


def flip_a_byte(path: Path, *, mtime_forward_s: int) -> None:
    """One bit pattern changed in the middle, the size kept; the mtime moved (or kept)."""
    before = path.stat()
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns + mtime_forward_s * 10**9))


def test_a_recorded_folder_refuses_a_flipped_encoder_at_every_use(tmp_path: Path) -> None:
    home = tmp_path / "cache"
    mine = folder_copy(tmp_path)
    recorded = streamasr(home, "models", "verify", str(mine), "--record")
    assert recorded.returncode == 0, recorded.stderr
    assert (mine / MANIFEST_NAME).is_file() and "recorded 7 files" in recorded.stderr
    ok = streamasr(home, "models", "verify", str(mine))
    assert ok.returncode == 0 and ok.stdout.startswith("ok: 7 files"), ok.stderr
    assert "archive" not in ok.stderr  # a folder of one's own has no archive to speak of

    flip_a_byte(mine / ENCODER, mtime_forward_s=1)
    used = streamasr(home, "file", str(CLIP), "--model", str(mine))
    assert used.returncode == 1 and used.stdout == ""
    line = error_line(used)
    assert ENCODER in line and "changed since its checksums were recorded" in line
    assert f"`streamasr models verify {mine} --record`" in line
    checked = streamasr(home, "models", "verify", str(mine))
    assert checked.returncode == 1
    assert f"changed  {ENCODER}" in checked.stdout and "--record" in checked.stdout

    unrecorded = folder_copy(tmp_path, "theirs")  # the same flip, nothing recorded: as before
    flip_a_byte(unrecorded / ENCODER, mtime_forward_s=1)
    runs = streamasr(home, "file", str(CLIP), "--model", str(unrecorded), "--format", "jsonl")
    assert runs.returncode == 0, runs.stderr
    assert json.loads(runs.stdout.splitlines()[-1])["type"] == "summary"


def test_a_flip_that_keeps_size_and_mtime_is_caught_by_verify_only(tmp_path: Path) -> None:
    """The check before use stats the files; only hashing them sees this edit."""
    home = tmp_path / "cache"
    mine = folder_copy(tmp_path)
    assert streamasr(home, "models", "verify", str(mine), "--record").returncode == 0
    flip_a_byte(mine / ENCODER, mtime_forward_s=0)
    cheap = streamasr(home, "file", str(CLIP), "--model", str(mine), "--format", "jsonl")
    assert cheap.returncode == 0, cheap.stderr
    full = streamasr(home, "file", str(CLIP), "--model", str(mine), "--verify")
    assert full.returncode == 1 and ENCODER in error_line(full)
    assert streamasr(home, "models", "verify", str(mine)).returncode == 1
    again = streamasr(home, "models", "verify", str(mine), "--record")  # the change is mine
    assert again.returncode == 0, again.stderr
    assert streamasr(home, "models", "verify", str(mine)).returncode == 0


def test_verify_of_an_unrecorded_folder_a_file_or_a_pulled_folder(
    tmp_path: Path, tiny_archive: bytes
) -> None:
    home = tmp_path / "cache"
    mine = folder_copy(tmp_path)
    bare = streamasr(home, "models", "verify", str(mine))
    assert bare.returncode == 1
    assert f"`streamasr models verify {mine} --record`" in error_line(bare)
    a_file = streamasr(home, "models", "verify", str(mine / "tokens.txt"), "--record")
    assert a_file.returncode == 2 and "folder" in error_line(a_file)
    assert not (mine / MANIFEST_NAME).exists()
    a_name = streamasr(home, "models", "verify", "no-such-model", "--record")
    assert a_name.returncode == 2 and "--record takes a model folder" in error_line(a_name)
    notes = tmp_path / "notes"  # no model in it: nothing is hashed, nothing written
    notes.mkdir()
    (notes / "todo.txt").write_text("x")
    no_model = streamasr(home, "models", "verify", str(notes), "--record")
    assert no_model.returncode == 2 and "no model folder" in error_line(no_model)
    assert not (notes / MANIFEST_NAME).exists()

    directory = pulled(home, tiny_archive, tmp_path)
    before = (directory / MANIFEST_NAME).read_bytes()
    refused = streamasr(home, "models", "verify", str(directory), "--record")
    assert refused.returncode == 1
    assert "installed by `streamasr models pull`" in error_line(refused)
    assert (directory / MANIFEST_NAME).read_bytes() == before  # the release's sums are kept
