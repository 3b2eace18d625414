"""Words with times from a final's tokens, and subtitle cues that follow subtitle practice.

Why: an engine reports pieces (BPE pieces, CJK characters, bytes) and the time each was
emitted; a reader wants words, and a subtitle wants short cues that split where words do.
The words are those of the final's text, split by the one rule in `tokens.split_words`, so
text, JSONL words and captions never disagree. A word starts at its first piece's time.
Transducer tokens carry emission times, not boundaries, so a word ends at the next word's
start, but at most WORD_TAIL_S after its last piece (a pause is not part of the word), and
never after the final's end.

Cue rules (`CueRules`; figures from Netflix's Timed Text Style Guide and the BBC Subtitle
Guidelines, docs/file.md): at most 2 lines of 42 characters and 7 s; at least 0.8 s on
screen; at most 20 characters per second. A cue too short or too fast is first extended into
the silence after it (never over the next cue), and the cue boundaries are chosen so that
few cues still break a rule (merging words into a neighbour where that helps); no cue of
fewer than 3 words where the utterance can give it neighbours; lines and cues break at
balanced points, preferably after punctuation, at a pause or before a conjunction, and not
after an article or preposition. What speech itself makes impossible (words faster than
20 characters per second with no silence after them) is counted (`CueStats`), not hidden.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from streamasr.text.tokens import is_cjk, join_words, piece_words, split_words

WORD_TAIL_S = 0.5
MAX_LINE_CHARS = 42
MAX_LINES = 2
MAX_CUE_S = 7.0
MIN_CUE_S = 0.8
MAX_CPS = 20.0
MIN_CUE_WORDS = 3

#: The range each rule accepts (the command-line options check against these).
LINE_CHARS_RANGE = (10, 200)
LINES_RANGE = (1, 3)
MAX_CUE_S_RANGE = (1.0, 60.0)
MIN_CUE_S_RANGE = (0.0, 10.0)
MAX_CPS_RANGE = (5.0, 100.0)
MIN_WORDS_RANGE = (1, 10)

_EPSILON = 1e-6


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

    @property
    def chars(self) -> int:
        """Characters read: the lines' characters, spaces included, line breaks not."""
        return sum(len(line) for line in self.lines)

    @property
    def cps(self) -> float:
        """Reading speed in characters per second (infinite for a cue of no duration)."""
        duration = self.end_s - self.start_s
        return self.chars / duration if duration > 0 else math.inf


@dataclass(frozen=True)
class CueRules:
    """The limits a cue keeps to (see the module docstring for where the figures come from)."""

    line_chars: int = MAX_LINE_CHARS
    lines: int = MAX_LINES
    max_s: float = MAX_CUE_S
    min_s: float = MIN_CUE_S
    max_cps: float = MAX_CPS
    # a cue of fewer words is an orphan when the utterance has enough words to avoid it
    min_words: int = MIN_CUE_WORDS


@dataclass
class CueStats:
    """What a run of cues came to: how many, and how many the speech made break a rule."""

    cues: int = 0
    too_fast: int = 0  # over max_cps: the words come faster and no silence follows them
    too_short: int = 0  # under min_s: the next words follow too closely
    orphans: int = 0  # fewer than min_words although the utterance had more words

    def count(self, cues: Sequence[Cue], rules: CueRules, words: int) -> None:
        """Add one utterance's cues (`words`: how many words the utterance had)."""
        self.cues += len(cues)
        for cue in cues:
            self.too_fast += cue.cps > rules.max_cps + _EPSILON
            self.too_short += cue.end_s - cue.start_s < rules.min_s - _EPSILON
            if words >= rules.min_words:
                self.orphans += len(split_words(" ".join(cue.lines))) < rules.min_words

    def note(self, rules: CueRules) -> str:
        """One sentence about the cues that break a rule ('' when none does)."""
        parts = []
        if self.too_fast:
            parts.append(f"{self.too_fast} read faster than {rules.max_cps:g} characters/s")
        if self.too_short:
            parts.append(f"{self.too_short} last under {rules.min_s:g} s")
        if self.orphans:
            parts.append(f"{self.orphans} hold fewer than {rules.min_words} words")
        if not parts:
            return ""
        return f"of {self.cues} cues, {', '.join(parts)}: the speech left no room to do better"


