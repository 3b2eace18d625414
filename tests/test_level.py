"""The input level meter of `streamasr mic`: values from known signals, the no-signal timer
on an injected clock, and the end-of-session verdict through the capture loop (injected
PortAudio stream, real recognizer) and through a real PortAudio device (private PulseAudio).
"""

from __future__ import annotations

import io
import math
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import require_tool
from pulse_fixture import PulseServer, pulse_server
from rich.console import Console
from test_mic import HEADSET, factory

from streamasr.audio.level import FULL_SCALE, LevelMeter, LevelOptions, dbfs, peak_dbfs
from streamasr.backends.base import EngineOptions
from streamasr.backends.sherpa.engine import SherpaRecognizer
from streamasr.backends.sherpa.modeldir import resolve_model
from streamasr.commands.mic import terminal_output
from streamasr.devices.live import run_capture
from streamasr.devices.mic import MicSource
from streamasr.output.render import JsonlRenderer, LiveRenderer
from streamasr.output.render_bars import meter_text
from streamasr.session.events import Partial, StreamSummary
from streamasr.session.stream import StreamOptions

__all__ = ["pulse_server"]  # the fixture, imported for pytest

RATE = 48000


def sine(amplitude: float, seconds: float = 0.5, freq: float = 997.0) -> np.ndarray:
    t = np.arange(round(seconds * RATE)) / RATE
    return (amplitude * np.sin(2 * np.pi * freq * t)).astype(np.float32)


class FakeClock:
    def __init__(self) -> None:
        self.now = 50.0

    def __call__(self) -> float:
        return self.now


# ---- levels of known signals ----------------------------------------------------------


@pytest.mark.parametrize("amplitude", [1.0, 0.5, 0.1, 0.001])
def test_a_sine_reads_its_rms_level_and_its_peak(amplitude: float) -> None:
    wave = sine(amplitude)
    # RMS of a sine is amplitude / sqrt(2): a full-scale sine is -3.01 dBFS
    assert dbfs(wave) == pytest.approx(20 * math.log10(amplitude) - 3.0103, abs=0.01)
    assert peak_dbfs(wave) == pytest.approx(20 * math.log10(amplitude), abs=0.01)


def test_digital_silence_is_minus_infinity_and_below_any_floor() -> None:
    silence = np.zeros(RATE, np.float32)
    assert dbfs(silence) == -math.inf and peak_dbfs(silence) == -math.inf
    assert dbfs(np.zeros(0, np.float32)) == -math.inf
    reading = LevelMeter(RATE, clock=FakeClock()).update(silence)
    assert reading.level_dbfs == -math.inf and not reading.clipping


def test_a_clipped_signal_is_flagged_and_a_loud_clean_one_is_not() -> None:
    clean = sine(0.99)
    clipped = np.clip(sine(2.0), -1.0, 1.0)
    meter = LevelMeter(RATE, clock=FakeClock())
    assert not meter.update(clean).clipping
    assert meter.update(clipped).clipping
    totals = meter.totals()
    assert totals.clipped and totals.clipped_blocks == 1
    # a 2x sine clipped at full scale spends two thirds of its time there
    assert totals.clipped_samples == pytest.approx(len(clipped) * 2 / 3, rel=0.02)
    assert np.count_nonzero(np.abs(clean) >= FULL_SCALE) == 0


def test_the_peak_is_held_then_follows_the_signal_again() -> None:
    clock = FakeClock()
    meter = LevelMeter(RATE, LevelOptions(peak_hold_s=1.5), clock)
    assert meter.update(sine(0.5)).peak_hold_dbfs == pytest.approx(-6.02, abs=0.01)
    clock.now += 1.0
    quiet = meter.update(sine(0.01))
    assert quiet.peak_dbfs == pytest.approx(-40, abs=0.01)
    assert quiet.peak_hold_dbfs == pytest.approx(-6.02, abs=0.01)  # still held
    clock.now += 0.6
    assert meter.update(sine(0.01)).peak_hold_dbfs == pytest.approx(-40, abs=0.01)


# ---- the no-signal timer --------------------------------------------------------------


def test_no_signal_is_reported_after_the_set_time_below_the_floor() -> None:
    clock = FakeClock()
    meter = LevelMeter(RATE, LevelOptions(floor_dbfs=-60, no_signal_s=3.0), clock)
    assert not meter.update(sine(0.1)).no_signal
    whisper = sine(0.0005)  # -69 dBFS: below the floor, but not digital silence
    clock.now += 1.0
    reading = meter.update(whisper)
    assert reading.silent_for_s == pytest.approx(1.0) and not reading.no_signal
    clock.now += 1.9
    assert not meter.update(whisper).no_signal
    clock.now += 0.1
    reading = meter.update(whisper)
    assert reading.no_signal and reading.silent_for_s == pytest.approx(3.0)
    clock.now += 0.5
    reading = meter.update(sine(0.1))  # a voice: the timer starts again
    assert not reading.no_signal and reading.silent_for_s == 0


