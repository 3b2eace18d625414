"""Hotwords change what the engine outputs, and words a model cannot spell are refused by name.

Each run is a fresh `python -m streamasr.cli` process on a bundled model, as a user runs it.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import jiwer
import pytest

from streamasr.backends.sherpa.hotwords import check_phrases, fold_case, read_phrases, token_case
from streamasr.text.tokens import WORD_BOUNDARY, Vocabulary, read_vocabulary

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "models"
TINY_EN_CLIPS = MODELS / "tiny-en" / "test_wavs"
TINY_EN_CLIP = TINY_EN_CLIPS / "1.wav"
HOTWORD_SCORE = "6"
MAX_FIX_ATTEMPTS = 4  # missed words tried, in clip order, before the test gives up
ZH_CLIP = ROOT / "tests" / "data" / "zh" / "zh-weather.wav"
BEAM = ["--decoding-method", "modified_beam_search"]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "streamasr.cli", "file", *args, "--format", "text"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )


def _hotwords(tmp_path: Path, *lines: str) -> str:
    path = tmp_path / "hotwords.txt"
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    return str(path)


def _references() -> dict[str, str]:
    rows = (TINY_EN_CLIPS / "trans.txt").read_text(encoding="utf-8").splitlines()
    pairs = (row.split(" ", 1) for row in rows)
    return {str(TINY_EN_CLIPS / f"{key}.wav"): text for key, text in pairs}


def _texts_by_input(stdout: str) -> dict[str, str]:
    """`==> NAME <==` sections of a several-input text run, each one's finals joined."""
    parts = re.split(r"^==> (.+) <==$", stdout, flags=re.MULTILINE)[1:]
    return {
        name: " ".join(body.split()) for name, body in zip(parts[::2], parts[1::2], strict=True)
    }


def _missed_words(references: dict[str, str], plain: dict[str, str]) -> list[tuple[str, str]]:
    """(clip, word) for each reference word the plain search outputs fewer times than spoken."""
    missed = []
    for clip, text in references.items():
        short = Counter(text.split()) - Counter(plain[clip].split())
        missed += [(clip, word) for word in dict.fromkeys(text.split()) if word in short]
    return missed


def test_a_hotword_fixes_a_word_the_plain_search_gets_wrong(tmp_path: Path) -> None:
    """Found at run time: a word of a bundled clip the plain beam search misses, then boosted.

    Boosting it must put it in the output and leave fewer word errors than before. Not every
    miss can be fixed (the audio may not support the word), so a few are tried in turn.
    """
    references = _references()
    plain_run = _run(*references, *BEAM)
    assert plain_run.returncode == 0, plain_run.stderr
    plain = _texts_by_input(plain_run.stdout)
    vocab = read_vocabulary(MODELS / "tiny-en" / "tokens.txt")
    missed = [
        (clip, word)
        for clip, word in _missed_words(references, plain)
        if not check_phrases((word,), vocab).unencodable
    ]
    assert missed, f"beam search gets every bundled clip right; nothing to fix: {plain}"
    tried = []
    for clip, word in missed[:MAX_FIX_ATTEMPTS]:
        boosted = _run(
            clip, *BEAM, "--hotwords", _hotwords(tmp_path, word), "--hotwords-score", HOTWORD_SCORE
        )
        assert boosted.returncode == 0, boosted.stderr
        assert "Failed to encode" not in boosted.stderr
        text, reference = " ".join(boosted.stdout.split()), references[clip]
        before, after = jiwer.wer(reference, plain[clip]), jiwer.wer(reference, text)
        if text.split().count(word) > plain[clip].split().count(word) and after < before:
            return
        tried.append((Path(clip).name, word, plain[clip], text))
    pytest.fail(f"no boosted word was fixed: {tried}")


def test_words_the_model_cannot_spell_are_refused_by_name(tmp_path: Path) -> None:
    """Æ is no piece of an English vocabulary, in either case; the word is named as written."""
    hot = _hotwords(tmp_path, "guy", "zæbra :2.0", "ZÆBRA")
    result = _run(str(TINY_EN_CLIP), *BEAM, "--hotwords", hot)
    assert result.returncode == 2
    assert "--hotwords: zæbra, ZÆBRA cannot be written" in result.stderr  # not guy
    assert "Traceback" not in result.stderr
    assert result.stdout == ""


def test_lower_case_hotwords_work_as_the_upper_case_tokens_do(tmp_path: Path) -> None:
    """tiny-en's tokens are upper case: `guy` is folded to `GUY`, with the same transcript.

    At score 6 the boosted word is pulled in where it is not said, so the output shows it.
    """
    runs = {}
    for word in ("GUY", "guy", "Guy :6"):
        folder = tmp_path / str(len(runs))
        folder.mkdir()
        hot = _hotwords(folder, word)
        runs[word] = _run(
            str(TINY_EN_CLIP), *BEAM, "--hotwords", hot, "--hotwords-score", HOTWORD_SCORE
        )
        assert runs[word].returncode == 0, runs[word].stderr
        assert "Failed to encode" not in runs[word].stderr
    assert "GUY" in runs["GUY"].stdout.split()
    assert runs["guy"].stdout == runs["GUY"].stdout == runs["Guy :6"].stdout


