"""Property tests of the audio readers: WAV headers on a pipe, raw PCM, files libsndfile
reads (WAV, FLAC) and the streaming resampler's block sizes.

Generated files are valid ones with bytes changed or cut off, so that the readers' checks
past the first few bytes are reached. Each gets InputError with one clear line, or blocks of
finite mono float32 that hold what the file holds; a valid file reads as soundfile reads it.
"""

from __future__ import annotations

import io
import struct

import numpy as np
import soundfile as sf
from fuzz_inputs import accepted, assert_clear, scratch
from hypothesis import example, given
from hypothesis import strategies as st

from streamasr.audio import RawFormat, open_source
from streamasr.audio.base import MAX_CHANNELS, MAX_RATE_HZ, MIN_RATE_HZ
from streamasr.audio.files import FileSource
from streamasr.audio.pcm import PcmStreamSource, raw_layout, read_wav_header
from streamasr.audio.resample import StreamResampler
from streamasr.errors import InputError, UsageError

FOLDER = scratch("streamasr-fuzz-audio-")
BLOCK_S = st.sampled_from([0.0001, 0.01, 0.1, 1.0])
#: (WAV format tag, bits) a header may declare; the pipe reader takes the first six
SAMPLE_FORMATS = [(1, 8), (1, 16), (1, 24), (1, 32), (3, 32), (3, 64), (1, 12), (2, 4),
                  (3, 16), (0xFFFE, 16)]  # fmt: skip


def riff(chunks: list[tuple[bytes, bytes]], data: bytes, data_size: int | None = None) -> bytes:
    """A RIFF/WAVE file of `chunks` then a data chunk (its size field `data_size`)."""
    body = b"WAVE"
    for chunk_id, payload in chunks:
        body += chunk_id + struct.pack("<I", len(payload)) + payload + b"\0" * (len(payload) & 1)
    size = len(data) if data_size is None else data_size
    body += b"data" + struct.pack("<I", size) + data
    return b"RIFF" + struct.pack("<I", len(body) & 0xFFFFFFFF) + body


