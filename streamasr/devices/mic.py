"""Microphone capture through PortAudio (the sounddevice package).

The device is opened at its own sample rate (48 kHz USB microphones stay at 48 kHz; the engine
resamples). The PortAudio callback only copies the block into a queue; decoding happens in
the caller's loop, so a slow decode never blocks capture. What the queue holds is measured
(`backlog_s`), and what PortAudio reports (input overflows/underflows) is counted.
Choosing the device is `mic_devices`; saving what was captured is `wav_writer`.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from streamasr.audio import to_mono
from streamasr.devices.mic_devices import DeviceInfo, load_sounddevice
from streamasr.errors import DeviceError, UsageError

log = logging.getLogger("streamasr")

DEFAULT_MAX_BACKLOG_S = 30.0
#: PortAudio gets this long to stop a stream; a sound server that stopped answering can make
#: it wait forever.
CLOSE_TIMEOUT_S = 1.0
MAX_DEFAULT_CHANNELS = 2  # virtual devices (ALSA "pulse"/"default") advertise 32 channels


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
