"""One command-line input to its source: a file, '-' for stdin (WAV or --raw PCM)."""

from __future__ import annotations

import io
import sys

from streamasr.audio.base import STDIN_NAME, AudioSource, RawFormat, check_path
from streamasr.audio.files import FileSource
from streamasr.audio.pcm import PcmStreamSource, raw_layout, read_wav_header
from streamasr.errors import InputError


def next_input(source: AudioSource) -> AudioSource | None:
    """The input that follows `source` on the same pipe (another WAV stream), or None."""
    following = getattr(source, "next_wav", None)
    return following() if following is not None else None


def open_source(path: str, raw: RawFormat | None = None) -> AudioSource:
    """The source for one command-line input: '-' is stdin; `raw` means headerless PCM."""
    if path == STDIN_NAME:
        stream = _stdin()
        if raw is not None:
            layout = raw_layout(raw)
            if not stream.peek(1):  # waits for the first byte, or end of input
                raise InputError(
                    "stdin is empty; pipe raw PCM in, e.g. `arecord -t raw -f S16_LE -r 16000 "
                    "| streamasr file - --raw s16le --rate 16000`"
                )
            return PcmStreamSource("stdin", stream, layout, owns=False)
        return PcmStreamSource("stdin", stream, read_wav_header("stdin", stream), owns=False)
    if raw is not None:
        check_path(path)
        try:
            handle = open(path, "rb")  # noqa: SIM115 - the source owns and closes it
        except OSError as exc:
            raise InputError(f"{path}: cannot open it ({exc.strerror})") from exc
        return PcmStreamSource(path, handle, raw_layout(raw), owns=True)
    return FileSource(path)


def _stdin() -> io.BufferedReader:
    if sys.stdin is None or sys.stdin.closed:
        raise InputError(
            "stdin is closed; pipe audio in, e.g. `streamasr file - < talk.wav` or "
            "`arecord -t raw -f S16_LE -r 16000 | streamasr file - --raw s16le --rate 16000`"
        )
    if sys.stdin.isatty():
        raise InputError(
            "stdin is a terminal, not audio; pipe audio in, e.g. `streamasr file - < talk.wav`"
        )
    stream = sys.stdin.buffer
    if not isinstance(stream, io.BufferedReader):  # replaced by an embedding program
        stream = io.BufferedReader(stream)
    return stream