@st.composite
def wav_files(draw: st.DrawFn, damaged: bool = True) -> bytes:
    """WAV headers of any declared format, extra chunks, data sizes that fit, promise more
    or say 'to the end' (0, 0xFFFFFFFF); `damaged`: also rates and channel counts no audio
    has, a few bytes changed, the end cut off (each in some of the files only)."""
    tag, bits = draw(st.sampled_from(SAMPLE_FORMATS))
    channels, rate = draw(st.integers(1, 4)), draw(st.sampled_from([8000, 16000, 44100]))
    if damaged:
        channels = draw(st.just(channels) | st.sampled_from([0, MAX_CHANNELS + 1, 65535]))
        rate = draw(st.just(rate) | st.integers(0, 2**32 - 1))
    align = max(1, channels * bits // 8) & 0xFFFF
    fmt = struct.pack("<HHIIHH", tag, channels, rate, rate * align & 0xFFFFFFFF, align, bits)
    if tag == 0xFFFE:
        fmt += struct.pack("<HHI", 22, bits, 0) + struct.pack("<H", 1) + b"\0" * 14
    extra = draw(st.lists(st.tuples(st.sampled_from([b"LIST", b"fact", b"junk"]),
                                    st.binary(max_size=9)), max_size=2))  # fmt: skip
    data = draw(st.binary(max_size=400))
    size = draw(st.none() | st.sampled_from([0, 0xFFFFFFFF]) | st.integers(0, 2**32 - 1))
    return damage(draw, riff([*extra, (b"fmt ", fmt)], data, size)) if damaged else riff(
        [*extra, (b"fmt ", fmt)], data, size)  # fmt: skip


def damage(draw: st.DrawFn, file: bytes) -> bytes:
    """`file` with up to four bytes changed and its end cut off, or left whole (half of
    the time each)."""
    changed = bytearray(file)
    for _ in range(draw(st.sampled_from([0, 0, 0, 0, 1, 2, 4])) if changed else 0):
        changed[draw(st.integers(0, len(changed) - 1))] = draw(st.integers(0, 255))
    cut = draw(st.none() | st.integers(0, len(changed)))
    return bytes(changed if cut is None else changed[:cut])


def _blocks_of(source: object, block_s: float) -> np.ndarray:
    """Every block a source yields, checked: finite mono float32, none empty."""
    blocks = list(source.blocks(block_s))  # type: ignore[attr-defined]
    for block in blocks:
        assert block.dtype == np.float32 and block.ndim == 1 and len(block) > 0
        assert np.isfinite(block).all()
    return np.concatenate(blocks) if blocks else np.zeros(0, np.float32)


@given(wav_files(), BLOCK_S)
@example(riff([(b"fmt ", struct.pack("<HHIIHH", 1, 1, 16000, 32000, 2, 16))], b"\1\2" * 9),
         0.01)  # fmt: skip
def test_a_wav_stream_on_a_pipe_reads_as_its_samples_or_one_input_error(
    file: bytes, block_s: float
) -> None:
    stream = io.BufferedReader(io.BytesIO(file))  # type: ignore[arg-type]
    try:
        source: PcmStreamSource | None = PcmStreamSource(
            "stdin", stream, read_wav_header("stdin", stream), owns=False
        )
        streams = 0
        while source is not None:
            streams += 1
            assert streams <= len(file) // 44 + 1  # each stream takes a header's bytes
            samples = _blocks_of(source, block_s)
            assert MIN_RATE_HZ <= source.sample_rate <= MAX_RATE_HZ
            assert len(samples) <= len(file) // source.info.channels
            source = source.next_wav()
    except InputError as exc:
        assert_clear(exc)
        return
    accepted()


@given(wav_files(damaged=False))
def test_the_pipe_reader_reads_what_libsndfile_reads(file: bytes) -> None:
    """A correct result: where both readers take a PCM WAV whole, the samples agree."""
    try:
        libsndfile, _ = sf.read(io.BytesIO(file), dtype="float32", always_2d=True)
        stream = io.BytesIO(file)
        ours = _blocks_of(PcmStreamSource("f", stream, read_wav_header("f", stream), False), 1.0)
    except (InputError, sf.LibsndfileError, RuntimeError, TypeError):
        return  # refusals are the other tests'; here only files both read
    if len(ours) != len(libsndfile):
        return  # a data size that promises more: libsndfile reads what is there, as we do
    accepted()
    assert np.allclose(ours, libsndfile.mean(axis=1), atol=1e-6)


@st.composite
def encoded_files(draw: st.DrawFn) -> tuple[str, bytes]:
    """A real WAV or FLAC written by libsndfile, then bytes changed or the end cut off."""
    kind = draw(st.sampled_from(["wav", "flac"]))
    channels = draw(st.integers(1, 3))
    frames = draw(st.integers(0, 600))
    rate = draw(st.sampled_from([8000, 16000, 22050, 48000]))
    samples = np.sin(np.arange(frames * channels, dtype=np.float32)).reshape(frames, channels)
    buffer = io.BytesIO()
    subtype = draw(st.sampled_from(["PCM_16", "PCM_24"] if kind == "flac" else
                                   ["PCM_16", "PCM_U8", "FLOAT", "DOUBLE", "PCM_32"]))  # fmt: skip
    sf.write(buffer, samples, rate, format=kind.upper(), subtype=subtype)
    return kind, damage(draw, buffer.getvalue())


@given(encoded_files(), BLOCK_S)
def test_a_damaged_wav_or_flac_file_reads_or_is_one_input_error(
    item: tuple[str, bytes], block_s: float
) -> None:
    kind, data = item
    path = FOLDER / f"damaged.{kind}"
    path.write_bytes(data)
    try:
        source = FileSource(str(path))
        try:
            samples = _blocks_of(source, block_s)
        finally:
            source.close()
    except InputError as exc:
        assert_clear(exc)
        return
    accepted()
    assert MIN_RATE_HZ <= source.sample_rate <= MAX_RATE_HZ
    assert len(samples) <= max(source.info.frames, len(data))


@given(
    st.binary(max_size=300),
    st.sampled_from(["s16le", "s32le", "f32le"]) | st.sampled_from(["u8", "", "S16LE"]),
    st.sampled_from([16000, 8000]) | st.integers(-1, MAX_RATE_HZ + 1),
    st.integers(1, 4) | st.integers(-1, MAX_CHANNELS + 1), BLOCK_S,
)  # fmt: skip
def test_raw_pcm_reads_as_whole_frames_or_is_refused(
    data: bytes, encoding: str, rate: int, channels: int, block_s: float
) -> None:
    path = FOLDER / "input.raw"
    path.write_bytes(data)
    raw = RawFormat(encoding, rate, channels)
    try:
        source = open_source(str(path), raw)
        try:
            samples = _blocks_of(source, block_s)
        finally:
            source.close()
    except (InputError, UsageError) as exc:
        assert_clear(exc)
        return
    accepted()
    frame_bytes = raw_layout(raw).frame_bytes
    assert len(samples) == len(data) // frame_bytes


# -- the resampler ----------------------------------------------------------------------------


RATES = st.sampled_from([8000, 16000, 22050, 44100, 48000]) | st.integers(MIN_RATE_HZ, 96_000)


@given(RATES, RATES, st.integers(0, 3000), st.lists(st.integers(0, 700), max_size=12))
def test_the_resampler_gives_the_same_samples_whatever_the_block_sizes(
    from_hz: int, to_hz: int, length: int, cuts: list[int]
) -> None:
    """Feed blocks of any size (empty ones too): the output is the whole input's, and about
    as long as the rates say."""
    audio = np.sin(np.arange(length, dtype=np.float32) * 0.05).astype(np.float32)
    whole = StreamResampler(from_hz, to_hz)
    expected = np.concatenate([whole(audio), whole.flush()])
    pieces = StreamResampler(from_hz, to_hz)
    parts, start = [], 0
    for size in cuts:
        parts.append(pieces(audio[start : start + size]))
        start += size
    parts += [pieces(audio[start:]), pieces.flush()]
    got = np.concatenate(parts)
    accepted()
    assert got.dtype == np.float32 and np.isfinite(got).all()
    assert len(got) == len(expected)
    assert abs(len(got) - length * to_hz / from_hz) <= 2
    assert np.allclose(got, expected, atol=1e-5)
