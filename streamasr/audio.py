"""Audio sources: files (any format libsndfile reads, any rate, any channels) read in blocks.

Sources hand out mono float32 blocks at their own sample rate; the engine resamples. Files are
never read whole, so a two-hour recording streams in constant memory.
"""

from __future__ import annotations

import io
import logging
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from streamasr.errors import InputError

log = logging.getLogger("streamasr")

STDIN_NAME = "-"


@dataclass(frozen=True)
class AudioInfo:
    """What the file header says."""

    sample_rate: int
    channels: int
    frames: int
    format: str
    subtype: str

    @property
    def duration_s(self) -> float:
        """Length in seconds (0 for an empty file)."""
        return self.frames / self.sample_rate if self.sample_rate else 0.0


def to_mono(block: np.ndarray) -> np.ndarray:
    """Average channels of a (frames, channels) block into contiguous float32 mono."""
    if block.ndim == 2:
        block = block.mean(axis=1) if block.shape[1] > 1 else block[:, 0]
    return np.ascontiguousarray(block, dtype=np.float32)


class FileSource:
    """An audio file (or stdin with '-') read block by block as mono float32."""

    def __init__(self, path: str) -> None:
        import soundfile as sf

        self.name = path
        if path == STDIN_NAME:
            # stdin is not seekable; libsndfile needs to seek, so buffer it.
            data = sys.stdin.buffer.read()
            if not data:
                raise InputError("stdin is empty; pipe an audio file in, e.g. < talk.wav")
            target: object = io.BytesIO(data)
        else:
            file = Path(path)
            if not file.exists():
                raise InputError(f"{path}: no such file; check the path")
            if file.is_dir():
                raise InputError(
                    f"{path} is a directory; pass audio files (e.g. {path}/*.wav)"
                )
            target = str(file)
        try:
            self._file = sf.SoundFile(target)
        except (sf.LibsndfileError, RuntimeError, TypeError) as exc:
            raise InputError(
                f"{path}: not audio that libsndfile can read ({_short(exc)}). "
                "Supported: wav, flac, ogg/opus, mp3, aiff; convert others with "
                f"ffmpeg -i {path} out.wav"
            ) from exc
        self.info = AudioInfo(
            sample_rate=int(self._file.samplerate),
            channels=int(self._file.channels),
            frames=int(self._file.frames),
            format=str(self._file.format),
            subtype=str(self._file.subtype),
        )
        self.sample_rate = self.info.sample_rate

    def blocks(self, block_s: float) -> Iterator[np.ndarray]:
        """Yield mono float32 blocks of `block_s` seconds; checks every sample is finite."""
        import soundfile as sf

        size = max(1, round(block_s * self.sample_rate))
        position = 0
        try:
            while True:
                block = self._file.read(size, dtype="float32", always_2d=True)
                if len(block) == 0:
                    break
                mono = to_mono(block)
                if not np.isfinite(mono).all():
                    bad = position + int(np.argmin(np.isfinite(mono)))
                    raise InputError(
                        f"{self.name}: sample {bad} ({bad / self.sample_rate:.3f} s) is NaN or "
                        "infinite; the file is corrupt. Re-export it, or cut it before that point"
                    )
                position += len(mono)
                yield mono
        except sf.LibsndfileError as exc:
            raise InputError(
                f"{self.name}: could not read past {position / self.sample_rate:.2f} s "
                f"({_short(exc)}); the file is truncated or corrupt"
            ) from exc

    def close(self) -> None:
        """Release the file handle."""
        self._file.close()


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[-1] if text else type(exc).__name__


def paced(
    blocks: Iterator[np.ndarray],
    sample_rate: int,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Iterator[np.ndarray]:
    """Release each block no earlier than it would have been recorded live.

    The first block is available after its own duration, like a microphone callback.
    """
    start = clock()
    fed_s = 0.0
    for block in blocks:
        fed_s += len(block) / sample_rate
        wait = start + fed_s - clock()
        if wait > 0:
            sleep(wait)
        yield block
