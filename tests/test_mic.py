"""Capture logic without a sound server: device selection, the callback queue, the live loop.

The PortAudio stream is injected (a thread that calls the callback like PortAudio does); the
recognizer is the real sherpa-onnx one on a bundled model. The real PortAudio path is tested
in test_mic_pulse.py.
"""

from __future__ import annotations

import io
import json
import os
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import soundfile as sf

from streamasr.audio import FileSource
from streamasr.backends.sherpa.engine import SherpaRecognizer
from streamasr.backends.sherpa.modeldir import resolve_model
from streamasr.commands.mic import format_devices, terminal_output
from streamasr.devices.live import first_token_p50_ms, run_capture
from streamasr.devices.mic import MicSource
from streamasr.devices.mic_devices import DeviceInfo, list_input_devices, select_device
from streamasr.devices.wav_writer import AudioWriter
from streamasr.errors import DependencyError, DeviceError, OutputError, UsageError
from streamasr.output.render import JsonlRenderer
from streamasr.session.events import FirstToken
from streamasr.session.stream import StreamOptions, StreamSession

REPO = Path(__file__).resolve().parent.parent

USB = DeviceInfo(3, "USB Audio Device: Mic (hw:1,0)", "ALSA", 1, 48000)
PULSE = DeviceInfo(0, "pulse", "ALSA", 32, 44100)
DEFAULT = DeviceInfo(1, "default", "ALSA", 32, 44100, is_default=True)
HEADSET = DeviceInfo(7, "USB Headset", "ALSA", 2, 48000)
DEVICES = [PULSE, DEFAULT, USB, HEADSET]


# ---- device selection -------------------------------------------------------------------


def test_no_device_given_picks_the_default() -> None:
    assert select_device(DEVICES, None) == DEFAULT


def test_device_by_index_and_by_case_insensitive_substring() -> None:
    assert select_device(DEVICES, "3") == USB
    assert select_device(DEVICES, "mic (hw") == USB
    assert select_device(DEVICES, "HEADSET") == HEADSET


def test_an_exact_name_wins_over_substrings() -> None:
    more = [*DEVICES, DeviceInfo(9, "pulse monitor", "ALSA", 2, 48000)]
    assert select_device(more, "Pulse") == PULSE


def test_ambiguous_name_lists_the_candidates() -> None:
    with pytest.raises(DeviceError) as info:
        select_device(DEVICES, "usb")
    message = str(info.value)
    assert "matches 2" in message
    assert "[3] USB Audio Device" in message and "[7] USB Headset" in message
    assert "[0] pulse" not in message


def test_unknown_name_or_index_lists_every_device() -> None:
    for spec in ("focusrite", "42"):
        with pytest.raises(DeviceError) as info:
            select_device(DEVICES, spec)
        assert all(d.describe() in str(info.value) for d in DEVICES)


def test_no_devices_at_all_says_what_to_plug_in() -> None:
    with pytest.raises(DeviceError, match="no audio input device.*Plug in a microphone"):
        select_device([], None)


def test_without_a_default_the_first_device_is_used() -> None:
    assert select_device([USB, HEADSET], None) == USB


def test_listing_keeps_inputs_and_marks_the_default() -> None:
    fake = SimpleNamespace(
        PortAudioError=RuntimeError,
        default=SimpleNamespace(device=[2, 0]),
        query_hostapis=lambda: [{"name": "ALSA"}],
        query_devices=lambda: [
            {
                "index": 0,
                "name": "speakers",
                "hostapi": 0,
                "max_input_channels": 0,
                "default_samplerate": 48000.0,
            },
            {
                "index": 2,
                "name": "USB mic",
                "hostapi": 0,
                "max_input_channels": 1,
                "default_samplerate": 48000.0,
            },
        ],
    )
    devices = list_input_devices(fake)  # type: ignore[arg-type]
    assert devices == [DeviceInfo(2, "USB mic", "ALSA", 1, 48000, is_default=True)]
    table = format_devices(devices)
    assert "* " in table.splitlines()[1] and "48000" in table


