"""Files read whole are checked before they are read: a device, a FIFO or a huge file is one
line, at once, in a fresh CLI process (streamasr/whole_file.py).

Each run has a timeout: a FIFO that is opened and waited on would hang the run, so a failure
shows as a TimeoutExpired. The huge files are sparse (`truncate`), so they cost no disk.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
TINY_EN = REPO / "models" / "tiny-en"
CLIP = TINY_EN / "test_wavs" / "0.wav"
PUNCT = REPO / "models" / "tiny-punct-en"
HUGE_BYTES = 3 << 30  # 3 GiB, sparse


def cli(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO), STREAMASR_CONFIG=str(tmp / "none.toml"))
    return subprocess.run(
        [sys.executable, "-m", "streamasr.cli", *args],
        env=env, cwd=REPO, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def make(path: Path, kind: str) -> Path:
    """Turn `path` into a FIFO, a folder, a sparse 3 GiB file or a link to /dev/zero."""
    if path.exists() or path.is_symlink():
        path.unlink()
    if kind == "folder":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "huge":
        with path.open("wb") as handle:
            handle.truncate(HUGE_BYTES)
    else:
        path.symlink_to("/dev/zero")
    return path


SAYS = {
    "zero": "is a device, not a regular file",
    "fifo": "is a FIFO (named pipe), not a regular file",
    "folder": "is a folder, not a file",
    "huge": f"is {HUGE_BYTES} bytes, larger than such a file can be",
}


def one_line(done: subprocess.CompletedProcess[str], code: int, *words: str) -> None:
    assert done.returncode == code, done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    for word in words:
        assert word in lines[0], lines[0]


@pytest.mark.parametrize("kind", ["zero", "fifo", "huge"])
def test_a_vad_model_that_is_no_file_is_refused_before_it_is_read(
    tmp_path: Path, kind: str
) -> None:
    model = Path("/dev/zero") if kind == "zero" else make(tmp_path / "vad.onnx", kind)
    done = cli(tmp_path, "file", str(CLIP), "--vad", "silero", "--vad-model", str(model))
    one_line(done, 1, f"VAD model {model}", SAYS[kind], "--vad-model")
    assert done.stdout == ""


@pytest.mark.parametrize(
    ("name", "kind", "what"),
    [
        ("bpe.vocab", "fifo", "punctuation vocabulary"),
        ("bpe.vocab", "zero", "punctuation vocabulary"),
        ("bpe.vocab", "folder", "punctuation vocabulary"),
        ("model.onnx", "huge", "punctuation model"),
        ("model.onnx", "fifo", "punctuation model"),
    ],
)
def test_a_punctuation_folder_file_that_is_no_file_is_refused(
    tmp_path: Path, name: str, kind: str, what: str
) -> None:
    folder = tmp_path / "punct"
    shutil.copytree(PUNCT, folder)
    make(folder / name, kind)
    done = cli(tmp_path, "file", str(CLIP), "--punctuate", str(folder))
    one_line(done, 1, what, SAYS[kind])


@pytest.mark.parametrize(
    ("name", "kind", "what"),
    [
        ("tokens.txt", "fifo", "token list"),
        ("tokens.txt", "huge", "token list"),
        ("tokens.txt", "folder", "token list"),
        ("encoder-epoch-99-avg-1-chunk-16-left-64.int8.onnx", "fifo", "model file"),
        ("encoder-epoch-99-avg-1-chunk-16-left-64.int8.onnx", "huge", "model file"),
    ],
)
def test_a_model_folder_file_that_is_no_file_is_refused(
    tmp_path: Path, name: str, kind: str, what: str
) -> None:
    folder = tmp_path / "model"
    shutil.copytree(TINY_EN, folder, ignore=shutil.ignore_patterns("test_wavs", "*.md", "*.csv"))
    make(folder / name, kind)
    done = cli(tmp_path, "file", str(CLIP), "--model", str(folder))
    one_line(done, 1, what, SAYS[kind])


@pytest.mark.parametrize("kind", ["fifo", "zero", "folder"])
def test_option_files_that_are_no_files_are_usage_errors(tmp_path: Path, kind: str) -> None:
    hotwords = make(tmp_path / "hot.txt", kind)
    done = cli(tmp_path, "file", str(CLIP), "--decoding-method", "modified_beam_search",
               "--hotwords", str(hotwords))  # fmt: skip
    one_line(done, 2, "--hotwords file", SAYS[kind])
    config = make(tmp_path / "config.toml", kind)
    env_done = subprocess.run(
        [sys.executable, "-m", "streamasr.cli", "file", str(CLIP)],
        env=dict(os.environ, PYTHONPATH=str(REPO), STREAMASR_CONFIG=str(config)),
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    one_line(env_done, 2, f"config {config}", SAYS[kind])
    token = make(tmp_path / "token", kind)
    served = cli(tmp_path, "serve", "--model", "tiny-en", "--port", "0", "--token-file", str(token))
    one_line(served, 2, "--token-file", SAYS[kind])


@pytest.mark.parametrize(("kind", "says"), [
    ("fifo", SAYS["fifo"]),
    ("zero", SAYS["zero"]),
    # a file of zeros reads as an empty tar; tried as xz's legacy format, it would be
    # decompressed, all 3 GiB of it, before it was refused
    ("huge", "it is not a readable tar archive (no files in it)"),
])  # fmt: skip
def test_a_nemo_file_that_is_no_archive_is_refused_at_once(
    tmp_path: Path, kind: str, says: str
) -> None:
    model = make(tmp_path / "model.nemo", kind)
    done = cli(tmp_path, "file", str(CLIP), "--model", str(model))
    one_line(done, 1, str(model), says)
