"""Audio sources: files (any format libsndfile reads), WAV or raw PCM on a pipe, read in blocks.

Sources hand out mono float32 blocks at their own sample rate; the engine resamples. Nothing
is read whole: a two-hour recording, or `arecord ... | streamasr file -`, streams in constant
memory, and a pipe's audio is decoded while it is still being written.

Headers are checked before any sample is decoded: a rate or channel count no audio can have
means the header is corrupt, and feeding it on would make the engine's resampler allocate
without bound. Within the limits, memory stays bounded too: a block is read and mixed to mono
in slices of at most SLICE_BYTES of interleaved samples, so 1024 channels of 64-bit float at
768 kHz cost a few MB, not gigabytes per block.

WAV streams written one after another on a pipe (`cat a.wav b.wav | streamasr file -`) are
each an input of their own (`PcmStreamSource.next_wav`), transcribed as if given one by one.

    base.py     what every source is: header facts, limits, mono mixing, block filling
    files.py    FileSource: any file libsndfile reads
    pcm.py      WAV headers parsed from a pipe, raw PCM, PcmStreamSource
    inputs.py   open_source: one command-line input ('-' is stdin) to the right source
    pacing.py   paced: hand blocks out no faster than they would be recorded
"""

from streamasr.audio.base import (
    MAX_CHANNELS,
    MAX_RATE_HZ,
    MIN_RATE_HZ,
    RAW_ENCODINGS,
    SLICE_BYTES,
    STDIN_NAME,
    AudioInfo,
    AudioSource,
    RawFormat,
    check_header,
    check_path,
    check_path_name,
    check_raw_format,
    to_mono,
)
from streamasr.audio.files import FileSource
from streamasr.audio.inputs import next_input, open_source
from streamasr.audio.pacing import paced
from streamasr.audio.pcm import PcmLayout, PcmStreamSource, read_wav_header

__all__ = [
    "MAX_CHANNELS", "MAX_RATE_HZ", "MIN_RATE_HZ", "RAW_ENCODINGS", "SLICE_BYTES", "STDIN_NAME",
    "AudioInfo", "AudioSource", "FileSource", "PcmLayout", "PcmStreamSource", "RawFormat",
    "check_header", "check_path", "check_path_name", "check_raw_format", "next_input",
    "open_source", "paced", "read_wav_header", "to_mono",
]