def test_the_device_is_checked_before_the_model_loads(tmp_path: Path) -> None:
    """A fresh `mic` with a model folder that cannot load: the device error (none found, or
    no such name, whichever this machine has) comes first and alone."""
    broken = tmp_path / "broken-model"
    broken.mkdir()
    (broken / "tokens.txt").write_text("<blk> 0\n", encoding="utf-8")
    result = subprocess.run(
        [sys.executable, "-m", "streamasr", "mic", "--device", "no-such-device", "--model",
         str(broken)],
        capture_output=True, text=True, timeout=120, cwd=REPO,
    )  # fmt: skip
    assert result.returncode == 1
    first = result.stderr.splitlines()[0]
    assert first.startswith(
        ("error: no audio input device", "error: no input device name contains 'no-such-device'")
    ), result.stderr
    assert "broken-model" not in result.stderr and "Traceback" not in result.stderr


def test_channel_out_of_range_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="1..2"):
        MicSource(HEADSET, 0.1, channel=3)


# ---- callback and queue -----------------------------------------------------------------


class FakeStream:
    """Calls the callback from its own thread with consecutive blocks, as PortAudio does."""

    def __init__(
        self,
        audio: np.ndarray,
        *,
        callback,
        finished_callback,
        blocksize: int,
        samplerate: int,
        channels: int,
        realtime: bool = False,
        vanish_after: int | None = None,
        flags: dict[int, str] | None = None,
        late_start_blocks: int = 0,
        **_: object,
    ) -> None:
        assert audio.shape[1] == channels
        self.audio = audio
        self.callback = callback
        self.finished = finished_callback
        self.blocksize = blocksize
        self.rate = samplerate
        self.realtime = realtime
        self.vanish_after = vanish_after
        self.flags = flags or {}
        self.late_start_blocks = late_start_blocks
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.opened_with = {"samplerate": samplerate, "channels": channels, "bs": blocksize}

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.stopped.set()
        if self.thread.is_alive() and threading.current_thread() is not self.thread:
            self.thread.join()

    def close(self) -> None:
        self.stop()

    def _run(self) -> None:
        block_s = self.blocksize / self.rate
        time.sleep(self.late_start_blocks * block_s)  # these blocks then come in a burst
        for number, start in enumerate(range(0, len(self.audio), self.blocksize)):
            if self.stopped.is_set():
                return
            if self.vanish_after is not None and number == self.vanish_after:
                self.finished()
                return
            block = self.audio[start : start + self.blocksize]
            if len(block) < self.blocksize:  # PortAudio blocks are always full
                return
            flag = self.flags.get(number, "")
            status = SimpleNamespace(
                input_overflow=flag == "overflow", input_underflow=flag == "underflow"
            )
            self.callback(block, len(block), None, status)
            if self.realtime and number >= self.late_start_blocks:
                time.sleep(block_s)
        self.stopped.wait()  # a live device keeps going until stopped


def factory(audio: np.ndarray, **extra: object):
    made: list[FakeStream] = []

    def make(**kwargs: object) -> FakeStream:
        stream = FakeStream(audio, **extra, **kwargs)  # type: ignore[arg-type]
        made.append(stream)
        return stream

    make.made = made  # type: ignore[attr-defined]
    return make


def stereo(seconds: float, rate: int) -> np.ndarray:
    rng = np.random.default_rng(7)
    return (rng.standard_normal((round(seconds * rate), 2)) * 0.1).astype(np.float32)


def take(source: MicSource, count: int) -> list[np.ndarray]:
    out = []
    for block in source.blocks(stall_timeout_s=5):
        out.append(block.samples)
        if len(out) == count:
            break
    return out


def test_blocks_arrive_in_order_downmixed_at_the_native_rate() -> None:
    audio = stereo(1.0, 48000)
    make = factory(audio)
    source = MicSource(HEADSET, 0.1, stream_factory=make)
    source.start()
    blocks = take(source, 10)
    source.close()
    assert make.made[0].opened_with == {"samplerate": 48000, "channels": 2, "bs": 4800}
    assert np.array_equal(np.concatenate(blocks), audio.mean(axis=1).astype(np.float32))


def test_channel_selection_takes_that_channel_only() -> None:
    audio = stereo(0.5, 48000)
    source = MicSource(HEADSET, 0.1, channel=2, stream_factory=factory(audio))
    source.start()
    blocks = take(source, 5)
    source.close()
    assert np.array_equal(np.concatenate(blocks), audio[:, 1])


def test_virtual_devices_open_two_channels_not_thirty_two() -> None:
    assert MicSource(PULSE, 0.1).channels == 2
    assert MicSource(PULSE, 0.1, channel=5).channels == 5
    assert MicSource(USB, 0.1).channels == 1


