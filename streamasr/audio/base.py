"""What every audio source is: the header's facts, the limits a header must respect, the
`AudioSource` protocol, mixing to mono, and filling fixed-size blocks from slices.

Headers are checked before any sample is decoded: a rate or channel count no audio can have
means the header is corrupt, and feeding it on would make the engine's resampler allocate
without bound.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from streamasr.errors import InputError, UsageError

STDIN_NAME = "-"
MIN_RATE_HZ = 1_000
MAX_RATE_HZ = 768_000
MAX_CHANNELS = 1024  # libsndfile's own limit; far beyond any real recording
RAW_ENCODINGS = ("s16le", "s32le", "f32le")
# interleaved sample bytes decoded at a time: bounds the memory one block costs, whatever
# the channel count, sample width and rate (1024 channels x 8 bytes still fit 128 frames)
SLICE_BYTES = 1 << 20


@dataclass(frozen=True)
class AudioInfo:
    """What the header says (a raw stream: what the command line says)."""

    sample_rate: int
    channels: int
    frames: int  # declared length; meaningful only when `length_known`
    format: str
    subtype: str
    length_known: bool = True  # False for pipes whose writer could not know the length

    @property
    def duration_s(self) -> float:
        """Declared length in seconds (0 for an empty file or an unknown length)."""
        if not self.length_known or not self.sample_rate:
            return 0.0
        return self.frames / self.sample_rate


@dataclass(frozen=True)
class RawFormat:
    """Headerless PCM: sample encoding, rate and interleaved channel count."""

    encoding: str
    sample_rate: int
    channels: int = 1


class AudioSource(Protocol):
    """What the streaming commands read from."""

    name: str
    info: AudioInfo
    sample_rate: int

    def blocks(self, block_s: float) -> Iterator[np.ndarray]: ...

    def close(self) -> None: ...


def check_header(name: str, sample_rate: int, channels: int) -> None:
    """Refuse a rate or channel count no audio can have, before a single sample is decoded."""
    if not MIN_RATE_HZ <= sample_rate <= MAX_RATE_HZ:
        raise InputError(
            f"{name}: the header claims a sample rate of {sample_rate} Hz, outside "
            f"{MIN_RATE_HZ}-{MAX_RATE_HZ} Hz; the header is corrupt. Re-export the audio, "
            "or if it really is headerless PCM, read it with --raw"
        )
    if not 1 <= channels <= MAX_CHANNELS:
        raise InputError(
            f"{name}: the header claims {channels} channels (1-{MAX_CHANNELS} are possible); "
            "the header is corrupt. Re-export the audio"
        )


def check_raw_format(raw: RawFormat) -> RawFormat:
    """Validate --raw/--rate/--channels (usage errors, exit 2)."""
    if raw.encoding not in RAW_ENCODINGS:
        raise UsageError(
            f"--raw {raw.encoding!r} is not known; use one of: {', '.join(RAW_ENCODINGS)}"
        )
    if not MIN_RATE_HZ <= raw.sample_rate <= MAX_RATE_HZ:
        raise UsageError(
            f"--rate {raw.sample_rate}: a sample rate must be {MIN_RATE_HZ}-{MAX_RATE_HZ} Hz "
            "(e.g. --rate 16000)"
        )
    if not 1 <= raw.channels <= MAX_CHANNELS:
        raise UsageError(f"--channels {raw.channels}: must be 1-{MAX_CHANNELS}")
    return raw


def to_mono(block: np.ndarray) -> np.ndarray:
    """Average channels of a (frames, channels) block into contiguous float32 mono.

    Channels are summed in float64 (float32 samples near its limit would overflow their sum);
    a 64-bit float sample beyond float32's range becomes infinite, which `check_finite` then
    reports with its time; numpy's overflow warning would only add a line of noise."""
    if block.ndim == 2:
        block = block.mean(axis=1, dtype=np.float64) if block.shape[1] > 1 else block[:, 0]
    with np.errstate(over="ignore"):
        return np.ascontiguousarray(block, dtype=np.float32)

def check_path(path: str) -> None:
    """A missing file or a folder, said in one line (before anything is opened)."""
    file = Path(path)
    if not file.exists():
        raise InputError(f"{path}: no such file; check the path")
    if file.is_dir():
        raise InputError(f"{path} is a directory; pass audio files (e.g. {path}/*.wav)")

class BlockFiller:
    """Collects decoded slices into blocks of a fixed number of samples."""

    def __init__(self, frames: int) -> None:
        self.frames = frames
        self._block = np.empty(frames, np.float32)
        self._have = 0

    def room(self) -> int:
        """Samples still missing from the block being filled."""
        return self.frames - self._have

    def add(self, samples: np.ndarray) -> Iterator[np.ndarray]:
        """Take `samples`; yield each block they complete."""
        while len(samples):
            take = min(len(samples), self.room())
            self._block[self._have : self._have + take] = samples[:take]
            self._have += take
            samples = samples[take:]
            if self._have == self.frames:
                yield self._block
                self._block = np.empty(self.frames, np.float32)
                self._have = 0

    def rest(self) -> np.ndarray | None:
        """The part-filled last block, if any."""
        return self._block[: self._have] if self._have else None


def check_finite(name: str, mono: np.ndarray, position: int, sample_rate: int) -> np.ndarray:
    """`mono` unchanged, or the input error naming the first NaN/infinite sample's time."""
    if not np.isfinite(mono).all():
        bad = position + int(np.argmin(np.isfinite(mono)))
        raise InputError(
            f"{name}: sample {bad} ({bad / sample_rate:.3f} s) is NaN or "
            "infinite; the file is corrupt. Re-export it, or cut it before that point"
        )
    return mono


def short_reason(exc: BaseException) -> str:
    """The last line of a decoder's error: the part a user can act on."""
    text = str(exc).strip().splitlines()
    return text[-1] if text else type(exc).__name__


def check_path_name(path: str) -> None:
    """A name longer than the system allows is bad input, said plainly (not an OSError)."""
    try:
        os.stat(path)
    except OSError as exc:
        if exc.errno == errno.ENAMETOOLONG:
            short = path if len(path) <= 60 else path[:57] + "..."
            raise InputError(
                f"{short}: file name too long ({len(path)} characters; the system allows "
                "255 per name); rename the file or give a shorter path"
            ) from None
    except ValueError:
        raise InputError(f"{path!r}: the name contains a NUL character") from None
