"""Hotwords: check that every word can be written in the model's tokens, and tell the engine how.

Why: sherpa-onnx encodes a hotwords file with the model's modeling unit (``cjkchar``,
``bpe``, ``cjkchar+bpe``) and, for BPE, a ``bpe.vocab`` of pieces. Without them, or for a
word its tokens cannot spell, it logs "Failed to encode some hotwords, skip them" and runs on
as if there were none. Here the file is checked first, so a word that cannot be encoded is
refused by name, and the engine is given the unit and a vocabulary (the model's own
``bpe.vocab``, or one written from tokens.txt when the model ships none).

Case: the engine matches pieces exactly, so ``guy`` is no word of an all-caps vocabulary.
When a model's tokens are all upper case (the bundled English models) or all lower case,
hotwords are folded to that case first, and the engine reads a folded copy of the file; a
vocabulary that mixes cases is taken as written. CJK characters are never changed.

File format (the engine's): one hotword or phrase per line, an optional `` :SCORE`` at the end
of a line overrides --hotwords-score for it; blank lines are ignored. A list is bounded (at
most MAX_HOTWORDS_BYTES, lines of at most MAX_HOTWORD_CHARS) and read in linear time, so a
huge or hostile file is refused at once instead of stalling the engine's load.
"""

from __future__ import annotations

import contextlib
import re
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from streamasr.errors import OutputError, UsageError
from streamasr.text.tokens import WORD_BOUNDARY, Vocabulary, byte_value, is_cjk
from streamasr.whole_file import read_whole

# With the engine's default 4 active paths a word the model scores low never enters the
# beam, so its bonus is never applied; hotwords widen the beam to at least this.
HOTWORD_MIN_ACTIVE_PATHS = 32
# a list of tens of thousands of phrases fits; the engine builds its context graph from it at
# every load, so a longer one would only slow the start
MAX_HOTWORDS_BYTES = 1 << 20
MAX_HOTWORD_CHARS = 256  # one word or phrase per line, not a paragraph
SHOWN_WORDS = 10  # words a refusal names (then how many more)
_SCORE = re.compile(r"[-+]?\d+(\.\d*)?")


@dataclass(frozen=True)
class HotwordCheck:
    """The phrases of a hotwords file and the words among them the model cannot spell."""

    phrases: tuple[str, ...]
    unencodable: tuple[str, ...]


def read_phrases(path: Path) -> tuple[str, ...]:
    """Non-empty lines without their optional ' :SCORE' suffix (size and line length checked)."""
    return _phrases(path, _read_text(path))


def _read_text(path: Path) -> str:
    """The file as text, its size bounded (a FIFO or a device is refused, not waited on)."""
    data = read_whole(
        path, "--hotwords file", MAX_HOTWORDS_BYTES,
        "list the words and short phrases to boost, one per line (tens of thousands fit)",
        UsageError,
    )  # fmt: skip
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"--hotwords file {path} is not UTF-8 text; save it as UTF-8") from exc
    return text


def _phrases(path: Path, text: str) -> tuple[str, ...]:
    phrases = []
    for number, line in enumerate(text.splitlines(), 1):
        if len(line) > MAX_HOTWORD_CHARS:
            raise UsageError(
                f"--hotwords file {path}: line {number} has {len(line)} characters (at most "
                f"{MAX_HOTWORD_CHARS}); put one word or short phrase on each line"
            )
        phrase = _without_score(line)
        if phrase:
            phrases.append(phrase)
    return tuple(phrases)


def _without_score(line: str) -> str:
    """The phrase of one line: an optional `` :SCORE`` at its end taken off (linear time)."""
    head, colon, score = line.rpartition(":")
    if colon and head[-1:].isspace() and _SCORE.fullmatch(score.strip()):
        return head.strip()
    return line.strip()


def token_case(vocabulary: Vocabulary) -> str:
    """'upper' or 'lower' when every cased letter of the pieces has that case, else ''."""
    cased = {
        c
        for p in vocabulary.pieces
        if byte_value(p) is None
        for c in p
        if c.lower() != c.upper() and not is_cjk(c)
    }
    if cased and all(c.isupper() for c in cased):
        return "upper"
    if cased and all(c.islower() for c in cased):
        return "lower"
    return ""


def fold_case(text: str, case: str) -> str:
    """`text` in the model's token case ('upper', 'lower'; '' leaves it); CJK untouched."""
    if not case:
        return text
    fold = str.upper if case == "upper" else str.lower
    return "".join(c if is_cjk(c) else fold(c) for c in text)


def check_phrases(phrases: tuple[str, ...], vocabulary: Vocabulary) -> HotwordCheck:
    """Which words of the phrases the model's tokens cannot spell (in the engine's way), each
    folded to the token case first (see the module docstring) and named as written."""
    pieces = vocabulary.pieces
    longest = max((len(p) for p in pieces), default=0)
    case = token_case(vocabulary)
    seen: set[str] = set()
    bad: list[str] = []
    for phrase in phrases:
        for word in phrase.split():
            if word in seen:
                continue
            seen.add(word)
            if not _encodable(fold_case(word, case), vocabulary.token_type, pieces, longest):
                bad.append(word)
    return HotwordCheck(phrases, tuple(bad))