def test_overflows_and_underflows_reported_by_portaudio_are_counted() -> None:
    make = factory(stereo(1.0, 48000), flags={2: "overflow", 5: "overflow", 7: "underflow"})
    source = MicSource(HEADSET, 0.1, stream_factory=make)
    source.start()
    take(source, 10)
    stats = source.stats()
    source.close()
    assert (stats.input_overflows, stats.input_underflows) == (2, 1)
    assert stats.blocks == 10 and stats.captured_s == pytest.approx(1.0)


def test_a_slow_consumer_sees_the_backlog_and_a_full_queue_drops_and_counts() -> None:
    source = MicSource(HEADSET, 0.1, max_backlog_s=0.5, stream_factory=factory(stereo(1.0, 48000)))
    source.start()
    deadline = time.monotonic() + 10
    while source.stats().blocks + source.stats().dropped_blocks < 10:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert source.backlog_s == pytest.approx(0.5)
    stats = source.stats()
    assert stats.dropped_blocks == 5 and stats.dropped_s == pytest.approx(0.5)
    assert stats.max_backlog_s == pytest.approx(0.5)
    assert len(take(source, 5)) == 5
    assert source.backlog_s == 0
    source.close()


def test_the_callback_never_waits_for_the_consumer() -> None:
    """Capture keeps its pace while nobody reads: the queue grows, PortAudio is not held."""
    make = factory(stereo(1.0, 48000))
    source = MicSource(HEADSET, 0.05, stream_factory=make)
    source.start()
    deadline = time.monotonic() + 10
    while source.stats().blocks < 20:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert source.backlog_s == pytest.approx(1.0)
    source.close()


def test_a_device_that_goes_away_raises_device_error() -> None:
    source = MicSource(HEADSET, 0.1, stream_factory=factory(stereo(1.0, 48000), vanish_after=3))
    source.start()
    got = []
    with pytest.raises(DeviceError, match="stopped delivering audio"):
        for block in source.blocks():
            got.append(block)
    assert len(got) == 3
    source.close()


def test_a_device_that_stalls_raises_device_error() -> None:
    silent = factory(np.zeros((0, 2), np.float32))
    source = MicSource(HEADSET, 0.05, stream_factory=silent)
    source.start()
    with pytest.raises(DeviceError, match="delivered no audio"):
        next(iter(source.blocks(stall_timeout_s=0.2, first_block_timeout_s=0.3)))
    source.close()


def test_a_stream_that_cannot_open_is_a_device_error() -> None:
    def refuse(**_: object) -> FakeStream:
        raise RuntimeError("Invalid sample rate [PaErrorCode -9997]")

    with pytest.raises(DeviceError, match="cannot open .*Invalid sample rate"):
        MicSource(USB, 0.1, stream_factory=refuse).start()


# ---- the live loop, with the real recognizer ------------------------------------------


@pytest.fixture(scope="module")
def recognizer() -> SherpaRecognizer:
    from streamasr.backends.base import EngineOptions

    return SherpaRecognizer(resolve_model("tiny-random-transducer", None), EngineOptions())


@pytest.fixture(scope="module")
def speech_48k_stereo(speech_22k: Path) -> np.ndarray:
    path = speech_22k.with_name("speech-48k-stereo.wav")
    subprocess.run(
        ["sox", str(speech_22k), "-r", "48000", "-c", "2", "-e", "floating-point", str(path)],
        check=True,
    )
    audio, rate = sf.read(path, dtype="float32", always_2d=True)
    assert rate == 48000
    return audio


def file_transcript(recognizer: SherpaRecognizer, path: Path) -> str:
    source = FileSource(str(path))
    session = StreamSession(recognizer, source.sample_rate, str(path), StreamOptions())
    list(session.run(source.blocks(0.1)))
    return session.summary().text


def live(recognizer, audio, tmp_path, **stream_extra):
    make = factory(audio, **stream_extra)
    source = MicSource(HEADSET, recognizer.chunk_s, stream_factory=make)
    shown = io.StringIO()
    log = open(tmp_path / "log.jsonl", "w")  # noqa: SIM115 - SessionOutput closes it
    output = terminal_output(JsonlRenderer(shown), log)
    writer = AudioWriter(str(tmp_path / "saved.wav"), source.sample_rate)
    return source, output, writer, shown


