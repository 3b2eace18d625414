"""Words with times from a final's tokens, and subtitle cues that follow common caption rules.

Why: an engine reports pieces (BPE pieces, CJK characters, bytes) and the time each was
emitted; a reader wants words, and a subtitle wants short cues that split where words do.
A word starts at its first piece's time. Transducer tokens carry emission times, not
boundaries, so a word ends at the next word's start, but at most WORD_TAIL_S after its last
piece (a pause is not part of the word), and never after the final's end.

Cue rules (the usual broadcast and streaming-platform guidelines): at most MAX_LINES lines of
at most MAX_LINE_CHARS characters, at most MAX_CUE_S seconds, split only between words, never
overlapping the next cue.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from streamasr.tokens import is_cjk

WORD_TAIL_S = 0.5
MAX_LINE_CHARS = 42
MAX_LINES = 2
MAX_CUE_S = 7.0
MIN_CUE_S = 0.2  # a one-word cue still stays up long enough to be read at all


@dataclass(frozen=True)
class Word:
    """One word (or one CJK character) and its time in the audio."""

    text: str
    start_s: float
    end_s: float


@dataclass(frozen=True)
class Cue:
    """One subtitle: its lines and its time."""

    lines: tuple[str, ...]
    start_s: float
    end_s: float


def _is_cjk_piece(piece: str) -> bool:
    return bool(piece) and all(is_cjk(char) for char in piece.strip())


def words_of(tokens: Sequence[str], times_s: Sequence[float], end_s: float) -> tuple[Word, ...]:
    """Merge pieces into words: a piece starting with a space starts a word, a CJK
    character is a word of its own, any other piece continues the current word."""
    groups: list[tuple[str, float, float]] = []  # text, start, last piece's time
    previous_cjk = False
    for piece, time_s in zip(tokens, times_s, strict=False):
        cjk = _is_cjk_piece(piece)
        starts = not groups or piece.startswith(" ") or cjk or previous_cjk
        text = piece.strip()
        if not text:
            previous_cjk = False
            continue
        if starts:
            groups.append((text, time_s, time_s))
        else:
            word, start, _ = groups[-1]
            groups[-1] = (word + text, start, time_s)
        previous_cjk = cjk
    words = []
    for index, (text, start, last) in enumerate(groups):
        limit = groups[index + 1][1] if index + 1 < len(groups) else end_s
        end = max(start, min(limit, last + WORD_TAIL_S, max(end_s, start)))
        words.append(Word(text, round(start, 3), round(end, 3)))
    return tuple(words)


def _joined(words: Sequence[Word]) -> str:
    """Words as text: spaces between words, none between CJK characters."""
    text = ""
    for word in words:
        if text and not (_is_cjk_piece(word.text) and _is_cjk_piece(text[-1])):
            text += " "
        text += word.text
    return text


def _wrap(words: Sequence[Word]) -> list[str] | None:
    """The words in at most MAX_LINES lines of MAX_LINE_CHARS, balanced; None if they do not
    fit. A single word longer than a line gets a line of its own."""
    text = _joined(words)
    if len(text) <= MAX_LINE_CHARS:
        return [text]
    best: list[str] | None = None
    for split in range(1, len(words)):
        first, second = _joined(words[:split]), _joined(words[split:])
        if len(first) <= MAX_LINE_CHARS and len(second) <= MAX_LINE_CHARS:
            if best is None or abs(len(first) - len(second)) < abs(len(best[0]) - len(best[1])):
                best = [first, second]
    if best is None and len(words) == 1:
        return [text]
    return best


def cues_of(words: Sequence[Word], not_before_s: float = 0.0) -> list[Cue]:
    """Greedy cues over the words: each takes as many words as fit the line and time limits."""
    cues: list[Cue] = []
    index = 0
    while index < len(words):
        taken = 1
        while index + taken < len(words):
            candidate = words[index : index + taken + 1]
            if candidate[-1].end_s - candidate[0].start_s > MAX_CUE_S or _wrap(candidate) is None:
                break
            taken += 1
        group = words[index : index + taken]
        lines = _wrap(group) or [_joined(group)]
        start = max(group[0].start_s, not_before_s)
        end = max(group[-1].end_s, start + MIN_CUE_S)
        if index + taken < len(words):
            end = min(end, max(words[index + taken].start_s, start))
        cues.append(Cue(tuple(lines), round(start, 3), round(end, 3)))
        not_before_s = end
        index += taken
    return cues


def caption_time(seconds: float, separator: str) -> str:
    """HH:MM:SS,mmm (SRT, separator ',') or HH:MM:SS.mmm (WebVTT, '.')."""
    millis = max(0, round(seconds * 1000))
    hours, rest = divmod(millis, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    secs, millis = divmod(rest, 1000)
    return f"{hours:02d}:{minutes:02d}:{secs:02d}{separator}{millis:03d}"


def sentence_case(text: str) -> str:
    """'THE RIGHT TIME TO ACT' -> 'The right time to act': for all-caps models without a
    punctuation model; other text (mixed case, CJK) is left as it is."""
    letters = [c for c in text if c.isalpha() and not is_cjk(c)]
    if not letters or any(c.islower() for c in letters):
        return text
    lowered = text.lower()
    words = lowered.split(" ")
    fixed = [("I" + w[1:]) if w == "i" or w.startswith("i'") else w for w in words]
    out = " ".join(fixed)
    for index, char in enumerate(out):
        if char.isalpha():
            return out[:index] + char.upper() + out[index + 1 :]
    return out
