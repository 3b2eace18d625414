"""What a dataset reader yields: an utterance to test, or a row it could not read.

Their own module so that every layout's reader (datasets.py, tables.py) can use them
without one reader importing another."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from streamasr.text.printable import printable

#: what a dataset's audio files may be called
AUDIO_SUFFIXES = (".flac", ".wav", ".ogg", ".opus", ".mp3", ".aiff", ".aif")


@dataclass(frozen=True)
class Utterance:
    """One test item: audio, reference text, and the speech span when the dataset knows it."""

    id: str
    audio: Path
    text: str
    origin: str  # "file:line" where the row came from, for messages
    duration_s: float | None = None
    speech_onset_s: float | None = None  # from the dataset (alignments); None: detect
    speech_end_s: float | None = None


#: A bad row's reason is one line of at most this many characters, whatever the row held.
MAX_REASON_CHARS = 300


@dataclass(frozen=True)
class BadRow:
    """A row that was skipped, with where it is and why. The reason quotes the row (an id,
    a value), so it is made one printable line of bounded length here, whoever wrote it: a
    row of 1 MB or with terminal escapes stays a line in the log and in results.md."""

    file: str
    line: int
    reason: str

    def __post_init__(self) -> None:
        reason = printable(self.reason)
        if len(reason) > MAX_REASON_CHARS:
            reason = reason[: MAX_REASON_CHARS - 3] + "..."
        object.__setattr__(self, "reason", reason)

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.reason}"


def is_file(path: Path) -> bool:
    """`path.is_file()` for a path a row names: False, not OSError, for a name longer than
    the system allows (pathlib raises ENAMETOOLONG; the row then counts as missing audio)."""
    try:
        return path.is_file()
    except OSError:
        return False