def _encodable(word: str, token_type: str, pieces: frozenset[str], longest: int) -> bool:
    if token_type in ("word", "bpe"):
        return _spells(WORD_BOUNDARY + word, pieces, longest)
    if token_type == "cjkchar":
        return all(char in pieces for char in word)
    if token_type == "cjkchar+bpe":
        return all(
            (run in pieces) if is_cjk(run[0]) else _spells(WORD_BOUNDARY + run, pieces, longest)
            for run in _runs(word)
        )
    return False


def _runs(word: str) -> list[str]:
    """Single CJK characters and maximal runs of other characters."""
    runs: list[str] = []
    for char in word:
        if is_cjk(char) or not runs or is_cjk(runs[-1][0]):
            runs.append(char)
        else:
            runs[-1] += char
    return runs


def _spells(text: str, pieces: frozenset[str], longest: int) -> bool:
    """True when text is a concatenation of vocabulary pieces (none longer than `longest`)."""
    reachable = [True] + [False] * len(text)
    for end in range(1, len(text) + 1):
        for start in range(max(0, end - longest), end):
            if reachable[start] and text[start:end] in pieces:
                reachable[end] = True
                break
    return reachable[-1]


@contextlib.contextmanager
def engine_hotword_options(
    hotwords_file: Path, vocabulary: Vocabulary, model_dir: Path
) -> Iterator[dict[str, str]]:
    """Check the file and yield the engine keywords (modeling_unit, bpe_vocab and, when its
    words were folded to the token case, hotwords_file) for it.

    A derived bpe.vocab and a folded hotwords file live in a temporary folder only while the
    engine loads them.
    """
    if vocabulary.token_type == "byte":
        raise UsageError(
            "--hotwords: this model's tokens are raw bytes (<0xE4>-style), which sherpa-onnx "
            "cannot encode hotwords with; drop --hotwords for this model"
        )
    text = _read_text(hotwords_file)
    phrases = _phrases(hotwords_file, text)
    if not phrases:
        raise UsageError(f"--hotwords file {hotwords_file} has no hotwords; one per line")
    found = check_phrases(phrases, vocabulary)
    if found.unencodable:
        raise UsageError(
            f"--hotwords: {_listed(found.unencodable)} cannot be written with this model's "
            f"tokens ({vocabulary.token_type}); {_hint(vocabulary)}"
        )
    options = {"modeling_unit": vocabulary.modeling_unit}
    to_write: dict[str, str] = {}  # engine keyword -> text of the temporary file it names
    folded = fold_case(text, token_case(vocabulary))
    if folded != text:
        to_write["hotwords_file"] = folded
    own = model_dir / "bpe.vocab"
    if vocabulary.token_type != "cjkchar":
        if own.is_file():
            options["bpe_vocab"] = str(own)
        else:
            to_write["bpe_vocab"] = _vocab_from_tokens(vocabulary)
    if not to_write:
        yield options
        return
    with _temporary_folder() as tmp:
        for keyword, content in to_write.items():
            path = Path(tmp) / f"{keyword}.txt"
            try:
                path.write_text(content, encoding="utf-8")
            except OSError as exc:
                raise _temporary_error(exc) from None
            options[keyword] = str(path)
        yield options


@contextlib.contextmanager
def _temporary_folder() -> Iterator[str]:
    """A temporary folder; one that cannot be made (full disk, no inodes) is one line."""
    try:
        folder = tempfile.TemporaryDirectory(prefix="streamasr-hotwords-")
    except OSError as exc:
        raise _temporary_error(exc) from None
    with folder as tmp:
        yield tmp


def _temporary_error(exc: OSError) -> OutputError:
    try:
        where = f"in {tempfile.gettempdir()} "
    except OSError:  # no usable temporary folder at all
        where = ""
    return OutputError(
        f"--hotwords: cannot write the model's word pieces or the case-folded hotwords to a "
        f"temporary file {where}"
        f"({exc.strerror or exc}); free space there or point TMPDIR at a writable folder"
    )


def _vocab_from_tokens(vocabulary: Vocabulary) -> str:
    """piece<TAB>score lines; longer pieces score higher, so the fewest pieces win."""
    return "".join(
        f"{p}\t{-1.0 / len(p):.4f}\n"
        for p in sorted(vocabulary.pieces)
        if not any(is_cjk(c) for c in p)
    )


def _listed(words: tuple[str, ...], most: int = SHOWN_WORDS) -> str:
    """The first `most` words, then how many more: a list of thousands stays one line."""
    shown = ", ".join(words[:most])
    return shown if len(words) <= most else f"{shown} and {len(words) - most} more"


def _hint(vocabulary: Vocabulary) -> str:
    if vocabulary.token_type == "cjkchar":
        return "use only characters that are in its tokens.txt"
    if vocabulary.token_type == "word":
        return "it knows whole words only: use words that are in its tokens.txt"
    mixed = not token_case(vocabulary) and any(
        c.lower() != c.upper() for p in vocabulary.pieces for c in p
    )
    if mixed:
        return "use words its tokens.txt can spell, in the case it writes them (it mixes cases)"
    return "use words its tokens.txt can spell (letters it has no piece for cannot be written)"
