"""`streamasr mic --save/--log` when things go wrong, through a real PortAudio capture.

A private PulseAudio null sink is the microphone (tests/pulse_fixture.py). The capture is
SIGKILLed mid-utterance: the saved WAV must still read as everything that was decoded. And
--save/--log on a full disk (/dev/full) end in one line, exit 1, with the text kept.
"""

from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO

import numpy as np
import pytest
import soundfile as sf
from pulse_fixture import SINK_RATE, PulseServer, pulse_server

REPO = Path(__file__).resolve().parent.parent
MODEL = "tiny-en"

__all__ = ["pulse_server"]  # the fixture, imported for pytest


class Capture:
    """A `streamasr mic` subprocess whose stderr is read as it comes (to see 'listening:')."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "streamasr.cli", "mic", "--device", "pulse", "--model",
             MODEL, *args],
            env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        self.err: list[str] = []
        self.out: list[str] = []
        self.listening = threading.Event()
        self._readers = [
            threading.Thread(target=self._read, args=(self.process.stderr, self.err), daemon=True),
            threading.Thread(target=self._read, args=(self.process.stdout, self.out), daemon=True),
        ]
        for reader in self._readers:
            reader.start()

    def _read(self, stream: IO[str], into: list[str]) -> None:
        for line in stream:
            into.append(line)
            if line.startswith("listening:"):
                self.listening.set()

    def wait_listening(self) -> None:
        if not self.listening.wait(90):
            self.process.kill()
            pytest.fail("mic never started listening:\n" + "".join(self.err))
        time.sleep(0.6)  # ALSA's pulse plugin hands over one silent block first

    def finish(self) -> int:
        try:
            code = self.process.wait(timeout=90)
        except subprocess.TimeoutExpired:
            self.process.kill()
            pytest.fail("mic did not exit:\n" + "".join(self.err))
        for reader in self._readers:
            reader.join(timeout=10)
        return code


@pytest.fixture(scope="module")
def clip(speech_22k: Path) -> Path:
    """The shared espeak-ng sentence as 16-bit mono at the sink's rate (bit-exact capture)."""
    path = speech_22k.with_name("speech-crash.wav")
    subprocess.run(
        ["sox", str(speech_22k), "-D", "-r", str(SINK_RATE), "-b", "16", "-c", "1", str(path)],
        check=True,
    )
    return path


def header(path: Path) -> dict[str, int]:
    data = path.read_bytes()
    found = {"file": len(data), "riff": struct.unpack("<I", data[4:8])[0]}
    at = 12
    while at + 8 <= len(data):
        chunk, size = data[at : at + 4].decode(), struct.unpack("<I", data[at + 4 : at + 8])[0]
        if chunk == "data":
            found["data"], found["data_at"] = size, at + 8
            break
        at += 8 + size + (size & 1)
    return found


def test_sigkill_mid_capture_leaves_a_wav_holding_all_it_decoded(
    pulse_server: PulseServer, clip: Path, tmp_path: Path
) -> None:
    saved, log = tmp_path / "killed.wav", tmp_path / "killed.jsonl"
    block_ms = 100
    mic = Capture(
        ["--save", str(saved), "--log", str(log), "--format", "jsonl", "--block-ms",
         str(block_ms)],
        pulse_server.env,
    )
    mic.wait_listening()
    player = pulse_server.play(clip)
    time.sleep(2.5)  # inside the sentence
    mic.process.send_signal(signal.SIGKILL)
    assert mic.finish() == -signal.SIGKILL
    player.wait(timeout=60)

    sizes = header(saved)
    block_bytes = round(SINK_RATE * block_ms / 1000) * 4
    written = sizes["file"] - sizes["data_at"]
    # the header never claims more than is on disk, and lags it by at most the block that
    # was being written when the process died
    assert 0 < sizes["data"] <= written <= sizes["data"] + block_bytes
    assert sizes["riff"] == sizes["data_at"] - 8 + sizes["data"]
    audio, rate = sf.read(saved, dtype="float32")
    assert rate == SINK_RATE and len(audio) * 4 == sizes["data"]

    # every block the recognizer saw was saved before it was decoded: the last event logged
    # (each is flushed as it happens) lies within the saved audio
    events = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    assert events, "no event was logged before the kill"
    assert max(e["audio_s"] for e in events) <= len(audio) / rate + 1e-6

    # and what was saved is the played clip, sample for sample
    played, _ = sf.read(clip, dtype="float32")
    start = int(np.flatnonzero(audio)[0] - np.flatnonzero(played)[0])
    overlap = min(len(played), len(audio) - start)
    assert start >= 0 and overlap > SINK_RATE  # more than a second of the clip was saved
    assert np.array_equal(audio[start : start + overlap], played[:overlap])

    soxi = subprocess.run(["soxi", str(saved)], capture_output=True, text=True, check=False)
    assert soxi.returncode == 0 and soxi.stderr == "", soxi.stderr


def test_log_on_a_full_disk_is_one_line_exit_1_and_the_text_is_kept(
    pulse_server: PulseServer, clip: Path
) -> None:
    mic = Capture(["--log", "/dev/full", "--format", "text", "--duration", "8"], pulse_server.env)
    mic.wait_listening()
    player = pulse_server.play(clip)
    code = mic.finish()
    player.wait(timeout=60)
    err = "".join(mic.err)
    assert code == 1, err
    assert "error: --log /dev/full: cannot write (No space left on device)" in err
    assert "Traceback" not in err
    assert "".join(mic.out).strip(), "the text recognised before the failure was lost"


def test_save_on_a_full_disk_is_one_line_exit_1(
    pulse_server: PulseServer, tmp_path: Path
) -> None:
    link = tmp_path / "session.wav"
    os.symlink("/dev/full", link)
    mic = Capture(["--save", str(link), "--duration", "2"], pulse_server.env)
    code = mic.finish()
    err = "".join(mic.err)
    assert code == 1, err
    assert f"error: --save {link}: cannot write the audio (No space left on device)" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