def words_of(tokens: Sequence[str], times_s: Sequence[float], end_s: float) -> tuple[Word, ...]:
    """The words of the pieces' text (`tokens.piece_words`: as `split_words` splits the text
    they assemble into), each starting at the time of the piece that gave its first byte."""
    if len(times_s) < len(tokens):
        tokens = tokens[: len(times_s)]
    spans = piece_words(tokens)
    words = []
    for index, span in enumerate(spans):
        start, last = times_s[span.first_piece], times_s[span.last_piece]
        limit = times_s[spans[index + 1].first_piece] if index + 1 < len(spans) else end_s
        end = max(start, min(limit, last + WORD_TAIL_S, max(end_s, start)))
        words.append(Word(span.text, round(start, 3), round(end, 3)))
    return tuple(words)


def even_words(texts: Sequence[str], start_s: float, end_s: float) -> tuple[Word, ...]:
    """Words spread evenly over a span, for text without token times."""
    step = max(0.0, end_s - start_s) / max(1, len(texts))
    return tuple(
        Word(text, round(start_s + i * step, 3), round(start_s + (i + 1) * step, 3))
        for i, text in enumerate(texts)
    )


def respelled(words: Sequence[Word], text: str) -> tuple[Word, ...]:
    """The words of `text` (a finisher's new spelling of the words' text) with the words'
    times; should a finisher change the word count, the new words share the old span evenly."""
    spelled = split_words(text)
    if len(spelled) == len(words):
        return tuple(Word(t, w.start_s, w.end_s) for w, t in zip(words, spelled, strict=True))
    if not words:
        return ()
    return even_words(spelled, words[0].start_s, words[-1].end_s)


# Break points (English; other languages are broken at balanced points only). Netflix's guide:
# break after punctuation and before conjunctions and prepositions; never split an article
# from its noun or a preposition from what follows it.
_CONJUNCTIONS = frozenset(
    "and but or nor so yet because although though while whereas if unless until when whenever "
    "where which who whom whose that than".split()
)
_PREPOSITIONS = frozenset(
    "of to in on at for with from by about into onto over under after before between through "
    "during without within against among".split()
)
_BINDING = frozenset("a an the my your his her its our their this these those".split())
_BINDING |= _PREPOSITIONS
_PAUSE_S = 0.25  # a silence between two words this long is a natural break


def _bare(word: str) -> str:
    return word.strip("\"'()[]").lower()


def _break_cost(before: Word, after: Word) -> float:
    """What breaking between two words costs (negative: a good place)."""
    cost = 0.0
    if before.text[-1:] in ".?!。？！":
        cost -= 8
    elif before.text[-1:] in ",;:，；：":
        cost -= 5
    if after.start_s - before.end_s >= _PAUSE_S:
        cost -= 4
    if _bare(after.text) in _CONJUNCTIONS or _bare(after.text) in _PREPOSITIONS:
        cost -= 3
    if _bare(before.text) in _BINDING:
        cost += 6
    return cost


class _Builder:
    """Cue choices over one utterance's words. The length of any run of words as text is
    read off prefix sums (`join_words` puts one space between words, none between CJK
    characters), so trying a cue costs no string work."""

    def __init__(self, words: Sequence[Word], rules: CueRules) -> None:
        self.words = words
        self.rules = rules
        self._sizes = [0]  # characters of words[:i]
        self._spaces = [0, 0]  # spaces between the words of words[:i]
        for index, word in enumerate(words):
            self._sizes.append(self._sizes[-1] + len(word.text))
            if index:
                before, after = words[index - 1].text[-1:], word.text[:1]
                joined = bool(before and after) and is_cjk(before) and is_cjk(after)
                self._spaces.append(self._spaces[-1] + (0 if joined else 1))

    def length(self, first: int, stop: int) -> int:
        """Characters of words[first:stop] as one line."""
        return self._sizes[stop] - self._sizes[first] + self._spaces[stop] - self._spaces[first + 1]

    def text(self, first: int, stop: int) -> str:
        return join_words(w.text for w in self.words[first:stop])

    def fits(self, first: int, stop: int) -> bool:
        """words[first:stop] fill at most `lines` lines of `line_chars` (each line as full as
        it can be, which is the best test); a single word longer than a line fits alone."""
        if stop - first == 1:
            return True
        position = first
        for _ in range(self.rules.lines):
            low, high = position, stop  # the longest line from position: words[position:high]
            while low < high:
                middle = (low + high + 1) // 2
                if self.length(position, middle) <= self.rules.line_chars:
                    low = middle
                else:
                    high = middle - 1
            if low == stop:
                return True
            if low == position:
                return False  # a word longer than a line, among others
            position = low
        return False

    def wrap(self, first: int, stop: int) -> tuple[str, ...]:
        """The lines of words[first:stop] (which fit): one line when it fits; otherwise the
        fewest lines, broken where lengths balance and the break points are good (a slightly
        shorter top line preferred)."""
        rules = self.rules
        if self.length(first, stop) <= rules.line_chars or stop - first == 1:
            return (self.text(first, stop),)
        for count in range(2, rules.lines + 1):
            best: tuple[float, tuple[int, ...]] | None = None
            for cuts in itertools.combinations(range(first + 1, stop), count - 1):
                bounds = (first, *cuts, stop)
                lengths = [self.length(a, b) for a, b in itertools.pairwise(bounds)]
                if max(lengths) > rules.line_chars:
                    continue
                cost = float(max(lengths) - min(lengths))
                cost += sum(_break_cost(self.words[c - 1], self.words[c]) for c in cuts)
                cost += 1.0 if lengths[0] > lengths[-1] else 0.0  # bottom-heavy preferred
                if best is None or cost < best[0]:
                    best = (cost, bounds)
            if best is not None:
                return tuple(self.text(a, b) for a, b in itertools.pairwise(best[1]))
        return (self.text(first, stop),)

    def timing(
        self, first: int, stop: int, start_s: float, free_until_s: float, chars: int
    ) -> float:
        """The end of a cue of words[first:stop] shown from start_s: its words' end, extended
        as far as the minimum duration and reading speed need, but not past free_until_s
        (the next cue, or the silence after the utterance) nor the longest duration."""
        rules = self.rules
        spoken = self.words[stop - 1].end_s
        need = max(spoken, start_s + rules.min_s, start_s + chars / rules.max_cps)
        limit = max(min(free_until_s, start_s + rules.max_s), min(spoken, free_until_s))
        return max(start_s, min(need, limit))


