"""Microphone capture through PortAudio (the sounddevice package).

The device is opened at its own sample rate (48 kHz USB microphones stay at 48 kHz; the engine
resamples). The PortAudio callback only copies the block into a queue; decoding happens in
the caller's loop, so a slow decode never blocks capture. What the queue holds is measured
(`backlog_s`), and what PortAudio reports (input overflows/underflows) is counted.
"""

from __future__ import annotations

import errno
import io
import logging
import queue
import struct
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, BinaryIO, Protocol

import numpy as np

from streamasr.audio import to_mono
from streamasr.errors import DependencyError, DeviceError, OutputError, UsageError

log = logging.getLogger("streamasr")

DEFAULT_MAX_BACKLOG_S = 30.0
#: PortAudio gets this long to stop a stream; a sound server that stopped answering can make
#: it wait forever.
CLOSE_TIMEOUT_S = 1.0
MAX_DEFAULT_CHANNELS = 2  # virtual devices (ALSA "pulse"/"default") advertise 32 channels

INSTALL_PORTAUDIO = (
    "install the PortAudio library: Debian/Ubuntu `sudo apt-get install libportaudio2`, "
    "Fedora `sudo dnf install portaudio`, macOS `brew install portaudio`"
)


def load_sounddevice() -> ModuleType:
    """Import sounddevice, turning a missing package or PortAudio library into advice."""
    try:
        import sounddevice
    except ImportError as exc:
        raise DependencyError(
            "the sounddevice package is not installed; `pip install sounddevice`"
        ) from exc
    except OSError as exc:  # sounddevice raises OSError when libportaudio cannot be loaded
        raise DependencyError(f"PortAudio was not found ({exc}); {INSTALL_PORTAUDIO}") from exc
    return sounddevice


@dataclass(frozen=True)
class DeviceInfo:
    """One input device as PortAudio describes it."""

    index: int
    name: str
    hostapi: str
    input_channels: int
    sample_rate: int  # the device's native (default) rate
    is_default: bool = False

    def describe(self) -> str:
        """`[3] USB Audio (ALSA)`: how devices are named in messages."""
        return f"[{self.index}] {self.name} ({self.hostapi})"


def list_input_devices(sd: ModuleType | None = None) -> list[DeviceInfo]:
    """Every device with at least one input channel, default marked."""
    sd = sd or load_sounddevice()
    try:
        devices = sd.query_devices()
        hostapis = sd.query_hostapis()
        default_in = _default_input_index(sd)
    except sd.PortAudioError as exc:
        raise DeviceError(f"PortAudio cannot list audio devices ({exc})") from exc
    found = []
    for device in devices:
        if int(device["max_input_channels"]) < 1:
            continue
        index = int(device["index"])
        found.append(
            DeviceInfo(
                index=index,
                name=str(device["name"]),
                hostapi=str(hostapis[int(device["hostapi"])]["name"]),
                input_channels=int(device["max_input_channels"]),
                sample_rate=round(float(device["default_samplerate"])),
                is_default=index == default_in,
            )
        )
    return found


def _default_input_index(sd: ModuleType) -> int:
    """PortAudio's default input device index, -1 when there is none."""
    default = sd.default.device
    try:
        index = default[0]  # an (input, output) pair
    except (TypeError, IndexError, KeyError):
        index = default
    try:
        return int(index)
    except (TypeError, ValueError):  # None, or a name set by the user
        return -1


NO_DEVICE_HELP = (
    "no audio input device was found. Plug in a microphone (or a USB headset); on Linux check "
    "that the sound server (PulseAudio or PipeWire) is running and `arecord -l` lists a "
    "capture device, and that the ALSA PulseAudio plugin is installed "
    "(Debian/Ubuntu: `sudo apt-get install libasound2-plugins`)"
)


def select_device(devices: list[DeviceInfo], spec: str | None) -> DeviceInfo:
    """The device a user asked for: index, or case-insensitive name substring, or the default.

    An exact name (case-insensitive) wins over substrings, so `pulse` is not ambiguous beside
    `pulse monitor`. Unknown or ambiguous names list the candidates.
    """
    if not devices:
        raise DeviceError(NO_DEVICE_HELP)
    if spec is None or not spec.strip():
        for device in devices:
            if device.is_default:
                return device
        log.warning("no default input device; using %s", devices[0].describe())
        return devices[0]
    spec = spec.strip()
    if spec.isdigit():
        index = int(spec)
        for device in devices:
            if device.index == index:
                return device
        raise DeviceError(
            f"no input device has index {index}; input devices are:\n{_listing(devices)}"
        )
    wanted = spec.casefold()
    exact = [d for d in devices if d.name.casefold() == wanted]
    if len(exact) == 1:
        return exact[0]
    matches = exact or [d for d in devices if wanted in d.name.casefold()]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise DeviceError(
            f"no input device name contains {spec!r}; input devices are:\n{_listing(devices)}"
        )
    raise DeviceError(
        f"{spec!r} matches {len(matches)} input devices; pass the index or a longer "
        f"part of the name:\n{_listing(matches)}"
    )


