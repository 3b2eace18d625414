"""PCM from a byte stream: WAV headers parsed without seeking, raw PCM, `PcmStreamSource`.

A pipe's audio is decoded while it is still being written (`arecord ... | streamasr file -`),
a slice of at most SLICE_BYTES at a time. WAV streams written one after another on a pipe
(`cat a.wav b.wav | streamasr file -`) are each an input of their own (`next_wav`).
"""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

import numpy as np

from streamasr.audio.base import (
    SLICE_BYTES,
    AudioInfo,
    BlockFiller,
    RawFormat,
    check_finite,
    check_header,
    check_raw_format,
    to_mono,
)
from streamasr.errors import InputError

log = logging.getLogger("streamasr")


@dataclass(frozen=True)
class PcmLayout:
    """How interleaved PCM bytes become samples."""

    sample_rate: int
    channels: int
    dtype: str  # numpy dtype of one sample on the wire ('<i2', '<f4', ...; 'i3' = 24-bit)
    scale: float  # divide by this to get [-1, 1)
    offset: float = 0.0  # subtracted first (unsigned 8-bit PCM is centred on 128)
    data_bytes: int = -1  # bytes of sample data the header declares; -1: read to end of input
    format: str = "RAW"
    subtype: str = ""

    @property
    def sample_bytes(self) -> int:
        return 3 if self.dtype == "i3" else np.dtype(self.dtype).itemsize

    @property
    def frame_bytes(self) -> int:
        return self.sample_bytes * self.channels


_RAW_LAYOUTS = {
    "s16le": ("<i2", 32768.0),
    "s32le": ("<i4", 2147483648.0),
    "f32le": ("<f4", 1.0),
}


def raw_layout(raw: RawFormat) -> PcmLayout:
    check_raw_format(raw)
    dtype, scale = _RAW_LAYOUTS[raw.encoding]
    return PcmLayout(raw.sample_rate, raw.channels, dtype, scale, subtype=raw.encoding)


UNKNOWN_SIZES = (0, 0xFFFFFFFF)  # what writers to a pipe put in the data size
_WAVE_PCM, _WAVE_FLOAT, _WAVE_EXTENSIBLE = 1, 3, 0xFFFE


def read_wav_header(name: str, stream: BinaryIO) -> PcmLayout:
    """Parse a RIFF/WAVE header from a stream that cannot seek, up to the first sample.

    Reads only the header: the data chunk is then read block by block by PcmStreamSource.
    A data size of 0 or 0xFFFFFFFF (what writers to a pipe put there) means: to end of input.
    """
    head = stream.read(12)
    if not head:
        raise InputError(
            f"{name} is empty; pipe audio in, e.g. `streamasr file - < talk.wav`, or raw PCM "
            "with --raw s16le --rate 16000"
        )
    if len(head) < 12 or head[:4] != b"RIFF" or head[8:12] != b"WAVE":
        raise InputError(
            f"{name}: not a WAV stream; for headerless PCM name its encoding and rate (e.g. "
            "--raw s16le --rate 16000), else convert with `ffmpeg -i IN -f wav -` or "
            "`sox IN -t wav -`"
        )
    return _read_wav_chunks(name, stream)


