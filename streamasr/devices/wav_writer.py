"""Saving captured audio as it arrives (`mic --save`), crash-safe.

A session that is killed loses at most one block: a `.wav` is written by hand with its sizes
patched after every block, so the file on disk is always a valid WAV of exactly the samples
the recognizer was fed.
"""

from __future__ import annotations

import errno
import io
import logging
import struct
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from streamasr.errors import OutputError, UsageError

log = logging.getLogger("streamasr")


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
