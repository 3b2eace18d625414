"""`streamasr mic` through real PortAudio: a private PulseAudio null sink is the microphone.

A clip is played into the sink with `paplay`; `streamasr mic` records the sink's monitor via
PortAudio's ALSA "pulse" device. The capture path is the one a user's microphone takes, down
to the PortAudio callback thread.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO

import jiwer
import numpy as np
import pytest
import soundfile as sf
from pulse_fixture import SINK_RATE, PulseServer, pulse_server, start_pulse, stop_pulse

REPO = Path(__file__).resolve().parent.parent
MODEL = "tiny-en"  # the trained model: transcripts are words, so they can be compared

__all__ = ["pulse_server"]  # the fixture, imported for pytest

# the command as the `streamasr` script runs it (cli.run: the stop-signal handling included)
RUNNER = ["-m", "streamasr"]


class Cli:
    """A `streamasr` subprocess whose stderr is read as it comes (to see 'listening:')."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        self.process = subprocess.Popen(
            [sys.executable, *RUNNER, *args],
            env=env,
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.stderr_lines: list[str] = []
        self.stdout_lines: list[str] = []
        self.listening = threading.Event()
        self._readers = [
            threading.Thread(target=self._read, args=(self.process.stderr, True), daemon=True),
            threading.Thread(target=self._read, args=(self.process.stdout, False), daemon=True),
        ]
        for reader in self._readers:
            reader.start()

    def _read(self, stream: IO[str], is_stderr: bool) -> None:
        for line in stream:
            if is_stderr:
                self.stderr_lines.append(line)
                if line.startswith("listening:"):
                    self.listening.set()
            else:
                self.stdout_lines.append(line)

    def wait_listening(self, timeout: float = 60) -> None:
        """Audio is flowing from the device (the first block arrived).

        ALSA's pulse plugin hands over its first block before the server has delivered any
        audio (it is silence), so wait one more block before playing anything.
        """
        if not self.listening.wait(timeout):
            self.process.kill()
            pytest.fail("mic never started listening:\n" + self.stderr)
        time.sleep(0.6)

    def finish(self, timeout: float = 60) -> tuple[int, str]:
        """Exit code and stdout, once the process has ended."""
        try:
            code = self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            pytest.fail("mic did not exit:\n" + self.stderr)
        for reader in self._readers:
            reader.join(timeout=10)
        return code, "".join(self.stdout_lines)

    @property
    def stderr(self) -> str:
        return "".join(self.stderr_lines)


def run(args: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *RUNNER, *args],
        env=env or dict(os.environ),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture(scope="module")
def clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A bundled sample the model gets right (3.wav), as 16-bit mono at the sink's rate.

    Undithered (-D), so its leading silence is digital zero and marks where the clip starts.
    A clip the model transcribes well: on one it half-knows, the few samples of resampling
    and capture change many words, which would hide what this file tests.
    """
    sample = Path(__file__).resolve().parent.parent / "models" / "tiny-en" / "test_wavs" / "3.wav"
    path = tmp_path_factory.mktemp("speech") / "speech-mic.wav"
    subprocess.run(
        ["sox", str(sample), "-D", "-r", str(SINK_RATE), "-b", "16", "-c", "1", str(path)],
        check=True,
    )
    return path


def jsonl(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def file_text(path: Path) -> str:
    result = run(["file", str(path), "--model", MODEL, "--format", "jsonl"])
    assert result.returncode == 0, result.stderr
    return jsonl(result.stdout)[-1]["text"]


def lines_joined(out: str) -> str:
    """Text-format stdout (one final per line) as the summary joins finals."""
    return " ".join(line for line in out.splitlines() if line.strip())


def played_through(mic: Cli, pulse_server: PulseServer, clip: Path) -> list[dict]:
    """The clip played into the listening capture; its JSONL records once it ended (exit 0,
    a summary with text last)."""
    mic.wait_listening()
    player = pulse_server.play(clip)
    assert player.wait(timeout=60) == 0
    code, out = mic.finish()
    assert code == 0, mic.stderr
    records = jsonl(out)
    assert records[-1]["type"] == "summary" and records[-1]["text"], records[-1:]
    return records


def offset_of(clip: np.ndarray, capture: np.ndarray) -> int:
    """Where the clip starts in the capture (both start with digital silence)."""
    return int(np.flatnonzero(capture)[0] - np.flatnonzero(clip)[0])


def test_devices_lists_the_pulse_devices_with_the_default_marked(
    pulse_server: PulseServer,
) -> None:
    result = run(["devices"], pulse_server.env)
    assert result.returncode == 0, result.stderr
    rows = result.stdout.splitlines()
    assert "index" in rows[0] and "rate" in rows[0]
    pulse = next(r for r in rows if " pulse " in r)
    assert "ALSA" in pulse and str(SINK_RATE) in pulse
    assert any(r.startswith("*") for r in rows[1:])


def test_unknown_and_ambiguous_device_names_list_the_candidates(
    pulse_server: PulseServer,
) -> None:
    ambiguous = run(["mic", "--device", "L", "--model", MODEL, "--duration", "1"], pulse_server.env)
    assert ambiguous.returncode == 1
    assert "matches" in ambiguous.stderr and "pulse" in ambiguous.stderr
    assert "default" in ambiguous.stderr and "Traceback" not in ambiguous.stderr
    unknown = run(["mic", "--device", "focusrite", "--model", MODEL], pulse_server.env)
    assert unknown.returncode == 1 and "no input device name contains" in unknown.stderr
    assert "pulse" in unknown.stderr


def test_quiet_mic_says_warnings_only(pulse_server: PulseServer) -> None:
    """--quiet: no "listening", no summary, no end report; a warning (the sink is silent)
    is still said."""
    args = ["mic", "--model", MODEL, "--duration", "1", "--format", "text"]
    loud = run(args, pulse_server.env)
    quiet = run([*args, "--quiet"], pulse_server.env)
    assert loud.returncode == 0 and quiet.returncode == 0, quiet.stderr
    assert "listening:" in loud.stderr and "RTF" in loud.stderr and "capture:" in loud.stderr
    assert "the whole capture was silent" in loud.stderr
    said = quiet.stderr.splitlines()
    assert said and all(line.startswith("the whole capture was silent") for line in said), said


def test_an_unknown_device_is_said_before_the_model_loads(
    pulse_server: PulseServer, tmp_path: Path
) -> None:
    """The model folder here cannot load; the device is checked first, so its error is the
    one reported."""
    broken = tmp_path / "broken-model"
    broken.mkdir()
    (broken / "tokens.txt").write_text("<blk> 0\n", encoding="utf-8")
    result = run(["mic", "--device", "no-such-device", "--model", str(broken)], pulse_server.env)
    assert result.returncode == 1
    assert result.stderr.startswith("error: no input device name contains 'no-such-device'")
    assert "pulse" in result.stderr  # the devices there are
    assert "broken-model" not in result.stderr and "Traceback" not in result.stderr


def test_mic_transcript_equals_file_transcript_and_save_reproduces_the_audio(
    pulse_server: PulseServer, clip: Path, tmp_path: Path
) -> None:
    played, rate = sf.read(clip, dtype="float32")
    duration = round(len(played) / rate + 2.0, 2)
    saved_path, log_path = tmp_path / "session.wav", tmp_path / "session.jsonl"
    mic = Cli(
        [
            "mic",
            "--device",
            "pulse",
            "--model",
            MODEL,
            "--duration",
            str(duration),
            "--save",
            str(saved_path),
            "--log",
            str(log_path),
            "--format",
            "jsonl",
        ],
        pulse_server.env,
    )
    records = played_through(mic, pulse_server, clip)
    summary = records[-1]

    # --log carries the very events (and timestamps) that went to stdout
    assert jsonl(log_path.read_text()) == records

    # --save reproduces the audio: the played clip sits in the capture sample for sample
    saved, saved_rate = sf.read(saved_path, dtype="float32")
    assert saved_rate == rate and len(saved) == round(duration * rate)
    start = offset_of(played, saved)
    assert 0 <= start and start + len(played) <= len(saved)
    assert np.array_equal(saved[start : start + len(played)], played), mic.stderr

    # replaying the saved capture through `file` gives exactly the live transcript
    assert file_text(saved_path) == summary["text"]
    # and, apart from the silence around it, what the original clip gives
    assert jiwer.wer(file_text(clip), summary["text"]) <= 0.25

    # timestamps advance at wall-clock speed: no event is stamped before its audio was
    # captured, the session lasts as long as its audio, and the loop never falls far behind
    events = [r for r in records if r["type"] != "summary"]
    assert events and all(e["wall_s"] >= e["audio_s"] - 1e-6 for e in events)
    assert summary["wall_s"] >= summary["audio_s"] - 1e-6
    assert summary["audio_s"] == pytest.approx(duration, abs=1e-3)
    assert events[-1]["wall_s"] - events[-1]["audio_s"] < 5.0
    assert "first token p50" in mic.stderr and "capture:" in mic.stderr


def test_ctrl_c_flushes_the_last_final_closes_files_and_exits_130(
    pulse_server: PulseServer, clip: Path, tmp_path: Path
) -> None:
    saved_path = tmp_path / "interrupted.wav"
    mic = Cli(
        ["mic", "--model", MODEL, "--save", str(saved_path), "--format", "text"],
        pulse_server.env,
    )
    mic.wait_listening()
    assert pulse_server.play(clip).wait(timeout=60) == 0
    time.sleep(0.5)
    mic.process.send_signal(signal.SIGINT)
    code, out = mic.finish()
    assert code == 130, mic.stderr
    assert out.strip(), "the final of the open utterance was not flushed"
    assert "interrupted" in mic.stderr and "first token p50" in mic.stderr
    assert "Traceback" not in mic.stderr
    assert sf.info(str(saved_path)).duration >= sf.info(str(clip)).duration
    assert file_text(saved_path) == lines_joined(out)


def test_a_vanishing_device_keeps_the_text_closes_files_and_exits_1(
    clip: Path, tmp_path: Path
) -> None:
    server = start_pulse(tmp_path / "pulse")
    try:
        saved_path, log_path = tmp_path / "lost.wav", tmp_path / "lost.jsonl"
        mic = Cli(
            [
                "mic",
                "--model",
                MODEL,
                "--save",
                str(saved_path),
                "--log",
                str(log_path),
                "--format",
                "text",
            ],
            server.env,
        )
        mic.wait_listening()
        server.play(clip)
        time.sleep(2.0)
        stop_pulse(server, signal.SIGKILL)
        code, out = mic.finish()
    finally:
        stop_pulse(server)
    assert code == 1, mic.stderr
    assert "error:" in mic.stderr and "audio" in mic.stderr
    assert "Traceback" not in mic.stderr
    assert out.strip(), "what was recognised before the device went away was lost"
    records = jsonl(log_path.read_text())
    assert records[-1]["type"] == "summary" and records[-1]["text"] == lines_joined(out)
    assert sf.info(str(saved_path)).frames > 0


# ALSA configured to reach PulseAudio and nothing else: no hardware card, no other plugin.
# With it the test sees the same devices on a laptop with microphones as on a bare CI machine.
PULSE_ONLY_ALSA = "pcm.!default { type pulse }\nctl.!default { type pulse }\n"


def test_no_input_device_is_a_clear_message(tmp_path: Path, pulse_server: PulseServer) -> None:
    conf = tmp_path / "asound.conf"
    conf.write_text(PULSE_ONLY_ALSA)
    alive = dict(pulse_server.env, ALSA_CONFIG_PATH=str(conf))
    reachable = run(["devices"], alive)
    assert reachable.returncode == 0, reachable.stderr  # the one route works while served
    env = dict(alive, PULSE_SERVER=f"unix:{tmp_path / 'nothing-here'}")
    env["XDG_RUNTIME_DIR"] = str(tmp_path)
    probe = run(["devices"], env)
    assert probe.returncode == 1
    assert "no audio input device" in probe.stderr and "Traceback" not in probe.stderr
    mic = run(["mic", "--model", MODEL, "--duration", "1"], env)
    assert mic.returncode == 1 and "Plug in a microphone" in mic.stderr


def test_mic_over_a_server_prints_what_its_capture_gives_through_file(
    pulse_server: PulseServer, clip: Path, tmp_path: Path
) -> None:
    """`mic --server`: the live loop (capture, saving, the end report) with the decoding done
    by a real `streamasr serve`; the transcript is what `file` gives for the very capture."""
    from serve_fixture import serve

    played, rate = sf.read(clip, dtype="float32")
    duration = round(len(played) / rate + 2.0, 2)
    saved_path = tmp_path / "remote.wav"
    with serve() as server:
        mic = Cli(
            ["mic", "--device", "pulse", "--server", server.url, "--duration", str(duration),
             "--save", str(saved_path), "--format", "jsonl"],
            pulse_server.env,
        )  # fmt: skip
        records = played_through(mic, pulse_server, clip)
    summary = records[-1]
    finals = [r["text"] for r in records if r["type"] == "final"]
    assert " ".join(finals) == summary["text"]
    # the server decoded the captured samples as `file` decodes them here (file's settings
    # travel with the session: the server's own defaults are the live-caption ones)
    assert file_text(saved_path) == summary["text"]
    assert summary["audio_s"] == pytest.approx(duration, abs=1e-3)
    assert "first token p50" in mic.stderr and "capture:" in mic.stderr


def test_mic_server_refusals_are_one_line_before_any_capture(pulse_server: PulseServer) -> None:
    """No server there: said (exit 1) before the microphone starts; a model option the
    server owns, or a --cafile that is not there: a usage error (exit 2)."""
    unreachable = run(
        ["mic", "--device", "pulse", "--server", "ws://127.0.0.1:9/ws", "--duration", "1"],
        pulse_server.env,
    )
    assert unreachable.returncode == 1, unreachable.stderr
    assert "cannot connect to ws://127.0.0.1:9/ws" in unreachable.stderr
    assert "listening" not in unreachable.stderr and len(unreachable.stderr.splitlines()) == 1
    owned = run(["mic", "--device", "pulse", "--server", "ws://127.0.0.1:9/ws", "--chunk", "32"],
                pulse_server.env)  # fmt: skip
    assert owned.returncode == 2 and "--chunk is the server's setting" in owned.stderr
    missing = "/nonexistent/ca.pem"  # --cafile is checked as file's is, before capture
    untrusting = run(["mic", "--device", "pulse", "--server", "wss://127.0.0.1:9/ws",
                      "--cafile", missing], pulse_server.env)  # fmt: skip
    assert untrusting.returncode == 2, untrusting.stderr
    assert f"--cafile {missing} does not exist" in untrusting.stderr


def test_mic_keeps_its_text_when_the_server_goes_away(
    pulse_server: PulseServer, clip: Path
) -> None:
    """The server killed mid-session: the finals already printed stay, the summary of what
    came is printed, one line says why, exit 1."""
    from serve_fixture import serve

    with serve() as server:
        mic = Cli(
            ["mic", "--device", "pulse", "--server", server.url, "--duration", "60",
             "--format", "jsonl"],
            pulse_server.env,
        )  # fmt: skip
        mic.wait_listening()
        player = pulse_server.play(clip)
        assert player.wait(timeout=60) == 0
        deadline = time.monotonic() + 30
        while not any('"final"' in line for line in mic.stdout_lines):
            assert time.monotonic() < deadline, mic.stderr
            time.sleep(0.2)
        server.process.kill()
        code, out = mic.finish()
    assert code == 1, mic.stderr
    records = jsonl(out)
    finals = [r["text"] for r in records if r["type"] == "final"]
    assert finals and records[-1]["type"] == "summary"
    assert records[-1]["text"] == " ".join(finals)
    assert "the server closed the connection" in mic.stderr