def test_a_capture_that_starts_silent_counts_from_its_start() -> None:
    clock = FakeClock()
    meter = LevelMeter(RATE, LevelOptions(no_signal_s=2.0), clock)
    clock.now += 2.5
    assert meter.update(np.zeros(4800, np.float32)).no_signal


def test_the_clipping_warning_stays_up_for_the_hold_time() -> None:
    clock = FakeClock()
    meter = LevelMeter(RATE, LevelOptions(clip_hold_s=2.0), clock)
    assert meter.update(np.ones(480, np.float32)).clipping
    clock.now += 1.9
    assert meter.update(sine(0.1)).clipping
    clock.now += 0.2
    assert not meter.update(sine(0.1)).clipping


def test_totals_say_silent_only_when_every_block_stayed_below_the_floor() -> None:
    meter = LevelMeter(RATE, clock=FakeClock())
    assert not meter.totals().silent  # nothing captured is not "silent"
    meter.update(np.zeros(4800, np.float32))
    meter.update(sine(0.0005))
    assert meter.totals().silent and meter.totals().audio_s == pytest.approx(0.6)
    meter.update(sine(0.1))
    assert not meter.totals().silent


# ---- what the live display draws ------------------------------------------------------


def test_the_meter_line_shows_level_peak_and_warnings() -> None:
    clock = FakeClock()
    meter = LevelMeter(RATE, LevelOptions(no_signal_s=3.0), clock)
    loud = meter_text(meter.update(sine(0.5))).plain
    assert "-9.0 dBFS" in loud and "peak  -6.0" in loud and "CLIPPING" not in loud
    # on a 30-cell scale from -60 to 0 dBFS: -9.03 fills 25 cells, the -6.02 peak marks the 27th
    assert loud.count("█") == 25 and loud.index("│") == len("input ") + 26
    clipped = meter_text(meter.update(np.ones(4800, np.float32))).plain
    assert "CLIPPING" in clipped
    clock.now += 5
    silent = meter_text(meter.update(np.zeros(4800, np.float32))).plain
    assert "-inf dBFS" in silent and "no signal for 5 s" in silent and "█" not in silent


def test_the_live_view_draws_the_meter_under_the_partial() -> None:
    screen = io.StringIO()
    console = Console(file=screen, force_terminal=True, width=100)
    renderer = LiveRenderer(console, Console(file=io.StringIO()), realtime=True)
    renderer.begin("mic")
    renderer.event(Partial(seq=1, audio_s=0.5, wall_s=0.5, segment=0, text="HELLO THERE"))
    renderer.level(LevelMeter(RATE, clock=FakeClock()).update(sine(0.1)))
    renderer.end(StreamSummary("mic", 0.5, 0.01, 0.5, ""))
    last_frame = screen.getvalue().rsplit("HELLO THERE", 1)[1]
    assert "input " in last_frame and "-23.0 dBFS" in last_frame


# ---- the end-of-session verdict through the capture loop ------------------------------


@pytest.fixture(scope="module")
def recognizer() -> SherpaRecognizer:
    return SherpaRecognizer(resolve_model("tiny-en", None), EngineOptions())


def capture(recognizer: SherpaRecognizer, audio: np.ndarray, seconds: float) -> None:
    source = MicSource(HEADSET, recognizer.chunk_s, stream_factory=factory(audio))
    output = terminal_output(JsonlRenderer(io.StringIO()), None)
    options = StreamOptions(paced=True)  # as `streamasr mic` sets it: audio arrives live
    run_capture(source, recognizer, options, output, None, seconds)


def test_a_silent_capture_is_called_silent_at_the_end(
    recognizer: SherpaRecognizer, capsys: pytest.CaptureFixture[str]
) -> None:
    capture(recognizer, np.zeros((RATE * 4, 2), np.float32), 3.5)
    err = capsys.readouterr().err
    assert "the whole capture was silent (digital silence" in err
    assert "no signal for 3 s" in err  # said when it started, outside the live view
    assert "clipped" not in err