def test_a_48k_session_transcribes_like_the_file_and_saves_what_it_fed(
    recognizer: SherpaRecognizer, speech_48k_stereo: np.ndarray, tmp_path: Path
) -> None:
    source, output, writer, shown = live(recognizer, speech_48k_stereo, tmp_path)
    duration = 2.5
    summary = run_capture(source, recognizer, StreamOptions(), output, writer, duration)
    assert summary is not None and summary.text
    saved, rate = sf.read(tmp_path / "saved.wav", dtype="float32")
    assert rate == 48000 and len(saved) == round(duration * 48000)
    assert np.array_equal(saved, speech_48k_stereo[: len(saved)].mean(axis=1).astype(np.float32))
    assert file_transcript(recognizer, tmp_path / "saved.wav") == summary.text
    log_lines = (tmp_path / "log.jsonl").read_text().splitlines()
    assert log_lines == shown.getvalue().splitlines()
    assert json.loads(log_lines[-1])["type"] == "summary"


def test_wall_time_starts_when_the_first_sample_was_captured(
    recognizer: SherpaRecognizer, speech_48k_stereo: np.ndarray, tmp_path: Path
) -> None:
    """Fed at real-time pace, events can never be stamped earlier than their audio.

    The first blocks come late and then in a burst (a sound server starting up): the clock
    must move its zero back to the earliest instant the audio can have been captured.
    """
    source, output, writer, shown = live(
        recognizer, speech_48k_stereo, tmp_path, realtime=True, late_start_blocks=3
    )
    run_capture(source, recognizer, StreamOptions(), output, writer, 2.0)
    events = [json.loads(x) for x in shown.getvalue().splitlines()][:-1]
    assert events
    for event in events:
        assert event["wall_s"] >= event["audio_s"] - 1e-6
    assert events[-1]["wall_s"] >= 2.0


def test_device_lost_mid_stream_keeps_what_was_recognised_and_closes_files(
    recognizer: SherpaRecognizer, speech_48k_stereo: np.ndarray, tmp_path: Path
) -> None:
    source, output, writer, shown = live(recognizer, speech_48k_stereo, tmp_path, vanish_after=8)
    with pytest.raises(DeviceError):
        run_capture(source, recognizer, StreamOptions(), output, writer, None)
    records = [json.loads(x) for x in shown.getvalue().splitlines()]
    assert any(r["type"] == "final" for r in records) and records[-1]["type"] == "summary"
    assert records[-1]["audio_s"] == pytest.approx(8 * recognizer.chunk_s)
    assert output.log_file is not None and output.log_file.closed
    assert sf.info(str(tmp_path / "saved.wav")).frames == round(8 * recognizer.chunk_s * 48000)


def test_first_token_p50_is_the_median_of_wall_latencies() -> None:
    def ft(ms: float) -> FirstToken:
        return FirstToken(1, 0.0, 0.0, 0, "a", 0.0, 0.0, ms / 1000)

    assert first_token_p50_ms([]) is None
    assert first_token_p50_ms([ft(300), ft(500), ft(100)]) == pytest.approx(300)


# ---- the saved file survives a crash ----------------------------------------------------


def test_saved_audio_survives_a_crash_up_to_the_last_block(tmp_path: Path) -> None:
    path = tmp_path / "crash.wav"
    code = (
        "import os, numpy as np\n"
        "from streamasr.devices.wav_writer import AudioWriter\n"
        f"w = AudioWriter({str(path)!r}, 48000)\n"
        "for i in range(5):\n"
        "    w.write(np.full(4800, i / 10, dtype=np.float32))\n"
        "os._exit(9)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=False, cwd=REPO)
    audio, rate = sf.read(path, dtype="float32")
    assert rate == 48000 and len(audio) == 5 * 4800
    assert audio[-1] == pytest.approx(0.4)


def test_save_to_an_unwritable_place_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="--save"):
        AudioWriter(str(tmp_path / "missing" / "x.wav"), 48000)


def wav_sizes(path: Path) -> dict[str, int]:
    """RIFF size, chunk sizes and the fmt fields of a WAV file, read straight from the bytes."""
    data = path.read_bytes()
    sizes = {"file": len(data), "riff": struct.unpack("<I", data[4:8])[0]}
    at = 12
    while at + 8 <= len(data):
        chunk, size = data[at : at + 4].decode(), struct.unpack("<I", data[at + 4 : at + 8])[0]
        sizes[chunk] = size
        if chunk == "fmt ":
            sizes["format_tag"], sizes["bits"] = struct.unpack("<H", data[at + 8 : at + 10])[0], (
                struct.unpack("<H", data[at + 22 : at + 24])[0]
            )
            sizes["cb_size"] = struct.unpack("<H", data[at + 24 : at + 26])[0]
        if chunk == "fact":
            sizes["fact_frames"] = struct.unpack("<I", data[at + 8 : at + 12])[0]
        if chunk == "data":
            sizes["data_at"] = at + 8
            break
        at += 8 + size + (size & 1)
    return sizes