def test_case_folding_follows_the_vocabulary() -> None:
    en = read_vocabulary(MODELS / "tiny-en" / "tokens.txt")
    assert token_case(en) == "upper"
    assert check_phrases(("send those", "Guy"), en).unencodable == ()
    mixed = read_vocabulary(MODELS / "tiny-random-cjkchar-bpe" / "tokens.txt")
    assert fold_case("你好 hello", token_case(mixed)) == "你好 HELLO"
    assert token_case(read_vocabulary(MODELS / "tiny-random-cjkchar" / "tokens.txt")) == ""
    lower = Vocabulary(("<blk>", f"{WORD_BOUNDARY}hello", "ö"), "bpe")
    assert token_case(lower) == "lower"
    assert check_phrases(("HELLO", "HELLÖ"), lower).unencodable == ("HELLÖ",)
    both = Vocabulary(("<blk>", f"{WORD_BOUNDARY}Hello", f"{WORD_BOUNDARY}world"), "bpe")
    assert token_case(both) == ""
    assert check_phrases(("Hello world", "hello"), both).unencodable == ("hello",)


@pytest.mark.parametrize(
    ("model", "line", "named"),
    [
        ("tiny-random-cjkchar", "天气猫", "天气猫"),  # 猫 is not one of its characters
        ("tiny-random-cjkchar-bpe", "你好 QQQ", "QQQ"),  # no piece spells Q
        ("tiny-random-bpe", "HELLO 你", "你"),
    ],
)
def test_character_and_mixed_models_refuse_unknown_words(
    tmp_path: Path, model: str, line: str, named: str
) -> None:
    result = _run(
        str(ZH_CLIP), "--model", str(MODELS / model), *BEAM, "--hotwords", _hotwords(tmp_path, line)
    )
    assert result.returncode == 2, result.stderr
    assert f"--hotwords: {named} cannot be written" in result.stderr
    assert "Traceback" not in result.stderr


def test_byte_level_model_refuses_hotwords(tmp_path: Path) -> None:
    hot = _hotwords(tmp_path, "THE")
    result = _run(
        str(ZH_CLIP), "--model", str(MODELS / "tiny-random-byte"), *BEAM, "--hotwords", hot
    )
    assert result.returncode == 2
    assert "raw bytes" in result.stderr


def test_empty_hotwords_file_is_refused(tmp_path: Path) -> None:
    result = _run(str(TINY_EN_CLIP), *BEAM, "--hotwords", _hotwords(tmp_path, "", "  "))
    assert result.returncode == 2
    assert "has no hotwords" in result.stderr


@pytest.mark.parametrize(
    ("model", "hotword", "unit"),
    [
        ("tiny-random-cjkchar", "还", "还"),  # a Chinese character
        ("tiny-random-cjkchar-bpe", "W", "W"),  # an English piece of the mixed vocabulary
    ],
)
def test_a_boosted_token_appears_more_often_on_a_random_model(
    tmp_path: Path, model: str, hotword: str, unit: str
) -> None:
    """Random weights rank tokens almost evenly, so a bonus shows as many more of that token."""
    common = [str(ZH_CLIP), "--model", str(MODELS / model), *BEAM]
    plain = _run(*common)
    boosted = _run(*common, "--hotwords", _hotwords(tmp_path, hotword), "--hotwords-score", "4")
    assert plain.returncode == boosted.returncode == 0, boosted.stderr
    assert "Failed to encode" not in boosted.stderr
    before, after = plain.stdout.count(unit), boosted.stdout.count(unit)
    assert after >= 20
    assert after >= 3 * max(before, 1), (before, after)


def _word_vocabulary(tmp_path: Path):
    """A whole-word tokens.txt (the kind a closed-vocabulary model ships): no word pieces."""
    words = ("SEND", "THOSE", "GUY")
    path = tmp_path / "tokens.txt"
    lines = ["<blk> 0", *(f"{WORD_BOUNDARY}{w} {i}" for i, w in enumerate(words, 1))]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    vocab = read_vocabulary(path)
    assert vocab.token_type == "word"
    return vocab


def test_check_follows_each_token_type(tmp_path: Path) -> None:
    en = read_vocabulary(MODELS / "tiny-en" / "tokens.txt")
    assert check_phrases(("SEND THOSE", "GUY"), en).unencodable == ()
    assert check_phrases(("SENDS",), _word_vocabulary(tmp_path)).unencodable == ("SENDS",)
    bpe = read_vocabulary(MODELS / "tiny-random-bpe" / "tokens.txt")
    assert check_phrases(("RECOGNITION", "SPEECHES"), bpe).unencodable == ()  # spelled by pieces
    mixed = read_vocabulary(MODELS / "tiny-random-cjkchar-bpe" / "tokens.txt")
    assert check_phrases(("你好HELLO", "THE世界"), mixed).unencodable == ()


def test_score_suffix_and_blank_lines_are_read_like_the_engine(tmp_path: Path) -> None:
    path = Path(_hotwords(tmp_path, "HELLO WORLD :3.5", "", "GUY"))
    assert read_phrases(path) == ("HELLO WORLD", "GUY")
