"""Property tests of the small files a user or a model folder hands over: hotword lists, a
model's tokens.txt, bearer token files and the settings TOML.

Each file is made of lines near the valid form (and bytes that are not text at all): it is
read as written or refused with the reader's one error (UsageError, ModelError) in a line.
"""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path

from fuzz_inputs import accepted, assert_clear, scratch
from hypothesis import example, given
from hypothesis import strategies as st

from streamasr import config
from streamasr.backends.sherpa.hotwords import (
    MAX_HOTWORD_CHARS,
    engine_hotword_options,
    read_phrases,
)
from streamasr.backends.sherpa.modeldir import check_tokens, resolve_model
from streamasr.errors import ModelError, UsageError
from streamasr.server.limits import load_token
from streamasr.text.tokens import MAX_TOKEN_ID, read_vocabulary

FOLDER = scratch("streamasr-fuzz-files-")
TINY_EN = resolve_model("tiny-en")
VOCABULARY = read_vocabulary(TINY_EN.tokens)
#: Words the bundled English model can spell, and some it cannot.
WORDS = st.sampled_from(["HELLO", "world", "seven", "Nine", "中文", "x" * 300, "", " ", "\t"])


def _file(data: bytes, name: str = "file.txt") -> Path:
    path = Path(tempfile.mkdtemp(dir=FOLDER)) / name
    path.write_bytes(data)
    return path


def _lines(parts: st.SearchStrategy[str], most: int = 6) -> st.SearchStrategy[bytes]:
    """Files of such lines (any line ending), or of any bytes."""
    text = st.tuples(st.lists(parts, max_size=most), st.sampled_from(["\n", "\r\n", "\r"]))
    return text.map(lambda item: item[1].join(item[0]).encode("utf-8")) | st.binary(max_size=64)


# -- hotwords -----------------------------------------------------------------------------


SCORES = st.sampled_from([" :2.5", " :-1", ":3", " :", " :1e9", " : 2", " :x"])
HOTWORD_LINES = st.tuples(st.lists(WORDS | st.text(max_size=10), max_size=3), st.just("")
                          | SCORES).map(lambda item: " ".join(item[0]) + item[1])  # fmt: skip


@given(_lines(HOTWORD_LINES))
# a refusal that named all 2000 words the model cannot spell (15 kB)
@example(("ZZQQ ZZQQ\n" * 2 + "\n".join(f"Q{n}Q" for n in range(2000))).encode())
def test_a_hotwords_file_is_read_and_checked_or_one_usage_error(data: bytes) -> None:
    path = _file(data)
    try:
        phrases = read_phrases(path)
        with engine_hotword_options(path, VOCABULARY, TINY_EN.directory) as options:
            assert options["modeling_unit"] == VOCABULARY.modeling_unit
    except UsageError as exc:
        assert_clear(exc)
        return
    accepted()
    assert phrases and all(p == p.strip() and 0 < len(p) <= MAX_HOTWORD_CHARS for p in phrases)
    assert all("\n" not in p and "\r" not in p for p in phrases)


def test_a_folder_as_the_hotwords_file_is_one_usage_error() -> None:
    try:
        read_phrases(FOLDER)
    except UsageError as exc:
        assert_clear(exc)
        assert "folder" in str(exc)
    else:
        raise AssertionError("a folder was read as a hotwords file")


# -- a model's tokens.txt -----------------------------------------------------------------


TOKEN_LINES = st.one_of(
    st.tuples(st.text(max_size=4), st.integers(0, 600).map(str)).map(" ".join),
    st.sampled_from(["▁A 99999999999", "x ²", "x \u0661", "x -1", "x 1 2", "5", "x " + "9" * 5000,
                     "<blk> 0", "x 0x10", ""]),
)  # fmt: skip


@given(st.booleans(), _lines(TOKEN_LINES))
@example(True, b"x 99999999999\n")  # a tuple of 10^11 symbols: unbounded memory
@example(True, "x \u00b2\n".encode())  # '²'.isdigit() but no int(): ValueError
@example(True, b"x 1" + b"0" * 5000)  # more digits than int() converts: ValueError
def test_a_tokens_txt_fits_the_model_or_is_one_model_error(model_own: bool, data: bytes) -> None:
    """As a model folder is loaded: check_tokens first (the model's vocabulary size), then
    read_vocabulary (the symbols). `model_own`: the model's own tokens.txt, lines added."""
    lines = (TINY_EN.tokens.read_bytes() if model_own else b"") + data
    files = dataclasses.replace(TINY_EN, tokens=_file(lines, "tokens.txt"))
    try:
        count = check_tokens(files)
        vocabulary = read_vocabulary(files.tokens)
    except ModelError as exc:
        assert_clear(exc)
        return
    accepted()
    assert count >= len(VOCABULARY.symbols)
    assert len(vocabulary.symbols) <= MAX_TOKEN_ID + 1
    if data in (b"", b"\n"):
        assert vocabulary == VOCABULARY


# -- bearer token files -------------------------------------------------------------------


@given(_lines(st.text(max_size=20) | st.sampled_from(["  secret  ", "\ufeffsecret", "\0"])))
def test_a_token_file_gives_its_first_line_or_one_usage_error(data: bytes) -> None:
    path = _file(data, "token")
    try:
        token = load_token(str(path))
    except UsageError as exc:
        assert_clear(exc)
        return
    accepted()
    assert token and token == token.strip() and "\n" not in token and "\r" not in token
    assert token == data.decode("utf-8").strip().splitlines()[0].strip()


# -- the settings file --------------------------------------------------------------------


TOML_VALUES = st.sampled_from(['"tiny-en"', "true", "false", '""', "1", "1979-05-27",
                               '"a\\u0000b"', "[1, 2]", "{a = 1}", '"""x"""', "nan", "inf",
                               "[" * 5000, "{a = " * 3000, "'x"])  # fmt: skip
TOML_KEYS = st.sampled_from([*config.KEYS, "unknown", "a.b", '"model"', "[table]"])
VALID_TOML = st.sampled_from(['model = "tiny-en"', 'device = "cpu"', 'format = "jsonl"',
                              "hints = false", "# a comment", ""])  # fmt: skip
TOML_LINES = VALID_TOML | st.tuples(TOML_KEYS, TOML_VALUES).map(" = ".join) | st.text(max_size=20)


@given(_lines(TOML_LINES))
@example(b"model = " + b"[" * 5000)  # RecursionError from the TOML reader
def test_a_settings_file_is_read_or_one_usage_error(data: bytes) -> None:
    path = _file(data, "config.toml")
    try:
        values = config._read_file(path)
    except UsageError as exc:
        assert_clear(exc)
        return
    accepted()
    for key, value in values.items():
        assert isinstance(value, config.KEYS[key][0])
        assert not isinstance(value, str) or value.strip()