def test_every_block_leaves_a_complete_float_wav_on_disk(tmp_path: Path) -> None:
    path = tmp_path / "blocks.wav"
    writer = AudioWriter(str(path), 44100)
    for number in range(1, 4):
        writer.write(np.full(441 * number, number / 10, dtype=np.float32))
        sizes = wav_sizes(path)  # read while the writer is still open, as after a crash
        frames = 441 * sum(range(1, number + 1))
        assert sizes["data"] == frames * 4 == sizes["file"] - sizes["data_at"]
        assert sizes["fact_frames"] == frames and sizes["riff"] == sizes["file"] - 8
        assert (sizes["format_tag"], sizes["bits"], sizes["fmt "], sizes["cb_size"]) == (
            3, 32, 18, 0
        )
    writer.close()
    audio, rate = sf.read(path, dtype="float32")
    assert rate == 44100 and len(audio) == 441 * 6 and audio[-1] == pytest.approx(0.3)
    soxi = subprocess.run(["soxi", str(path)], capture_output=True, text=True, check=False)
    assert soxi.returncode == 0 and soxi.stderr == "", soxi.stderr  # no header warnings
    assert "32-bit Floating Point" in soxi.stdout


def test_a_full_disk_under_save_is_one_output_error_and_the_file_keeps_what_was_written(
    tmp_path: Path,
) -> None:
    path = tmp_path / "full.wav"
    writer = AudioWriter(str(path), 16000)
    writer.write(np.full(1600, 0.25, dtype=np.float32))
    # the disk fills up: the writer's own descriptor now points at /dev/full (ENOSPC)
    full = os.open("/dev/full", os.O_WRONLY)
    try:
        os.dup2(full, writer._wav.fileno())  # noqa: SLF001 - swap the real file for a full one
    finally:
        os.close(full)
    with pytest.raises(OutputError, match=r"--save .*No space left on device.*kept"):
        writer.write(np.full(1600, 0.5, dtype=np.float32))
    writer.write(np.full(1600, 0.75, dtype=np.float32))  # quiet once broken
    writer.close()
    assert writer.frames == 1600
    audio, _ = sf.read(path, dtype="float32")
    assert len(audio) == 1600 and audio[-1] == pytest.approx(0.25)


def test_save_on_a_full_disk_from_the_start_is_an_output_error(tmp_path: Path) -> None:
    link = tmp_path / "full.wav"
    link.symlink_to("/dev/full")
    with pytest.raises(OutputError, match="No space left on device"):
        AudioWriter(str(link), 16000)


def test_a_full_disk_mid_session_stops_capture_and_flushes_the_summary(
    recognizer: SherpaRecognizer, speech_48k_stereo: np.ndarray, tmp_path: Path
) -> None:
    source, output, writer, shown = live(recognizer, speech_48k_stereo, tmp_path)
    full = os.open("/dev/full", os.O_WRONLY)
    try:
        os.dup2(full, writer._wav.fileno())  # noqa: SLF001 - the disk is full from now on
    finally:
        os.close(full)
    with pytest.raises(OutputError, match="--save"):
        run_capture(source, recognizer, StreamOptions(), output, writer, 2.0)
    records = [json.loads(x) for x in shown.getvalue().splitlines()]
    assert records and records[-1]["type"] == "summary"
    assert output.log_file is not None and output.log_file.closed


# ---- missing PortAudio / sounddevice ----------------------------------------------------

RUNNER = (
    "from streamasr.cli import app\n"
    "from streamasr.commands import mic\n"
    "if 'mic' not in {c.name for c in app.registered_commands}:\n"
    "    mic.register(app)\n"
    "app()\n"
)