def cues_of(
    words: Sequence[Word],
    not_before_s: float = 0.0,
    rules: CueRules | None = None,
    free_until_s: float | None = None,
) -> list[Cue]:
    """One utterance's cues. `not_before_s`: where the previous cue ended; `free_until_s`:
    how far the last cue may extend into the silence after the utterance (None: not past its
    last word). The cue boundaries are the ones that break the fewest rules (too fast, too
    short, orphan), then make the fewest cues at the best break points."""
    rules = rules or CueRules()
    count = len(words)
    if count == 0:
        return []
    builder = _Builder(words, rules)
    last_free = max(words[-1].end_s, free_until_s if free_until_s is not None else 0.0)
    inf = math.inf
    best: list[float] = [0.0] + [inf] * count
    choice: list[int] = [0] * (count + 1)
    for stop in range(1, count + 1):
        for first in range(stop - 1, -1, -1):
            if best[first] == inf:
                continue
            if stop - first > 1 and words[stop - 1].end_s - words[first].start_s > rules.max_s:
                break
            if not builder.fits(first, stop):
                break
            cost = best[first] + _cue_cost(builder, first, stop, not_before_s, last_free)
            if cost < best[stop]:
                best[stop], choice[stop] = cost, first
    bounds = [count]
    while bounds[-1] > 0:
        bounds.append(choice[bounds[-1]])
    bounds.reverse()
    cues = []
    for first, stop in itertools.pairwise(bounds):
        lines = builder.wrap(first, stop)
        start = max(words[first].start_s, not_before_s)
        free = words[stop].start_s if stop < count else last_free
        end = builder.timing(first, stop, start, free, sum(len(line) for line in lines))
        # to the millisecond, rounding an extension up (not under its reading speed again)
        up, limit = math.ceil(end * 1000 - 1e-6) / 1000, math.floor(free * 1000 + 1e-6) / 1000
        end = max(round(end, 3), min(up, limit))
        cues.append(Cue(lines, round(start, 3), end))
        not_before_s = end
    return cues


def _cue_cost(
    builder: _Builder,
    first: int,
    stop: int,
    not_before_s: float,
    last_free_s: float,
) -> float:
    """What one candidate cue costs: a rule it breaks far more than anything else."""
    words, rules = builder.words, builder.rules
    start = words[first].start_s if first else max(words[0].start_s, not_before_s)
    free = words[stop].start_s if stop < len(words) else last_free_s
    chars = builder.length(first, stop)  # at least the lines' characters
    end = builder.timing(first, stop, start, free, chars)
    duration = end - start
    cost = 20.0  # fewer, fuller cues
    if duration <= 0 or chars / duration > rules.max_cps + _EPSILON:
        cps = chars / duration if duration > 0 else 1000.0
        cost += 1000.0 + 100.0 * min(10.0, cps / rules.max_cps - 1)
    if duration < rules.min_s - _EPSILON:
        cost += 500.0 + 100.0 * (rules.min_s - duration)
    if stop - first < rules.min_words and len(words) >= rules.min_words:
        cost += 300.0
    if stop < len(words):
        cost += _break_cost(words[stop - 1], words[stop])
    return cost


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