def _read_wav_chunks(name: str, stream: BinaryIO) -> PcmLayout:
    """The chunks of a WAV header after `RIFF<size>WAVE`, up to the first sample."""
    fmt: bytes | None = None
    while True:
        chunk = stream.read(8)
        if len(chunk) < 8:
            raise InputError(f"{name}: the WAV header ends before its data chunk; it is truncated")
        chunk_id, size = chunk[:4], struct.unpack("<I", chunk[4:])[0]
        if chunk_id == b"data":
            break
        if size > 1 << 20:
            raise InputError(
                f"{name}: a {size}-byte {chunk_id!r} chunk before the audio; the header is corrupt"
            )
        body = _read_exactly(stream, size + (size & 1))
        if len(body) < size:
            raise InputError(f"{name}: the WAV header ends inside a chunk; it is truncated")
        if chunk_id == b"fmt ":
            fmt = body[:size]
    if fmt is None or len(fmt) < 16:
        raise InputError(f"{name}: the WAV header has no valid fmt chunk; the header is corrupt")
    tag, channels, rate, _byte_rate, _align, bits = struct.unpack("<HHIIHH", fmt[:16])
    if tag == _WAVE_EXTENSIBLE and len(fmt) >= 26:
        tag = struct.unpack("<H", fmt[24:26])[0]  # first two bytes of the sub-format GUID
    check_header(name, rate, channels)
    data_bytes = -1 if size in UNKNOWN_SIZES else size
    if tag == _WAVE_PCM and bits in (8, 16, 24, 32):
        dtype = {8: "u1", 16: "<i2", 24: "i3", 32: "<i4"}[bits]
        offset = 128.0 if bits == 8 else 0.0
        return PcmLayout(
            rate, channels, dtype, float(2 ** (bits - 1)), offset, data_bytes, "WAV",
            f"PCM_{bits if bits > 8 else 'U8'}",
        )
    if tag == _WAVE_FLOAT and bits in (32, 64):
        return PcmLayout(
            rate, channels, "<f4" if bits == 32 else "<f8", 1.0, 0.0, data_bytes, "WAV",
            "FLOAT" if bits == 32 else "DOUBLE",
        )
    raise InputError(
        f"{name}: WAV sample format {tag:#06x} with {bits} bits cannot be streamed from a pipe "
        "(integer 8/16/24/32-bit and float 32/64-bit can); convert with "
        "`ffmpeg -i IN -c:a pcm_s16le -f wav -`"
    )


@dataclass(frozen=True)
class ShortData:
    """A WAV data chunk that holds fewer bytes than its header promises."""

    layout: PcmLayout  # data_bytes: what the header promises
    held_bytes: int

    def seconds(self, data_bytes: int) -> float:
        return data_bytes // self.layout.frame_bytes / self.layout.sample_rate


def short_wav_data(path: str) -> ShortData | None:
    """For a WAV file whose data chunk is shorter than its header says (the file was cut
    off, e.g. a copy or download that stopped), what it holds; None otherwise, and for
    headers that only libsndfile reads (compressed WAV)."""
    try:
        with open(path, "rb") as handle:
            layout = read_wav_header(path, handle)
            held = os.fstat(handle.fileno()).st_size - handle.tell()
    except (OSError, InputError):
        return None
    if layout.data_bytes <= 0 or held >= layout.data_bytes:
        return None
    return ShortData(layout, max(held, 0))


def warn_short(name: str, short: ShortData, held: str) -> None:
    """One warning naming both lengths; `held` says where the rest went ('{}' the length)."""
    promised = short.layout.data_bytes
    there = f"{short.seconds(short.held_bytes):.2f} s ({short.held_bytes} bytes)"
    log.warning(
        "%s was cut short: its header promises %.2f s (%d bytes of audio) but %s; the "
        "transcript covers what is there",
        name,
        short.seconds(promised),
        promised,
        held.format(there),
    )


def _read_exactly(stream: BinaryIO, size: int) -> bytes:
    """Up to `size` bytes, fewer only at end of input (pipes return short reads)."""
    parts: list[bytes] = []
    left = size
    while left > 0:
        part = stream.read(left)
        if not part:
            break
        parts.append(part)
        left -= len(part)
    return b"".join(parts)