def run_cli(args: list[str], env: dict[str, str], timeout: float = 60):
    return subprocess.run(
        [sys.executable, "-c", RUNNER, *args],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.parametrize(
    ("stub", "advice"),
    [
        ("raise OSError('PortAudio library not found')", "apt-get install libportaudio2"),
        ("raise ImportError('No module named sounddevice')", "pip install sounddevice"),
    ],
)
@pytest.mark.parametrize("command", [["devices"], ["mic", "--model", "tiny-random-transducer"]])
def test_missing_portaudio_or_sounddevice_is_advice_not_a_traceback(
    tmp_path: Path, stub: str, advice: str, command: list[str]
) -> None:
    # sounddevice's own import raises exactly this OSError when libportaudio is absent
    (tmp_path / "sounddevice.py").write_text(stub + "\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(REPO)]))
    result = run_cli(command, env)
    assert result.returncode == 1, result.stderr
    assert advice in result.stderr
    assert "Traceback" not in result.stderr


def test_load_sounddevice_maps_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    from streamasr.devices import mic

    monkeypatch.setitem(sys.modules, "sounddevice", None)  # import raises ImportError
    with pytest.raises(DependencyError, match="pip install sounddevice"):
        mic.load_sounddevice()


class SlowStream:
    """A real engine stream whose decoding takes twice as long as the audio it gets."""

    def __init__(self, inner) -> None:
        self.inner = inner

    def accept(self, sample_rate: int, samples: np.ndarray) -> None:
        time.sleep(2 * len(samples) / sample_rate)
        self.inner.accept(sample_rate, samples)

    def __getattr__(self, name: str):
        return getattr(self.inner, name)


class SlowRecognizer:
    def __init__(self, inner: SherpaRecognizer) -> None:
        self.inner = inner
        self.description = inner.description
        self.chunk_s = inner.chunk_s
        self.info = inner.info

    def create_stream(self) -> SlowStream:
        return SlowStream(self.inner.create_stream())


def test_decoding_slower_than_real_time_is_reported_with_the_backlog(
    recognizer: SherpaRecognizer,
    speech_48k_stereo: np.ndarray,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    slow = SlowRecognizer(recognizer)
    source, output, writer, shown = live(slow, speech_48k_stereo, tmp_path, realtime=True)
    summary = run_capture(source, slow, StreamOptions(), output, writer, 2.0)  # type: ignore[arg-type]
    err = capsys.readouterr().err
    assert "decoding is behind real time" in err
    backlog = float(err.split("decoding is behind real time: ")[1].split(" s")[0])
    assert backlog >= 1.0
    assert summary is not None and summary.audio_s == pytest.approx(2.0)
    assert "max backlog" in err


def test_the_core_loop_writes_nothing_to_the_terminal_by_itself(
    recognizer: SherpaRecognizer,
    speech_48k_stereo: np.ndarray,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """streamasr.devices.live without the command's output: events to the renderer, messages to the
    "streamasr" logger (or a say callback), nothing printed."""
    import logging

    from streamasr.devices.live import SessionOutput

    source = MicSource(HEADSET, recognizer.chunk_s, stream_factory=factory(speech_48k_stereo))
    shown = io.StringIO()
    said: list[tuple[str, str]] = []
    caplog.set_level(logging.INFO, logger="streamasr")
    # a CLI test earlier in this process may have given the logger a stderr handler (as the
    # command does); the core's own behaviour is what is checked here, so take it off
    cli_handlers = logging.getLogger("streamasr").handlers
    monkeypatch.setattr(
        logging.getLogger("streamasr"), "handlers",
        [h for h in cli_handlers if h is caplog.handler],
    )
    quiet = SessionOutput(JsonlRenderer(shown), None)
    summary = run_capture(source, recognizer, StreamOptions(), quiet, None, 2.0)
    assert summary is not None and summary.text
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""
    logged = [r.getMessage() for r in caplog.records if r.name == "streamasr"]
    assert any(m.startswith("listening: [7] USB Headset") for m in logged)
    assert any(m.startswith("capture: ") and "input overflows" in m for m in logged)
    assert '"type": "final"' in shown.getvalue()

    source = MicSource(HEADSET, recognizer.chunk_s, stream_factory=factory(speech_48k_stereo))
    told = SessionOutput(JsonlRenderer(io.StringIO()), None, lambda text, tone: said.append(
        (text, tone)))
    run_capture(source, recognizer, StreamOptions(), told, None, 2.0)
    assert capsys.readouterr().err == ""
    assert any(text.startswith("utterance 1: first token") and tone == "dim" for text, tone in said)
    assert any(text.startswith("first token p50") and tone == "info" for text, tone in said)
