"""Everyday English sentences with exact transcripts, from WordNet's usage examples.

Why WordNet: the bundled model needs grammatical sentences of common words, and nothing
can be downloaded here. Debian's ``wordnet-base`` package (WordNet 3.0, Princeton's
permissive WordNet licence: use, copy, modify and distribute with the copyright notice)
holds ~48,000 short quoted usage examples in its glosses ("the state has elected a new
president"). Keeping those made only of the most common English words (``wordfreq``, from
PyPI; its word lists are CC BY-SA 4.0, used here only to choose which sentences to keep)
leaves a few thousand plain everyday sentences.

A transcript is the sentence upper-cased, with hyphens as spaces and every other
punctuation mark but the apostrophe removed: exactly the words a synthesiser speaks.
"""

from __future__ import annotations

import re
from pathlib import Path

WORDNET_DIR = Path("/usr/share/wordnet")
WORDNET_FILES = ("data.noun", "data.verb", "data.adj", "data.adv")
MIN_WORDS, MAX_WORDS = 4, 14
# Only plain letters, apostrophes, hyphens and light punctuation: no digits (a synthesiser
# would choose how to read them), no brackets, no abbreviations with dots inside.
_PLAIN = re.compile(r"^[A-Za-z][A-Za-z ,'\-]*[A-Za-z][.!?]?$")
_WORD = re.compile(r"[A-Za-z]+(?:'[A-Za-z]+)*")


def check_source() -> None:
    """Fail early, with the fix, when the WordNet database or wordfreq is missing."""
    if not all((WORDNET_DIR / name).is_file() for name in WORDNET_FILES):
        raise SystemExit(f"WordNet is missing under {WORDNET_DIR}: apt-get install wordnet-base")
    try:
        import wordfreq  # noqa: F401
    except ImportError:
        raise SystemExit("wordfreq is missing: pip install 'streamasr[train]'") from None


def usage_examples(wordnet_dir: Path = WORDNET_DIR) -> list[str]:
    """Every quoted usage example in the WordNet glosses, in file order, without repeats."""
    seen: dict[str, None] = {}
    for name in WORDNET_FILES:
        with (wordnet_dir / name).open(encoding="latin-1") as f:
            for line in f:
                if line.startswith("  ") or "|" not in line:
                    continue  # licence header, or a line without a gloss
                for example in re.findall(r'"([^"]+)"', line.split("|", 1)[1]):
                    seen.setdefault(example.strip(), None)
    return list(seen)


def transcript(sentence: str) -> str | None:
    """The upper-case words of a plain sentence, or None when it is not plain enough."""
    if not _PLAIN.match(sentence):
        return None
    words = _WORD.findall(sentence.replace("-", " "))
    return " ".join(words).upper() if words else None


def common_words(n: int) -> frozenset[str]:
    """The n most frequent English words, upper case (wordfreq's large English list)."""
    import wordfreq

    return frozenset(w.upper() for w in wordfreq.top_n_list("en", n))


def everyday_sentences(top_words: int = 5000) -> list[str]:
    """Transcripts of MIN_WORDS..MAX_WORDS words, every word among the top_words, sorted."""
    vocabulary = common_words(top_words)
    kept: set[str] = set()
    for example in usage_examples():
        text = transcript(example)
        if text is None:
            continue
        words = text.split()
        if MIN_WORDS <= len(words) <= MAX_WORDS and all(w in vocabulary for w in words):
            kept.add(text)
    return sorted(kept)
