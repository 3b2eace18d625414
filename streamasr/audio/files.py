"""FileSource: an audio file in any format libsndfile reads, decoded block by block."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import numpy as np

from streamasr.audio.base import (
    SLICE_BYTES,
    AudioInfo,
    check_finite,
    check_header,
    check_path,
    short_reason,
    to_mono,
)
from streamasr.audio.pcm import short_wav_data, warn_short
from streamasr.errors import InputError

log = logging.getLogger("streamasr")

# names that usually hold headerless PCM, which libsndfile cannot read without being told how
RAW_SUFFIXES = (".raw", ".pcm")


class FileSource:
    """An audio file read block by block as mono float32 (libsndfile: any format it knows)."""

    def __init__(self, path: str) -> None:
        import soundfile as sf

        self.name = path
        check_path(path)
        try:
            self._file = sf.SoundFile(path)
        except (sf.LibsndfileError, RuntimeError, TypeError) as exc:
            raise InputError(_unreadable(path, exc)) from exc
        try:
            check_header(path, int(self._file.samplerate), int(self._file.channels))
        except InputError:
            self._file.close()
            raise
        self.info = AudioInfo(
            sample_rate=int(self._file.samplerate),
            channels=int(self._file.channels),
            frames=int(self._file.frames),
            format=str(self._file.format),
            subtype=str(self._file.subtype),
        )
        self.sample_rate = self.info.sample_rate
        # libsndfile counts the frames the file holds, whatever its header says
        self._short = short_wav_data(path) if self.info.format in ("WAV", "WAVEX") else None

    def blocks(self, block_s: float) -> Iterator[np.ndarray]:
        """Yield mono float32 blocks of `block_s` seconds; checks every sample is finite.

        A file that ends before the length it had when opened (it shrank while being read),
        or a WAV whose header promises more data than the file holds, ends the stream with a
        warning rather than silently.
        """
        import soundfile as sf

        size = max(1, round(block_s * self.sample_rate))
        slice_frames = max(1, SLICE_BYTES // (4 * self.info.channels))
        position = 0
        try:
            while True:
                block = np.empty(size, np.float32)
                have = 0
                while have < size:
                    part = self._file.read(
                        min(slice_frames, size - have), dtype="float32", always_2d=True
                    )
                    if len(part) == 0:
                        break
                    mono = check_finite(self.name, to_mono(part), position + have, self.sample_rate)
                    block[have : have + len(mono)] = mono
                    have += len(mono)
                if have == 0:
                    break
                position += have
                yield block[:have]
        except sf.LibsndfileError as exc:
            raise InputError(
                f"{self.name}: could not read past {position / self.sample_rate:.2f} s "
                f"({short_reason(exc)}); the file is truncated or corrupt"
            ) from exc
        if position < self.info.frames:
            log.warning(
                "%s was cut short: read %.2f s of the %.2f s it held when opened (the file "
                "shrank while it was read); the transcript covers what was read",
                self.name,
                position / self.sample_rate,
                self.info.duration_s,
            )
        elif self._short is not None:
            warn_short(self.name, self._short, "the file holds {}")

    def close(self) -> None:
        """Release the file handle."""
        self._file.close()


def _unreadable(path: str, exc: BaseException) -> str:
    """Why libsndfile cannot open `path`, and the fix: --raw for a headerless PCM name (it has
    no header to say its encoding and rate), else the formats it reads and ffmpeg."""
    if path.lower().endswith(RAW_SUFFIXES):
        return (
            f"{path}: headerless PCM (no header gives its encoding and sample rate); name "
            "them, e.g. --raw s16le --rate 16000 (add --channels N if it is not mono)"
        )
    return (
        f"{path}: not audio that libsndfile can read ({short_reason(exc)}). "
        f"Supported: wav, flac, ogg/opus, mp3, aiff; convert others with ffmpeg -i {path} out.wav"
    )