class PcmStreamSource:
    """PCM from a byte stream (a pipe, or a raw file), decoded block by block as it arrives."""

    def __init__(self, name: str, stream: BinaryIO, layout: PcmLayout, owns: bool) -> None:
        self.name = name
        self._stream = stream
        self._layout = layout
        self._owns = owns
        self._base = name  # the input's name; later WAV streams on it are numbered
        self._count = 1
        self._done = False  # every block was read
        self._ended = False  # the input itself ended
        self.sample_rate = layout.sample_rate
        self.info = AudioInfo(
            sample_rate=layout.sample_rate,
            channels=layout.channels,
            frames=max(layout.data_bytes, 0) // layout.frame_bytes,
            format=layout.format,
            subtype=layout.subtype,
            length_known=layout.data_bytes >= 0,
        )

    def blocks(self, block_s: float) -> Iterator[np.ndarray]:
        """Yield mono float32 blocks of `block_s` seconds as soon as each has arrived.

        Each block is read and decoded in slices of at most SLICE_BYTES.
        """
        layout = self._layout
        out = BlockFiller(max(1, round(block_s * self.sample_rate)))
        slice_bytes = max(1, SLICE_BYTES // layout.frame_bytes) * layout.frame_bytes
        left = layout.data_bytes
        position = 0
        carry = b""
        while left != 0:
            want = min(slice_bytes, out.room() * layout.frame_bytes) - len(carry)
            if left > 0:
                want = min(want, left)
            try:
                data = _read_exactly(self._stream, want)
            except OSError as exc:
                raise InputError(
                    f"{self.name}: read failed after {position / self.sample_rate:.2f} s "
                    f"({exc.strerror or exc})"
                ) from exc
            if not data:
                self._ended = True
                break
            if left > 0:
                left -= len(data)
            data = carry + data
            whole = len(data) - len(data) % layout.frame_bytes
            data, carry = data[:whole], data[whole:]
            if not data:
                continue
            mono = check_finite(self.name, _decode(data, layout), position, self.sample_rate)
            position += len(mono)
            yield from out.add(mono)
        rest = out.rest()
        if rest is not None:
            yield rest
        self._done = True
        if layout.data_bytes > 0 and left > 0:  # says the lengths; a part frame is part of it
            warn_short(self.name, ShortData(layout, layout.data_bytes - left), "only {} arrived")
        elif carry:
            log.warning(
                "%s ended inside a sample frame; its last %d byte(s) were dropped",
                self.name,
                len(carry),
            )

    def next_wav(self) -> PcmStreamSource | None:
        """The WAV stream that follows this one's data on the pipe (`cat a.wav b.wav |`), or
        None: at end of input, for raw PCM, or when this one's data ran to end of input.

        The chunks that close this stream (LIST, id3, ...) are skipped first. Call it once
        this source's blocks are all read.
        """
        layout = self._layout
        if not self._done or self._ended or layout.format != "WAV" or layout.data_bytes <= 0:
            return None
        stream = self._stream
        if layout.data_bytes & 1:  # the pad byte after odd-sized data, where it was written
            peek = getattr(stream, "peek", None)
            if peek is None or peek(1)[:1] == b"\0":
                stream.read(1)
        name = f"{self._base} (WAV stream {self._count + 1})"
        while True:
            head = _read_exactly(stream, 8)
            if len(head) < 8:
                if head:
                    log.warning(
                        "%s: %d stray byte(s) after the audio were ignored", self.name, len(head)
                    )
                return None
            chunk_id, size = head[:4], struct.unpack("<I", head[4:])[0]
            if chunk_id == b"RIFF":
                if _read_exactly(stream, 4) != b"WAVE":
                    raise InputError(
                        f"{name}: a RIFF stream that is not WAV follows the audio; pipe WAV "
                        "streams only, e.g. `cat a.wav b.wav | streamasr file -`"
                    )
                following = PcmStreamSource(
                    name, stream, _read_wav_chunks(name, stream), owns=self._owns
                )
                following._base, following._count = self._base, self._count + 1
                return following
            log.debug("%s: skipping a %d-byte %r chunk after the audio", self.name, size, chunk_id)
            _skip(stream, size + (size & 1))

    def close(self) -> None:
        """Close the stream if this source opened it (stdin stays open)."""
        if self._owns:
            self._stream.close()


def _decode(data: bytes, layout: PcmLayout) -> np.ndarray:
    """Whole frames of interleaved PCM as mono float32."""
    if layout.dtype == "i3":
        raw = np.frombuffer(data, dtype=np.uint8).reshape(-1, 3).astype(np.int32)
        ints = raw[:, 0] | (raw[:, 1] << 8) | (raw[:, 2] << 16)
        samples = np.where(ints >= 1 << 23, ints - (1 << 24), ints).astype(np.float64)
    else:
        samples = np.frombuffer(data, dtype=layout.dtype).astype(np.float64)
    samples = (samples - layout.offset) / layout.scale
    return to_mono(samples.reshape(-1, layout.channels))


def _skip(stream: BinaryIO, size: int) -> None:
    """Read and drop `size` bytes (fewer at end of input), a slice at a time."""
    while size > 0:
        part = stream.read(min(size, SLICE_BYTES))
        if not part:
            return
        size -= len(part)
