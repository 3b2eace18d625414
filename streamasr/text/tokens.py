"""What kind of tokens a model emits, and how they become text that is always whole characters.

Why: released streaming models use four styles of tokens.txt, and the engine's own text is
wrong for some of them:

- ``word``: every token is a whole word with the SentencePiece boundary mark, ``▁HELLO``
  (the bundled tiny-en);
- ``bpe``: word pieces, ``▁HE`` ``LLO`` (English releases);
- ``cjkchar``: one Chinese character per token (Mandarin releases);
- ``cjkchar+bpe``: Chinese characters and English pieces in one vocabulary (the bilingual
  zh-en release);
- ``byte``: byte-fallback pieces such as ``<0xE4>``; three of them make one Chinese character.
  sherpa-onnx 2.0.1 returns these tokens as the literal ``<0xE4>`` strings and garbles the
  text, and other builds hand out half characters.

Text is assembled here from the token pieces: pieces become UTF-8 bytes, an incomplete
character at the end is held back until its last byte arrives (or dropped at a final, and
counted), bytes that can never form a character are dropped and counted, and spacing follows
one rule for every type: English words are separated by one space, CJK characters are not,
and a CJK character next to a Latin word gets one space between them.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from streamasr.errors import ModelError
from streamasr.text.prefix import Prefix

WORD_BOUNDARY = "\u2581"
TOKEN_TYPES = ("word", "bpe", "cjkchar", "cjkchar+bpe", "byte")
_BYTE_TOKEN = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")
#: The largest token id a tokens.txt may hold. Released vocabularies have up to some
#: hundred thousand tokens; the symbols are a table indexed by id, so one line claiming id
#: 99999999999 would otherwise ask for a table of 10^11 entries.
MAX_TOKEN_ID = (1 << 20) - 1


def token_id(raw: str) -> int | None:
    """The id at the end of a tokens.txt line: ASCII digits up to MAX_TOKEN_ID; else None
    (`str.isdigit` also takes '²' and Arabic-Indic digits, which `int` refuses)."""
    if not (raw.isascii() and raw.isdigit()) or len(raw) > len(str(MAX_TOKEN_ID)):
        return None
    value = int(raw)
    return value if value <= MAX_TOKEN_ID else None


def is_cjk(char: str) -> bool:
    """A character written without spaces around it (Chinese, Japanese kana, CJK punctuation)."""
    code = ord(char)
    return (
        0x4E00 <= code <= 0x9FFF  # CJK unified ideographs
        or 0x3400 <= code <= 0x4DBF  # extension A
        or 0x20000 <= code <= 0x2FA1F  # extensions B.. and compatibility supplement
        or 0xF900 <= code <= 0xFAFF  # compatibility ideographs
        or 0x3040 <= code <= 0x30FF  # hiragana, katakana
        or 0x3000 <= code <= 0x303F  # CJK punctuation
        or 0xFF00 <= code <= 0xFFEF  # full-width forms
    )


def _is_latin(char: str) -> bool:
    return char.isalnum() and not is_cjk(char)


def byte_value(piece: str) -> int | None:
    """The byte a ``<0xE4>``-style piece stands for; None for any other piece."""
    match = _BYTE_TOKEN.match(piece)
    return int(match.group(1), 16) if match else None


@dataclass(frozen=True)
class Vocabulary:
    """The symbols of a model's tokens.txt (index = token id) and their style."""

    symbols: tuple[str, ...]
    token_type: str

    @property
    def modeling_unit(self) -> str:
        """What sherpa-onnx's hotword encoder calls this style ('' where it has none)."""
        units = {"word": "bpe", "bpe": "bpe", "cjkchar": "cjkchar", "cjkchar+bpe": "cjkchar+bpe"}
        return units.get(self.token_type, "")

    @property
    def pieces(self) -> frozenset[str]:
        """Every symbol that is a real piece (no <blk>, <unk>, <sos/eos>)."""
        return frozenset(s for s in self.symbols if s and not _is_special(s))


def _is_special(symbol: str) -> bool:
    return symbol.startswith("<") and symbol.endswith(">") and byte_value(symbol) is None


