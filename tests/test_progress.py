"""The progress bar of `streamasr file` when data goes to a file or pipe.

The CLI runs in a fresh process with stdout on a pipe and stderr on a real pseudo-terminal,
as when a user types `streamasr file talk.wav --format text > talk.txt`; then again with
stderr on a pipe, where nothing extra may appear. The figures come from ProgressTracker,
checked with an injected clock.
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from streamasr.output.progress import ProgressTracker

REPO = Path(__file__).resolve().parent.parent
SAMPLES = REPO / "models" / "tiny-en" / "test_wavs"


def cli_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_TERMINAL", "NO_COLOR")}
    env.update(TERM="xterm-256color", COLUMNS="120", LINES="24")
    return env


def run_with_stderr_on_a_terminal(args: list[str], stdin: bytes | None = None):
    """(exit code, stdout bytes, what the terminal received) with stderr on a pty."""
    master, slave = os.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "streamasr.cli", *args],
        stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=slave,
        env=cli_env(),
    )
    os.close(slave)
    if stdin is not None:
        assert process.stdin is not None
        process.stdin.write(stdin)
        process.stdin.close()
    terminal = bytearray()
    stdout = bytearray()
    assert process.stdout is not None
    streams = {master: terminal, process.stdout.fileno(): stdout}
    while streams:
        ready, _, _ = select.select(list(streams), [], [], 120)
        assert ready, "the CLI stopped producing output"
        for fd in ready:
            try:
                data = os.read(fd, 65536)
            except OSError:  # EIO: the pty's other side is closed
                data = b""
            if data:
                streams[fd].extend(data)
            else:
                del streams[fd]
    os.close(master)
    return process.wait(timeout=60), bytes(stdout), bytes(terminal).decode("utf-8", "replace")


def run_piped(args: list[str], stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "streamasr.cli", *args],
        input=stdin,
        capture_output=True,
        env=cli_env(),
        timeout=120,
    )


@pytest.fixture(scope="module")
def long_wav(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bundled samples one after another: a file long enough for several redraws."""
    parts = [sf.read(SAMPLES / f"{n}.wav", dtype="float32")[0] for n in range(5)]
    path = tmp_path_factory.mktemp("progress") / "long.wav"
    sf.write(path, np.concatenate(parts), 16000, subtype="PCM_16")
    return path


@pytest.mark.parametrize("fmt", ["text", "jsonl", "srt"])
def test_the_bar_shows_on_a_terminal_and_stdout_is_identical_without_one(
    long_wav: Path, fmt: str
) -> None:
    args = ["file", str(long_wav), "--format", fmt]
    code, stdout, terminal = run_with_stderr_on_a_terminal(args)
    assert code == 0, terminal
    duration = sf.info(str(long_wav)).duration
    assert f"/{duration:.1f} s" in terminal  # position / duration
    assert "x real time" in terminal and "ETA" in terminal
    assert "━" in terminal  # the bar itself
    if fmt != "jsonl":  # the summary line stays after the bar (JSONL carries its own)
        assert "long.wav: " in terminal and "RTF" in terminal

    piped = run_piped(args)
    assert piped.returncode == 0
    err = piped.stderr.decode()
    assert "real time" not in err and "ETA" not in err and "\x1b[" not in err
    if fmt == "jsonl":  # wall_s differs from run to run; everything else must not
        def strip(data: bytes) -> list[dict]:
            import json

            records = [json.loads(line) for line in data.decode().splitlines()]
            for record in records:
                for key in ("wall_s", "wall_latency_s", "compute_s", "rtf",
                            "first_token_wall_latency_s"):
                    record.pop(key, None)
            return records

        assert strip(stdout) == strip(piped.stdout) and stdout
    else:
        assert stdout == piped.stdout and stdout.strip()


@pytest.mark.parametrize("fmt", ["text", "srt"])
def test_quiet_leaves_the_terminal_empty_and_stdout_the_same(long_wav: Path, fmt: str) -> None:
    """--quiet: no bar and no summary line on the terminal; the captions are unchanged."""
    args = ["file", str(long_wav), "--format", fmt]
    code, stdout, terminal = run_with_stderr_on_a_terminal([*args, "--quiet"])
    assert code == 0
    assert terminal == ""
    loud = run_piped(args)
    assert "RTF" in loud.stderr.decode()  # what --quiet leaves out
    assert stdout == loud.stdout and stdout.strip()


def test_the_bar_shows_the_current_partial_when_it_fits(long_wav: Path) -> None:
    _, stdout, terminal = run_with_stderr_on_a_terminal(
        ["file", str(long_wav), "--format", "text", "--realtime"]
    )
    first_words = stdout.decode().split()[:2]
    assert first_words and " ".join(first_words) in terminal


def test_stdin_has_no_known_length_so_the_bar_shows_the_position_only(long_wav: Path) -> None:
    audio = long_wav.read_bytes()
    code, stdout, terminal = run_with_stderr_on_a_terminal(
        ["file", "-", "--format", "text"], stdin=audio
    )
    assert code == 0, terminal
    assert "x real time" in terminal and "ETA" not in terminal
    assert f"/{sf.info(str(long_wav)).duration:.1f} s" not in terminal
    assert stdout == run_piped(["file", "-", "--format", "text"], stdin=audio).stdout


def test_no_bar_when_stdout_is_the_terminal_too(long_wav: Path) -> None:
    """Text lines on the same terminal as a redrawn bar would be torn apart: no bar then."""
    master, slave = os.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "streamasr.cli", "file", str(long_wav), "--format", "text"],
        stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, env=cli_env(),
    )
    os.close(slave)
    seen = bytearray()
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:
            break
        if not data:
            break
        seen.extend(data)
    os.close(master)
    assert process.wait(timeout=60) == 0
    text = seen.decode("utf-8", "replace")
    assert "RTF" in text and "x real time" not in text


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_speed_and_eta_follow_the_audio_fed_per_wall_second() -> None:
    clock = FakeClock()
    tracker = ProgressTracker(600.0, clock)
    clock.now += 10
    tracker.advance(150.0)
    reading = tracker.reading()
    assert reading.speed_x == pytest.approx(15.0)
    assert reading.eta_s == pytest.approx(30.0)  # 450 s of audio left at 15x
    assert reading.fraction == pytest.approx(0.25)


def test_unknown_length_gives_speed_but_no_eta_and_no_fraction() -> None:
    clock = FakeClock()
    tracker = ProgressTracker(None, clock)
    clock.now += 2
    tracker.advance(8.0)
    reading = tracker.reading()
    assert reading.speed_x == pytest.approx(4.0)
    assert reading.eta_s is None and reading.fraction is None


def test_before_any_time_passes_there_is_no_speed() -> None:
    reading = ProgressTracker(10.0, FakeClock()).reading()
    assert reading.speed_x is None and reading.eta_s is None and reading.fraction == 0


def test_redraws_are_limited_to_four_a_second() -> None:
    clock = FakeClock()
    tracker = ProgressTracker(10.0, clock)
    draws = 0
    for _ in range(100):  # 100 blocks over 1 s of wall time
        clock.now += 0.01
        draws += tracker.due()
    assert draws == 4


def test_the_partial_is_kept_until_a_final_clears_it() -> None:
    tracker = ProgressTracker(10.0, FakeClock())
    tracker.partial("HELLO")
    assert tracker.reading().partial == "HELLO"
    tracker.partial("")
    assert tracker.reading().partial == ""