def test_a_clipping_capture_is_called_clipped_at_the_end(
    recognizer: SherpaRecognizer, capsys: pytest.CaptureFixture[str]
) -> None:
    loud = np.clip(sine(3.0, seconds=2.0), -1, 1)
    capture(recognizer, np.stack([loud, loud], axis=1), 1.5)
    err = capsys.readouterr().err
    assert "the capture clipped:" in err and "lower the input gain" in err
    assert "silent" not in err and "no signal" not in err


def test_a_normal_capture_gets_no_verdict(
    recognizer: SherpaRecognizer, capsys: pytest.CaptureFixture[str]
) -> None:
    voice = sine(0.2, seconds=2.0)
    capture(recognizer, np.stack([voice, voice], axis=1), 1.5)
    err = capsys.readouterr().err
    assert "capture:" in err
    assert "silent" not in err and "clipped" not in err and "no signal" not in err


# ---- and through a real PortAudio device ----------------------------------------------


def test_a_real_device_hearing_nothing_is_called_silent(
    pulse_server: PulseServer, tmp_path: Path
) -> None:
    """Nothing plays into the private server's sink: its monitor is digital silence."""
    run = subprocess.run(
        [sys.executable, "-m", "streamasr.cli", "mic", "--device", "pulse", "--model",
         "tiny-en", "--duration", "1", "--format", "text"],
        env=pulse_server.env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    assert "the whole capture was silent (digital silence" in run.stderr
    assert "Traceback" not in run.stderr


def test_the_live_view_on_a_real_terminal_keeps_the_meter_whole_below_messages(
    pulse_server: PulseServer, speech_22k: Path, tmp_path: Path
) -> None:
    """Run `streamasr mic` in tmux while speech plays; read the screen as a user sees it.

    Messages (first-token lines) are printed while the meter is drawn: every screen must show
    them on lines of their own, with the meter only as the bottom line; at the end the meter
    is gone and the summary stays.
    """
    require_tool("tmux")
    clip = tmp_path / "speech-44k.wav"
    subprocess.run(
        ["sox", str(speech_22k), "-D", "-r", "44100", "-b", "16", "-c", "1", str(clip)],
        check=True,
    )
    pulse_vars = {k: v for k, v in pulse_server.env.items() if k.startswith(("PULSE_", "XDG_"))}
    command = shlex.join(
        ["env", *(f"{k}={v}" for k, v in pulse_vars.items()), sys.executable, "-m",
         "streamasr.cli", "mic", "--device", "pulse", "--model", "tiny-en", "--duration", "8"]
    ) + "; sleep 60"
    tmux = ["tmux", "-L", f"streamasr-test-{os.getpid()}"]  # a private tmux server
    subprocess.run([*tmux, "new-session", "-d", "-x", "100", "-y", "30", command], check=True)

    def screen() -> list[str]:
        shown = subprocess.run([*tmux, "capture-pane", "-p"], capture_output=True, text=True)
        return [line for line in shown.stdout.splitlines() if line.strip()]

    try:
        deadline = time.monotonic() + 60
        while not any("listening:" in line for line in screen()):
            assert time.monotonic() < deadline, "\n".join(screen())
            time.sleep(0.2)
        player = pulse_server.play(clip)
        screens: list[list[str]] = []
        while True:
            screens.append(screen())
            if any(line.startswith("capture:") for line in screens[-1]):
                break
            assert time.monotonic() < deadline + 60, "\n".join(screens[-1])
            time.sleep(0.2)
        assert player.wait(timeout=30) == 0
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True)
    live = [s for s in screens if any(line.startswith("utterance 1:") for line in s)]
    assert any(s[-1].startswith("input ") for s in live), "the meter was never drawn"
    for shown in screens[:-1]:
        meters = [i for i, line in enumerate(shown) if "dBFS" in line]
        assert meters in ([], [len(shown) - 1]), "\n".join(shown)
        assert shown[-1].startswith("input ") or not meters
    final = screens[-1]
    assert not any("dBFS" in line for line in final), "\n".join(final)
    assert any("first token p50" in line for line in final)


def test_one_full_scale_sample_is_a_transient_and_a_run_of_them_clips() -> None:
    """A lone full-scale sample (a click, a plosive) is not clipping; three in a row are."""
    meter = LevelMeter(RATE)
    block = sine(0.3, seconds=0.3)
    block[100] = 1.0
    assert not meter.update(block).clipping
    assert not meter.totals().clipped
    run = sine(0.3, seconds=0.3)
    run[200:203] = -1.0
    assert meter.update(run).clipping
    totals = meter.totals()
    assert totals.clipped and totals.clipped_blocks == 1 and totals.clipped_samples == 3