def _listing(devices: list[DeviceInfo]) -> str:
    return "\n".join(f"  {d.describe()}" for d in devices)


@dataclass(frozen=True)
class CapturedBlock:
    """One block from the callback: mono float32 at the device rate, and when it arrived."""

    samples: np.ndarray
    arrived_s: float  # clock() in the callback, i.e. just after the last sample was captured


@dataclass(frozen=True)
class CaptureStats:
    """What happened on the capture side, for the end-of-session report."""

    blocks: int
    captured_s: float
    input_overflows: int  # PortAudio dropped input: the callback was not called in time
    input_underflows: int
    dropped_blocks: int  # our queue was full (decode far behind); these blocks were discarded
    dropped_s: float
    max_backlog_s: float


class InputStreamLike(Protocol):
    """The part of sounddevice.InputStream MicSource uses (injectable for tests)."""

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def close(self) -> None: ...


StreamFactory = Callable[..., InputStreamLike]

_END = object()  # queued by PortAudio's finished callback: no more blocks will come


class MicSource:
    """Captures from one input device into a queue; `blocks()` hands the audio to the caller.

    `channel` (1-based) picks one channel; otherwise all opened channels are averaged.
    Up to two channels are opened unless `channel` needs more, because virtual devices
    advertise dozens of channels that are all the same downmix.
    """

    def __init__(
        self,
        device: DeviceInfo,
        block_s: float,
        channel: int | None = None,
        max_backlog_s: float = DEFAULT_MAX_BACKLOG_S,
        stream_factory: StreamFactory | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        if block_s <= 0:
            raise UsageError(f"the feed block must be positive, got {block_s} s")
        if channel is not None and not 1 <= channel <= device.input_channels:
            raise UsageError(
                f"--channel {channel}: {device.describe()} has input channels "
                f"1..{device.input_channels}"
            )
        self.device = device
        self.sample_rate = device.sample_rate
        self.channel = channel
        self.channels = max(min(device.input_channels, MAX_DEFAULT_CHANNELS), channel or 1)
        self.blocksize = max(1, round(block_s * self.sample_rate))
        self.max_backlog_frames = round(max_backlog_s * self.sample_rate)
        self._factory = stream_factory
        self._clock = clock
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._queued_frames = 0
        self._max_queued_frames = 0
        self._blocks = 0
        self._frames = 0
        self._overflows = 0
        self._underflows = 0
        self._dropped_blocks = 0
        self._dropped_frames = 0
        self._stream: InputStreamLike | None = None
        self._closing = False
        self.abandoned = False  # close() gave up waiting for PortAudio to stop the stream

    @property
    def backlog_s(self) -> float:
        """Seconds of captured audio waiting in the queue, not yet handed to the caller."""
        with self._lock:
            return self._queued_frames / self.sample_rate

    def start(self) -> None:
        """Open and start the PortAudio stream; callbacks begin on PortAudio's thread."""
        factory = self._factory or _sounddevice_stream
        try:
            self._stream = factory(
                device=self.device.index,
                samplerate=self.sample_rate,
                channels=self.channels,
                blocksize=self.blocksize,
                dtype="float32",
                callback=self._callback,
                finished_callback=self._finished,
            )
            self._stream.start()
        except DeviceError:
            raise
        except Exception as exc:  # sounddevice.PortAudioError, or ValueError for bad params
            self.close()
            raise DeviceError(
                f"cannot open {self.device.describe()} at {self.sample_rate} Hz with "
                f"{self.channels} channel(s): {exc}. `streamasr devices` lists what is there"
            ) from exc

    def blocks(
        self, stall_timeout_s: float = 3.0, first_block_timeout_s: float = 10.0
    ) -> Iterator[CapturedBlock]:
        """Blocks in capture order until close(); DeviceError if the device stops or stalls.

        Sound servers can take a second or two to deliver the first block, hence the
        separate, longer timeout for it.
        """
        waited_since = self._clock()
        block_s = self.blocksize / self.sample_rate
        limit = max(first_block_timeout_s, stall_timeout_s) + block_s
        while True:
            try:
                item = self._queue.get(timeout=0.1)
            except queue.Empty:
                if self._closing:
                    return
                if self._clock() - waited_since > limit:
                    raise DeviceError(
                        f"{self.device.describe()} delivered no audio for {limit:.1f} s; "
                        "was it unplugged, or is another program holding it?"
                    ) from None
                continue
            if item is _END:
                if self._closing:
                    return
                raise DeviceError(
                    f"{self.device.describe()} stopped delivering audio (unplugged, or its "
                    "sound server went away)"
                )
            with self._lock:
                self._queued_frames -= len(item.samples)
            waited_since = self._clock()
            limit = stall_timeout_s + block_s
            yield item

    def stats(self) -> CaptureStats:
        """Counters so far."""
        with self._lock:
            return CaptureStats(
                blocks=self._blocks,
                captured_s=self._frames / self.sample_rate,
                input_overflows=self._overflows,
                input_underflows=self._underflows,
                dropped_blocks=self._dropped_blocks,
                dropped_s=self._dropped_frames / self.sample_rate,
                max_backlog_s=self._max_queued_frames / self.sample_rate,
            )

    def close(self, timeout_s: float = CLOSE_TIMEOUT_S) -> None:
        """Stop capture (idempotent); blocks already queued are discarded.

        A device whose sound server stopped answering (a suspended PulseAudio sink) can
        block PortAudio's stop forever, so the stop runs on its own thread: after
        `timeout_s` the stream is left behind (`abandoned`) and the session goes on to
        flush its text and summary.
        """
        self._closing = True
        stream, self._stream = self._stream, None
        if stream is None:
            return
        stopper = threading.Thread(
            target=_stop_stream, args=(stream,), name="streamasr-capture-stop", daemon=True
        )
        stopper.start()
        stopper.join(timeout_s)
        if stopper.is_alive():
            self.abandoned = True
            _forget_portaudio_at_exit()
            log.warning(
                "%s did not stop within %.0f s (its sound server is not answering); "
                "left it open", self.device.describe(), timeout_s,
            )

    def _callback(self, indata: np.ndarray, frames: int, time_info: object, status: Any) -> None:
        """PortAudio thread: copy, count, enqueue. Never blocks, never decodes."""
        arrived = self._clock()
        with self._lock:
            if getattr(status, "input_overflow", False):
                self._overflows += 1
            if getattr(status, "input_underflow", False):
                self._underflows += 1
            if self._closing:
                return
            if self._queued_frames + frames > self.max_backlog_frames:
                self._dropped_blocks += 1
                self._dropped_frames += frames
                return
            self._queued_frames += frames
            self._max_queued_frames = max(self._max_queued_frames, self._queued_frames)
            self._blocks += 1
            self._frames += frames
        if self.channel is not None:
            samples = np.array(indata[:, self.channel - 1], dtype=np.float32)
        else:
            samples = to_mono(np.array(indata, dtype=np.float32))
        self._queue.put(CapturedBlock(samples, arrived))

    def _finished(self) -> None:
        self._queue.put(_END)


def _stop_stream(stream: InputStreamLike) -> None:
    """Abort (no waiting for buffers that may never come) and close an input stream."""
    for action in (getattr(stream, "abort", stream.stop), stream.close):
        try:
            action()
        except Exception as exc:  # a vanished device can fail to stop; nothing to save
            log.debug("closing the input stream: %s", exc)


def _forget_portaudio_at_exit() -> None:
    """sounddevice terminates PortAudio at exit, which waits on a stream left hanging: skip
    it, so the process can still end (the system reclaims the device)."""
    import atexit
    import sys

    sounddevice = sys.modules.get("sounddevice")
    handler = getattr(sounddevice, "_exit_handler", None)
    if handler is not None:
        atexit.unregister(handler)


def _sounddevice_stream(**kwargs: Any) -> InputStreamLike:
    sd = load_sounddevice()
    return sd.InputStream(**kwargs)


class AudioWriter:
    """Writes captured audio as it arrives, so a crash (even SIGKILL) loses at most one block.

    `.wav` is written by hand as 32-bit IEEE float (WAVE_FORMAT_IEEE_FLOAT, 18-byte fmt
    chunk with its cbSize field, and the `fact` chunk non-PCM formats carry). After every
    block the sample data is written first and then the RIFF, fact and data sizes are
    patched and flushed, so the header on disk never claims a sample that is not there.
    The file therefore replays exactly the samples the live session fed the recognizer.
    Other suffixes (.flac, ...) go through libsndfile, flushed per block.

    A failed write (full disk) raises OutputError once; later writes and close() are quiet,
    so the session can still flush its text.
    """

    def __init__(self, path: str, sample_rate: int) -> None:
        self.path = path
        self.sample_rate = sample_rate
        self.frames = 0
        self._broken = False
        self._wav: BinaryIO | None = None
        self._file: Any = None
        if Path(path).suffix.lower() in (".wav", ".wave"):
            try:
                self._wav = open(path, "wb")  # noqa: SIM115 - closed by close()
                self._wav.write(_float_wav_header(sample_rate, 0))
                self._wav.flush()
            except OSError as exc:
                self._abandon()
                if exc.errno in _FULL_ERRNOS:
                    raise OutputError(
                        f"--save {path}: cannot write the audio ({exc.strerror}); free some "
                        "space or save elsewhere"
                    ) from exc
                raise UsageError(
                    f"--save {path}: cannot write there ({exc.strerror or exc}); use a "
                    "writable path ending in .wav (exact) or .flac"
                ) from exc
            return
        import soundfile as sf

        try:
            self._file = sf.SoundFile(path, "w", samplerate=sample_rate, channels=1)
        except (sf.LibsndfileError, RuntimeError, TypeError, ValueError, OSError) as exc:
            raise UsageError(
                f"--save {path}: cannot write audio there ({exc}); use a writable path "
                "ending in .wav (exact) or .flac"
            ) from exc

    def write(self, samples: np.ndarray) -> None:
        """Append one block and push it to disk, header included."""
        if self._broken or len(samples) == 0:
            return
        try:
            if self._wav is not None:
                data = np.ascontiguousarray(samples, dtype="<f4").tobytes()
                if _WAV_HEADER_BYTES + (self.frames + len(samples)) * 4 > _RIFF_MAX_BYTES:
                    self._broken = True
                    raise OutputError(
                        f"--save {self.path}: a WAV file cannot hold more than 4 GiB "
                        f"({self.frames / self.sample_rate / 3600:.1f} h here); save as .flac "
                        "for longer sessions. The transcript is kept"
                    )
                self._wav.seek(0, io.SEEK_END)
                self._wav.write(data)
                self._wav.flush()  # samples first: the header never runs ahead of them
                self._patch_sizes(self.frames + len(samples))
            else:
                self._file.write(samples)
                self._file.flush()
        except OSError as exc:
            self._broken = True
            raise OutputError(
                f"--save {self.path}: cannot write the audio ({exc.strerror or exc}); free "
                "some space or save elsewhere. The transcript is kept"
            ) from exc
        except RuntimeError as exc:  # libsndfile reports a full disk as a generic error
            self._broken = True
            raise OutputError(
                f"--save {self.path}: cannot write the audio ({exc}); free some space or "
                "save elsewhere. The transcript is kept"
            ) from exc
        self.frames += len(samples)

    def _patch_sizes(self, frames: int) -> None:
        wav = self._wav
        if wav is None:
            return
        data_bytes = frames * 4
        wav.seek(4)
        wav.write(struct.pack("<I", _WAV_HEADER_BYTES - 8 + data_bytes))
        wav.seek(_FACT_FRAMES_AT)
        wav.write(struct.pack("<I", frames))
        wav.seek(_DATA_SIZE_AT)
        wav.write(struct.pack("<I", data_bytes))
        wav.flush()

    def close(self) -> None:
        """Finish the file (idempotent; quiet after a failed write)."""
        if self._wav is not None:
            self._abandon()
        elif self._file is not None and not self._file.closed:
            try:
                self._file.close()
            except (OSError, RuntimeError) as exc:
                log.debug("closing %s: %s", self.path, exc)

    def _abandon(self) -> None:
        wav, self._wav = self._wav, None
        if wav is None:
            return
        try:
            wav.close()
        except OSError as exc:  # the last flush failed (disk full); the sizes on disk hold
            log.debug("closing %s: %s", self.path, exc)


_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO)
_WAVE_FORMAT_IEEE_FLOAT = 3
_FMT_BYTES = 18  # the 16-byte PCM fields plus cbSize, which non-PCM formats must carry
_FACT_FRAMES_AT = 12 + 8 + _FMT_BYTES + 8
_DATA_SIZE_AT = _FACT_FRAMES_AT + 4 + 4
_WAV_HEADER_BYTES = _DATA_SIZE_AT + 4
_RIFF_MAX_BYTES = 0xFFFFFFFF


def _float_wav_header(sample_rate: int, frames: int) -> bytes:
    """RIFF/WAVE header for mono 32-bit float: fmt (with cbSize 0), fact, data."""
    data_bytes = frames * 4
    fmt = struct.pack(
        "<HHIIHHH", _WAVE_FORMAT_IEEE_FLOAT, 1, sample_rate, sample_rate * 4, 4, 32, 0
    )
    header = (
        b"RIFF"
        + struct.pack("<I", _WAV_HEADER_BYTES - 8 + data_bytes)
        + b"WAVE"
        + b"fmt "
        + struct.pack("<I", _FMT_BYTES)
        + fmt
        + b"fact"
        + struct.pack("<II", 4, frames)
        + b"data"
        + struct.pack("<I", data_bytes)
    )
    if len(header) != _WAV_HEADER_BYTES:  # pragma: no cover - a layout mistake in this module
        raise RuntimeError("WAV header layout is inconsistent")
    return header