def read_vocabulary(path: Path | str) -> Vocabulary:
    """Read tokens.txt ('<symbol> <id>' per line) and detect its token type."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ModelError(
            f"cannot read {path}: {exc}. Re-pull the model (streamasr models pull NAME --force)"
        ) from exc
    by_id: dict[int, str] = {}
    for number, line in enumerate(lines, 1):
        parts = line.rsplit(maxsplit=1)
        if not parts:
            continue
        if len(parts) == 1:
            # a bare id: the symbol is a space (some exports write " 5")
            symbol, raw_id = " ", parts[0]
        else:
            symbol, raw_id = parts
        token = token_id(raw_id)
        if token is None:
            raise ModelError(
                f"{path}:{number}: expected '<symbol> <id>' (an id from 0 to {MAX_TOKEN_ID}), "
                f"got {line[:40]!r}. Re-pull the model (streamasr models pull NAME --force)"
            )
        by_id[token] = symbol
    symbols = tuple(by_id.get(i, "") for i in range(max(by_id, default=-1) + 1))
    return Vocabulary(symbols, detect_token_type(symbols))


def detect_token_type(symbols: Iterable[str]) -> str:
    """One of TOKEN_TYPES from what the symbols look like (see the module docstring)."""
    pieces = [s for s in symbols if s and not _is_special(s)]
    if any(byte_value(s) is not None for s in pieces):
        return "byte"
    cjk = sum(1 for s in pieces if any(is_cjk(c) for c in s))
    latin = sum(1 for s in pieces if any(c.isascii() and c.isalpha() for c in s))
    if cjk and latin:
        return "cjkchar+bpe"
    if cjk:
        return "cjkchar"
    words = [s for s in pieces if s != WORD_BOUNDARY]
    if words and all(s.startswith(WORD_BOUNDARY) for s in words):
        return "word"
    return "bpe"


@dataclass(frozen=True)
class AssembledText:
    """Text of a token sequence, whole characters only."""

    text: str
    pending_bytes: int = 0  # an incomplete character at the end, held back
    dropped_bytes: int = 0  # bytes that can never form a character (and, at a final, pending)


def assemble(pieces: Sequence[str], final: bool = False) -> AssembledText:
    """Join token pieces into text; see the module docstring for the rules."""
    data = bytearray()
    for piece in pieces:
        value = byte_value(piece)
        if value is not None:
            data.append(value)
        else:
            data.extend(piece.replace(WORD_BOUNDARY, " ").encode("utf-8"))
    text, pending, dropped = decode_utf8(bytes(data), final)
    return AssembledText(tidy_spacing(text), pending, dropped)


def decode_utf8(data: bytes, final: bool) -> tuple[str, int, int]:
    """(text, pending, dropped): decode, holding back an incomplete tail unless final."""
    out: list[str] = []
    dropped = 0
    pos = 0
    while True:
        try:
            out.append(data[pos:].decode("utf-8"))
            pending = 0
            break
        except UnicodeDecodeError as exc:
            out.append(data[pos : pos + exc.start].decode("utf-8"))
            bad_start = pos + exc.start
            if exc.reason == "unexpected end of data":
                tail = len(data) - bad_start
                pending = 0 if final else tail
                dropped += tail if final else 0
                break
            dropped += exc.end - exc.start
            pos += exc.end
    text = "".join(out)
    replacement = text.count("\ufffd")
    if replacement:
        # a tokens.txt may itself hold U+FFFD; it is never shown
        dropped += 3 * replacement
        text = text.replace("\ufffd", "")
    return text, pending, dropped


def tidy_spacing(text: str) -> str:
    """One space between words, none between CJK characters, one at a CJK/Latin boundary."""
    out: list[str] = []
    prev = ""
    gap = False
    for char in text:
        if char.isspace() or not char.isprintable():
            gap = bool(out)
            continue
        if prev:
            both_cjk = is_cjk(prev) and is_cjk(char)
            boundary = (is_cjk(prev) and _is_latin(char)) or (_is_latin(prev) and is_cjk(char))
            if (gap and not both_cjk) or boundary:
                out.append(" ")
        out.append(char)
        prev = char
        gap = False
    return "".join(out)


def _is_separator(char: str) -> bool:
    return char.isspace() or not char.isprintable()


def _word_ranges(chars: Sequence[str]) -> list[tuple[int, int]]:
    """[start, end) of each word in `chars`: whitespace (and unprintable characters)
    separates words, and a CJK character is a word of its own."""
    ranges: list[tuple[int, int]] = []
    start = -1
    for index, char in enumerate(chars):
        if _is_separator(char) or is_cjk(char):
            if start >= 0:
                ranges.append((start, index))
                start = -1
            if not _is_separator(char):
                ranges.append((index, index + 1))
        elif start < 0:
            start = index
    if start >= 0:
        ranges.append((start, len(chars)))
    return ranges


def split_words(text: str) -> list[str]:
    """The words of a text, the one rule every output uses (text, JSONL words, captions, the
    finishers): whitespace separates words, and a CJK character is a word of its own."""
    return [text[start:end] for start, end in _word_ranges(text)]


def join_words(words: Iterable[str]) -> str:
    """Words back into text with `tidy_spacing`'s rule: one space between words, none
    between CJK characters."""
    return tidy_spacing(" ".join(words))


@dataclass(frozen=True)
class PieceWord:
    """One word of a piece sequence and the pieces it came from (indices into the pieces)."""

    text: str
    first_piece: int  # the piece that gave its first byte
    last_piece: int  # the piece that gave its last byte


def piece_words(pieces: Sequence[str]) -> tuple[PieceWord, ...]:
    """The words of `assemble(pieces, final=True).text` by `split_words`, each with the pieces
    it came from. Bytes are decoded as `assemble` decodes them (byte-level pieces included;
    what forms no character is dropped), so the words always spell that text: a piece that is
    only a space (some vocabularies have one) separates words as it does in the text."""
    decoder = codecs.getincrementaldecoder("utf-8")("ignore")
    chars: list[str] = []
    origins: list[int] = []  # the piece each character's first byte came from
    ends: list[int] = []  # the piece that completed it
    pending_from = 0  # the piece that gave the first byte still held by the decoder
    for index, piece in enumerate(pieces):
        value = byte_value(piece)
        if value is not None:
            data = bytes([value])
        else:
            data = piece.replace(WORD_BOUNDARY, " ").encode("utf-8")
        if not decoder.getstate()[0]:
            pending_from = index
        for char in decoder.decode(data):
            if char != "\ufffd":  # a tokens.txt may itself hold U+FFFD; it is never shown
                chars.append(char)
                origins.append(pending_from)
                ends.append(index)
            pending_from = index
    return tuple(
        PieceWord("".join(chars[start:end]), origins[start], ends[end - 1])
        for start, end in _word_ranges(chars)
    )


# Incremental assembly. A streaming engine hands out its whole hypothesis after every encoder
# step; re-assembling all of it each time makes the cost of a step grow with the utterance.
# The classes below keep where assembly stood after every update (a mark) and redo only what
# follows the last mark whose input is unchanged, so a step costs what it added. The results
# are exactly those of `tidy_spacing` and `assemble` on the whole input (tests/test_tokens.py
# checks that at every step, against those two functions, on every bundled model).

#: Pieces (or characters) at the end of the previous input that are compared when an engine
#: only ever appends (greedy search): a different tail means it started over or revised.
APPEND_CHECK = 4


def _space(text: str, prev: str, gap: bool) -> tuple[str, str, bool]:
    """`tidy_spacing` resumed after `prev` (the last character shown, '' for none) and `gap`
    (whitespace seen since it): (spaced text to append, new prev, new gap)."""
    out: list[str] = []
    prev_cjk = bool(prev) and is_cjk(prev)
    prev_latin = bool(prev) and prev.isalnum() and not prev_cjk
    for char in text:
        if char.isspace() or not char.isprintable():
            gap = bool(prev)
            continue
        cjk = is_cjk(char)
        latin = char.isalnum() and not cjk
        if prev:
            boundary = (prev_cjk and latin) or (prev_latin and cjk)
            if (gap and not (prev_cjk and cjk)) or boundary:
                out.append(" ")
        out.append(char)
        prev, prev_cjk, prev_latin = char, cjk, latin
        gap = False
    return "".join(out), prev, gap


def shared_prefix_len(old: Sequence[object], new: Sequence[object], append_only: bool) -> int:
    """How many leading items (characters or pieces) `new` shares with `old`.

    `append_only`: the producer only ever appends (greedy search), so when `new` is at least
    as long and agrees on the last APPEND_CHECK items of `old`, all of `old` is shared: O(1).
    Otherwise the items are compared in C (one slice comparison), and when they differ, a
    binary search finds where: O(len) at memcmp speed, never a Python loop per item.
    """
    size = len(old)
    if isinstance(old, Prefix) and old.shares_storage(new):
        return min(size, len(new))  # prefixes of one append-only list (streamasr.text.prefix)
    if len(new) >= size:
        if append_only:
            tail = max(0, size - APPEND_CHECK)
            if new[tail:size] == old[tail:]:
                return size
        elif new[:size] == old:
            return size
    low, high = 0, min(size, len(new))  # new[:low] == old[:low]; the answer is <= high
    while low < high:
        middle = (low + high + 1) // 2
        if new[:middle] == old[:middle]:
            low = middle
        else:
            high = middle - 1
    return low


@dataclass(frozen=True)
class _Mark:
    """Where assembly stood after one update; later updates resume from the last good one."""

    consumed: int  # input items (characters or pieces) behind this mark
    shown: int  # characters of assembled text behind it
    prev: str  # last character shown ('' for none)
    gap: bool  # whitespace seen after it
    carry: bytes = b""  # an unfinished character's first bytes (byte-level pieces)
    dropped: int = 0  # bytes dropped so far


class _Marks:
    """The marks of one segment, in input order; consumed never decreases along the list."""

    def __init__(self) -> None:
        self.marks = [_Mark(0, 0, "", False)]

    def resume(self, shared: int) -> _Mark:
        """Drop the marks past `shared` input items; the last one left is where to resume."""
        marks = self.marks
        if marks[-1].consumed > shared:
            low, high = 0, len(marks) - 1  # marks[0].consumed == 0 <= shared
            while low < high:
                middle = (low + high + 1) // 2
                if marks[middle].consumed <= shared:
                    low = middle
                else:
                    high = middle - 1
            del marks[low + 1 :]
        return marks[-1]

    def add(self, mark: _Mark) -> None:
        self.marks.append(mark)


class SpacedText:
    """`tidy_spacing` of a text that grows between calls (an engine's own text), costing what
    changed: the characters after the last mark whose input is still the same."""

    def __init__(self, append_only: bool = False) -> None:
        self.append_only = append_only
        self.reset()

    def reset(self) -> None:
        """Start a new segment."""
        self._raw = ""
        self._text = ""
        self._marks = _Marks()

    def update(self, raw: str) -> str:
        """The spaced text of `raw`, as `tidy_spacing(raw)` gives it."""
        shared = shared_prefix_len(self._raw, raw, self.append_only)
        if shared == len(raw) == len(self._raw):
            return self._text
        mark = self._marks.resume(shared)
        spaced, prev, gap = _space(raw[mark.consumed :], mark.prev, mark.gap)
        self._text = self._text[: mark.shown] + spaced
        self._raw = raw
        self._marks.add(_Mark(len(raw), len(self._text), prev, gap))
        return self._text


class PieceText:
    """`assemble` of a piece list that grows between calls (a hypothesis' token pieces),
    costing what changed: only the unfinished character's bytes are carried between pieces.

    `unchanged` after an update: the leading pieces it shared with the previous update.
    """

    def __init__(self, append_only: bool = False) -> None:
        self.append_only = append_only
        self.reset()

    def reset(self) -> None:
        """Start a new segment."""
        self._pieces: Sequence[str] = ()
        self._text = ""
        self._marks = _Marks()
        self.unchanged = 0

    def update(self, pieces: Sequence[str], final: bool = False) -> AssembledText:
        """The text of `pieces`, as `assemble(pieces, final)` gives it."""
        if not isinstance(pieces, (tuple, Prefix)):
            pieces = tuple(pieces)  # kept until the next update: must not change meanwhile
        shared = shared_prefix_len(self._pieces, pieces, self.append_only)
        self.unchanged = shared
        mark = self._marks.resume(shared)
        if mark.consumed < len(pieces) or mark.consumed < len(self._pieces):
            data = bytearray(mark.carry)
            for piece in pieces[mark.consumed :]:
                value = byte_value(piece)
                if value is not None:
                    data.append(value)
                else:
                    data.extend(piece.replace(WORD_BOUNDARY, " ").encode("utf-8"))
            decoded, pending, dropped = decode_utf8(bytes(data), final=False)
            spaced, prev, gap = _space(decoded, mark.prev, mark.gap)
            self._text = self._text[: mark.shown] + spaced
            carry = bytes(data[len(data) - pending :]) if pending else b""
            mark = _Mark(len(pieces), len(self._text), prev, gap, carry, mark.dropped + dropped)
            self._marks.add(mark)
        self._pieces = pieces
        carried = len(mark.carry)
        if final:
            return AssembledText(self._text, 0, mark.dropped + carried)
        return AssembledText(self._text, carried, mark.dropped)
