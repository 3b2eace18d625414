"""The speech-onset detector on signals whose onset is known, and through the CLI.

The default detector works relative to a measured noise floor, so a steady hiss or hum is
never taken for speech; `--onset-dbfs` replaces it with a fixed absolute level.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from streamasr.bench.span import SpanDetector
from streamasr.vad.onset import OnsetDetector, OnsetOptions

REPO = Path(__file__).resolve().parent.parent
WAVS = REPO / "models" / "tiny-en" / "test_wavs"
RATE = 16000
NOISE_FLOOR_DBFS = -34.0  # above a fixed -40 dBFS threshold, well below the speech
SPEECH_ONSET_S = 0.5  # conftest's speech fixtures start with 0.5 s of silence


def db(level_dbfs: float) -> float:
    """Amplitude whose RMS is `level_dbfs` for noise of unit variance."""
    return 10 ** (level_dbfs / 20)


def floor_and_burst(
    floor_dbfs: float, burst_at_s: float, burst_dbfs: float, total_s: float = 3.0, seed: int = 0
) -> np.ndarray:
    """Gaussian noise at a steady level, with a 440 Hz tone added from `burst_at_s` on."""
    rng = np.random.default_rng(seed)
    n = int(total_s * RATE)
    audio = rng.standard_normal(n) * db(floor_dbfs)
    start = int(burst_at_s * RATE)
    t = np.arange(n - start) / RATE
    audio[start:] += np.sqrt(2) * db(burst_dbfs) * np.sin(2 * np.pi * 440 * t)
    return audio.astype(np.float32)


def detect(audio: np.ndarray, block_s: float = 0.1, **options: float) -> OnsetDetector:
    detector = OnsetDetector(RATE, OnsetOptions(**options))
    size = max(1, int(block_s * RATE))
    for start in range(0, len(audio), size):
        detector.feed(audio[start : start + size])
    return detector


@pytest.mark.parametrize("floor_dbfs", [-70.0, -50.0, -34.0, -25.0])
@pytest.mark.parametrize("burst_at_s", [0.6, 1.234, 2.0])
def test_a_burst_over_a_steady_floor_is_found_within_20_ms(
    floor_dbfs: float, burst_at_s: float
) -> None:
    audio = floor_and_burst(floor_dbfs, burst_at_s, burst_dbfs=floor_dbfs + 18)
    detector = detect(audio)
    assert detector.onset_s is not None
    assert abs(detector.onset_s - burst_at_s) <= 0.02, (detector.onset_s, burst_at_s)
    # before the burst, the floor estimate sits at the noise (its quietest 10 ms frames)
    before = detect(audio[: int(burst_at_s * RATE)])
    assert before.floor_dbfs is not None and abs(before.floor_dbfs - floor_dbfs) < 3


@pytest.mark.parametrize("floor_dbfs", [-60.0, -40.0, -34.0, -20.0])
def test_a_steady_floor_alone_has_no_onset(floor_dbfs: float) -> None:
    audio = floor_and_burst(floor_dbfs, burst_at_s=10.0, burst_dbfs=-200.0, total_s=10.0)
    assert detect(audio).onset_s is None


def test_digital_silence_never_counts_as_speech() -> None:
    assert detect(np.zeros(RATE * 2, np.float32)).onset_s is None
    quiet = floor_and_burst(-90.0, 1.0, burst_dbfs=-70.0)  # 20 dB up, but below -60 dBFS
    assert detect(quiet).onset_s is None


def test_the_onset_does_not_depend_on_the_feed_block() -> None:
    audio = floor_and_burst(-45.0, 1.317, burst_dbfs=-25.0)
    found = {detect(audio, block_s).onset_s for block_s in (0.001, 0.01, 0.0137, 0.32, 3.0)}
    assert len(found) == 1 and abs(found.pop() - 1.317) <= 0.02


def test_an_absolute_threshold_overrides_the_floor() -> None:
    audio = floor_and_burst(-34.0, 1.0, burst_dbfs=-16.0)
    assert detect(audio, threshold_dbfs=-40.0).onset_s == 0.0  # the noise is above -40 dBFS
    assert abs(detect(audio, threshold_dbfs=-25.0).onset_s - 1.0) <= 0.02


def test_rearm_finds_the_next_burst_after_a_gap() -> None:
    audio = floor_and_burst(-50.0, 0.5, burst_dbfs=-30.0, total_s=1.0)
    gap = floor_and_burst(-50.0, 5.0, burst_dbfs=-200.0, total_s=1.0, seed=1)
    again = floor_and_burst(-50.0, 0.25, burst_dbfs=-30.0, total_s=1.0, seed=2)
    detector = OnsetDetector(RATE)
    detector.feed(audio)
    assert detector.onset_s is not None and abs(detector.onset_s - 0.5) <= 0.02
    detector.rearm(1.0)
    detector.feed(gap)
    assert detector.onset_s is None
    detector.feed(again)
    assert detector.onset_s is not None and abs(detector.onset_s - 2.25) <= 0.02


def test_span_end_is_the_end_of_the_last_loud_frame() -> None:
    audio = floor_and_burst(-45.0, 0.8, burst_dbfs=-25.0, total_s=2.0)
    audio[int(1.5 * RATE) :] = floor_and_burst(-45.0, 9.0, -200.0, total_s=0.5, seed=3)
    span = SpanDetector(RATE)
    span.feed(audio)
    assert span.onset_s is not None and abs(span.onset_s - 0.8) <= 0.02
    assert span.end_s is not None and abs(span.end_s - 1.5) <= 0.02


@pytest.fixture(scope="module")
def noisy_speech(speech_16k: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """espeak-ng speech with steady noise at NOISE_FLOOR_DBFS from the first sample on."""
    audio, rate = sf.read(speech_16k, dtype="float32")
    assert rate == RATE
    noise = np.random.default_rng(7).standard_normal(len(audio)) * db(NOISE_FLOOR_DBFS)
    path = tmp_path_factory.mktemp("noisy") / "noisy-speech.wav"
    sf.write(path, (audio + noise).astype(np.float32), rate, subtype="PCM_16")
    return path


def test_speech_over_a_noise_floor_has_its_onset_at_the_speech(
    speech_16k: Path, noisy_speech: Path
) -> None:
    """The noise does not move the onset off the speech; a fixed -40 dBFS threshold does."""
    clean = detect(sf.read(speech_16k, dtype="float32")[0])
    assert clean.onset_s is not None and abs(clean.onset_s - SPEECH_ONSET_S) <= 0.05
    audio, rate = sf.read(noisy_speech, dtype="float32")
    relative = OnsetDetector(rate)
    relative.feed(audio)
    assert relative.onset_s is not None and abs(relative.onset_s - clean.onset_s) <= 0.05
    absolute = OnsetDetector(rate, OnsetOptions(threshold_dbfs=-40.0))
    absolute.feed(audio)
    assert absolute.onset_s == 0.0  # what a fixed -40 dBFS threshold finds


# ---- through the command line -----------------------------------------------------------


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "streamasr.cli", *args],
        cwd=REPO, capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL,
    )


def first_token(path: Path, *extra: str) -> dict:
    result = cli("file", str(path), "--model", "tiny-en", "--format", "jsonl", *extra)
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in result.stdout.splitlines()]
    return next(r for r in records if r["type"] == "first_token")


def test_file_times_the_first_token_from_the_speech_not_from_the_noise(
    noisy_speech: Path,
) -> None:
    default = first_token(noisy_speech)
    assert abs(default["onset_s"] - SPEECH_ONSET_S) <= 0.05
    assert default["latency_s"] == pytest.approx(default["audio_s"] - default["onset_s"])
    fixed = first_token(noisy_speech, "--onset-dbfs", "-40")
    assert fixed["onset_s"] == 0.0 and fixed["audio_s"] == default["audio_s"]


@pytest.mark.parametrize("command", ["file", "bench", "mic"])
@pytest.mark.parametrize("value", ["nan", "inf", "5", "-200"])
def test_onset_dbfs_is_checked_on_every_command(command: str, value: str) -> None:
    target = {"file": [str(WAVS / "2.wav")], "bench": [str(WAVS)], "mic": []}[command]
    result = cli(command, *target, "--model", "tiny-en", "--onset-dbfs", value)
    assert result.returncode == 2, result.stderr
    assert "--onset-dbfs" in result.stderr and "Traceback" not in result.stderr
