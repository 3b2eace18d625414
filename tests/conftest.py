"""Shared fixtures: the bundled real-architecture models and speech made with espeak-ng."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

# Tests never read the developer's own settings (streamasr/config.py): no config file and no
# STREAMASR_MODEL/DEVICE/FORMAT, in this process and in every process a test starts.
os.environ["STREAMASR_CONFIG"] = str(Path(tempfile.mkdtemp(prefix="streamasr-cfg-")) / "none.toml")
for _name in ("STREAMASR_MODEL", "STREAMASR_DEVICE", "STREAMASR_FORMAT"):
    os.environ.pop(_name, None)

REPO = Path(__file__).resolve().parent.parent
MODELS = REPO / "models"
# plain words any English model should know; what the bundled model makes of them is
# SPEECH_TRANSCRIPT in test_tiny_en.py
SPEECH_TEXT = "early see create show life and then mother walk seven nine"


def require_tool(name: str) -> str:
    """CI installs these; a missing one is a failure, not a skip."""
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed; run .ci/run or apt-get install it")
    return path


def make_dataset(out: Path, n: int, seed: int) -> Path:
    """Synthesise a test set in all three layouts with scripts/make_dataset.py; returns `out`."""
    subprocess.run(
        [sys.executable, str(REPO / "scripts" / "make_dataset.py"), "--out", str(out),
         "--n", str(n), "--seed", str(seed)],
        check=True,
        capture_output=True,
    )
    return out


@pytest.fixture(scope="session")
def random_transducer() -> Path:
    return MODELS / "tiny-random-transducer"


@pytest.fixture(scope="session")
def random_ctc() -> Path:
    return MODELS / "tiny-random-ctc"


@pytest.fixture(scope="session")
def speech_22k(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """espeak-ng speech at its native 22050 Hz, with 0.5 s of silence in front."""
    espeak = require_tool("espeak-ng")
    out = tmp_path_factory.mktemp("speech") / "raw.wav"
    subprocess.run([espeak, "-v", "en-us", "-w", str(out), SPEECH_TEXT], check=True)
    audio, rate = sf.read(out, dtype="float32")
    padded = np.concatenate([np.zeros(rate // 2, np.float32), audio])
    path = out.with_name("speech-22k.wav")
    sf.write(path, padded, rate, subtype="PCM_16")
    return path


@pytest.fixture(scope="session")
def speech_16k(speech_22k: Path) -> Path:
    """The same speech resampled to 16 kHz mono 16-bit with sox."""
    sox = require_tool("sox")
    path = speech_22k.with_name("speech-16k.wav")
    subprocess.run([sox, str(speech_22k), "-r", "16000", "-b", "16", str(path)], check=True)
    return path


@pytest.fixture(scope="session")
def speech_stereo_44k(speech_22k: Path) -> Path:
    """The same speech as 44.1 kHz stereo float: a format a careless tool gets wrong."""
    sox = require_tool("sox")
    path = speech_22k.with_name("speech-44k-stereo.wav")
    subprocess.run(
        [sox, str(speech_22k), "-r", "44100", "-c", "2", "-e", "floating-point", str(path)],
        check=True,
    )
    return path


@pytest.fixture(scope="module")
def one_torch_thread() -> Iterator[None]:
    """NeMo tests run torch on one thread: its default two threads spin against each other on
    a busy 2-core machine (the tiny model's steps ran tens of times slower), and one thread is
    what a CI runner can count on."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def read_terminal(controller: int) -> bytes:
    """Everything written to a pseudo-terminal until every writer has closed it."""
    seen = bytearray()
    while True:
        try:
            data = os.read(controller, 65536)
        except OSError:  # Linux: EIO once the last writer is gone
            break
        if not data:
            break
        seen.extend(data)
    return bytes(seen)
