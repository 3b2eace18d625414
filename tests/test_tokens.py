"""Token types and text assembly: whole characters only, one spacing rule, nothing complete lost.

Property tests drive `assemble` with many random byte streams cut into random pieces and fed
as growing prefixes, the way the engine hands out a partial after every chunk.
"""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from streamasr.text.tokens import (
    WORD_BOUNDARY,
    assemble,
    decode_utf8,
    detect_token_type,
    read_vocabulary,
    tidy_spacing,
)

MODELS = Path(__file__).resolve().parent.parent / "models"
# measured on the bundled model: models/tiny-en/README.md. (token type, modeling unit) of its
# tokens.txt: a closed vocabulary of whole words is ("word", "bpe"), SentencePiece is ("bpe", "bpe")
TINY_EN_TOKEN_TYPE = ("bpe", "bpe")


def _byte_pieces(data: bytes) -> list[str]:
    return [f"<0x{b:02X}>" for b in data]


def test_bundled_models_have_the_expected_token_types() -> None:
    expected = {
        "tiny-en": TINY_EN_TOKEN_TYPE,
        "tiny-random-transducer": ("bpe", "bpe"),
        "tiny-random-bpe": ("bpe", "bpe"),
        "tiny-random-cjkchar": ("cjkchar", "cjkchar"),
        "tiny-random-cjkchar-bpe": ("cjkchar+bpe", "cjkchar+bpe"),
        "tiny-random-byte": ("byte", ""),
    }
    for name, (token_type, unit) in expected.items():
        vocab = read_vocabulary(MODELS / name / "tokens.txt")
        assert (vocab.token_type, vocab.modeling_unit) == (token_type, unit), name


def test_detect_token_type_from_symbols() -> None:
    assert detect_token_type(["<blk>", "你", "好"]) == "cjkchar"
    assert detect_token_type(["<blk>", "你", f"{WORD_BOUNDARY}HE", "LLO"]) == "cjkchar+bpe"
    assert detect_token_type(["<blk>", f"{WORD_BOUNDARY}HELLO", f"{WORD_BOUNDARY}A"]) == "word"
    assert detect_token_type(["<blk>", f"{WORD_BOUNDARY}HE", "LLO"]) == "bpe"
    assert detect_token_type(["<blk>", "<0xE4>", f"{WORD_BOUNDARY}A"]) == "byte"


def test_spacing_rule_per_token_type() -> None:
    b = WORD_BOUNDARY
    assert assemble(["你", "好", "世", "界"]).text == "你好世界"
    assert assemble([f"{b}HE", "LLO", f"{b}WORLD"]).text == "HELLO WORLD"
    # a CJK/Latin boundary gets one space whether or not the model emitted a boundary mark
    assert assemble(["我", "们", f"{b}HE", "LLO", "世", "界"]).text == "我们 HELLO 世界"
    assert assemble(["我", f"{b}A", f"{b}B", "你"]).text == "我 A B 你"
    # a stray boundary mark between two CJK characters is not a space
    assert assemble(["你", b, "好"]).text == "你好"
    assert tidy_spacing("  你 好  HELLO  world ") == "你好 HELLO world"
    assert tidy_spacing("你好,世界") == "你好,世界"  # punctuation is not a Latin word


def test_byte_pieces_become_whole_characters() -> None:
    pieces = _byte_pieces("中文".encode())
    assert assemble(pieces[:1]).text == ""
    assert assemble(pieces[:1]).pending_bytes == 1
    assert assemble(pieces[:2]).pending_bytes == 2
    assert assemble(pieces[:3]).text == "中"
    assert assemble(pieces[:5]).text == "中"
    assert assemble(pieces).text == "中文"
    mixed = [f"{WORD_BOUNDARY}THE", *pieces]
    assert assemble(mixed).text == "THE 中文"


def test_incomplete_tail_is_dropped_and_counted_at_a_final() -> None:
    pieces = _byte_pieces("中".encode() + "文".encode()[:2])
    partial = assemble(pieces)
    assert (partial.text, partial.pending_bytes, partial.dropped_bytes) == ("中", 2, 0)
    final = assemble(pieces, final=True)
    assert (final.text, final.pending_bytes, final.dropped_bytes) == ("中", 0, 2)


def test_bytes_that_can_never_form_a_character_are_dropped_and_counted() -> None:
    # lone continuation byte, a lead byte followed by ASCII, an invalid byte 0xFF
    data = b"\xb8A\xe4B\xff" + "好".encode()
    text, pending, dropped = decode_utf8(data, final=False)
    assert (text, pending, dropped) == ("AB好", 0, 3)
    assert "\ufffd" not in assemble(_byte_pieces(data)).text


def test_replacement_character_in_a_token_is_never_shown() -> None:
    result = assemble(["你", "\ufffd", "好"])
    assert result.text == "你好"
    assert result.dropped_bytes == 3


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=60))
def test_any_byte_stream_accounts_for_every_byte(data: bytes) -> None:
    for final in (False, True):
        text, pending, dropped = decode_utf8(data, final)
        assert "\ufffd" not in text
        text.encode("utf-8")  # no lone surrogates: every character is whole
        assert pending < 4
        assert len(text.encode("utf-8")) + pending + dropped == len(data)
        if final:
            assert pending == 0


@settings(max_examples=300, deadline=None)
@given(
    st.text(
        alphabet=st.sampled_from(list("中文你好世界ABC é😀") + [WORD_BOUNDARY]),
        max_size=20,
    ),
    st.lists(st.integers(min_value=1, max_value=5), max_size=40),
)
def test_growing_prefixes_never_show_half_a_character_and_lose_nothing(
    text: str, cuts: list[int]
) -> None:
    """Text split into byte pieces and UTF-8 pieces at random, fed as growing prefixes."""
    data = text.replace(WORD_BOUNDARY, " ").encode("utf-8")
    pieces: list[str] = []
    pos = 0
    for i, size in enumerate(cuts * 20):
        if pos >= len(data):
            break
        chunk = data[pos : pos + size]
        try:
            pieces.append(chunk.decode("utf-8") if i % 2 else _raise())
        except (UnicodeDecodeError, ValueError):
            pieces.extend(_byte_pieces(chunk))
        pos += size
    pieces.extend(_byte_pieces(data[pos:]))
    expected = tidy_spacing(text.replace(WORD_BOUNDARY, " "))
    shown = ""
    for end in range(len(pieces) + 1):
        result = assemble(pieces[:end])
        assert "\ufffd" not in result.text
        assert result.dropped_bytes == 0
        # each partial is the final text so far: whole characters, nothing taken back
        assert expected.startswith(result.text.rstrip()) or expected.replace(" ", "").startswith(
            result.text.replace(" ", "")
        )
        assert len(result.text.replace(" ", "")) >= len(shown.replace(" ", ""))
        shown = result.text
    final = assemble(pieces, final=True)
    assert final.text == expected
    assert (final.pending_bytes, final.dropped_bytes) == (0, 0)


def _raise() -> str:
    raise ValueError("use byte pieces")
