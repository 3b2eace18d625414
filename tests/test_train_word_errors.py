"""The training script's dev WER counts word edits exactly as before it used jiwer.

Why: the loss curves in models/tiny-en/README.md were logged with a hand-written edit
distance; the jiwer count that replaced it must give the same number for every pair, including
the raw-text cases (a stray apostrophe is a word) that bench's normalised scoring treats
differently on purpose.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
import train_tiny_model as ttm  # noqa: E402

# (reference, hypothesis, word edits): counted by hand, and what the old code returned.
PAIRS = [
    ("MOTHER WALK SEVEN", "MOTHER WALK SEVEN", 0),
    ("MOTHER WALK SEVEN", "MOTHER TALK SEVEN", 1),  # one substitution
    ("MOTHER WALK SEVEN", "MOTHER SEVEN", 1),  # one deletion
    ("MOTHER WALK SEVEN", "MOTHER WALK SEVEN NINE", 1),  # one insertion
    ("MOTHER WALK SEVEN", "", 3),  # nothing recognised
    ("", "MOTHER WALK", 2),  # text where none was said
    ("", "", 0),
    ("THE CAT SAT", "CAT SAT THE", 2),  # a rotation: one deletion and one insertion
    ("ONE TWO THREE", "THREE TWO ONE", 2),  # the ends swapped: two substitutions
    ("DON'T GO", "DON' T GO", 2),  # a split word: one substitution, one insertion
    ("A B", "A ' B", 1),  # a stray apostrophe from a character model is an insertion
    ("A  B ", " A B", 0),  # spacing is not a word
]


@pytest.mark.parametrize(("ref", "hyp", "edits"), PAIRS)
def test_word_errors(ref: str, hyp: str, edits: int) -> None:
    assert ttm.word_errors(ref, hyp) == edits
