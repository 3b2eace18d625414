"""Hotwords change what the engine outputs, and words a model cannot spell are refused by name.

Each run is a fresh `python -m streamasr.cli` process on a bundled model, as a user runs it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from streamasr.hotwords import check_phrases, read_phrases
from streamasr.tokens import read_vocabulary

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "models"
TINY_EN_CLIP = MODELS / "tiny-en" / "test_wavs" / "1.wav"
TINY_EN_TEXT = "ALL LIVE RED EASY DOG GUY WON'T LINE PROGRAM YOU"
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


def test_a_hotword_fixes_the_word_tiny_en_gets_wrong(tmp_path: Path) -> None:
    plain = _run(str(TINY_EN_CLIP), *BEAM)
    assert plain.returncode == 0, plain.stderr
    assert plain.stdout.strip() == TINY_EN_TEXT.replace("GUY", "BY")  # the known mistake
    boosted = _run(
        str(TINY_EN_CLIP), *BEAM, "--hotwords", _hotwords(tmp_path, "GUY"), "--hotwords-score", "6"
    )
    assert boosted.returncode == 0, boosted.stderr
    assert boosted.stdout.strip() == TINY_EN_TEXT
    assert "Failed to encode" not in boosted.stderr


def test_words_the_model_cannot_spell_are_refused_by_name(tmp_path: Path) -> None:
    result = _run(str(TINY_EN_CLIP), *BEAM, "--hotwords", _hotwords(tmp_path, "guy", "ZEBRAX :2.0"))
    assert result.returncode == 2
    assert "guy, ZEBRAX cannot be written" in result.stderr
    assert "upper case" in result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout == ""


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


def test_check_follows_each_token_type() -> None:
    en = read_vocabulary(MODELS / "tiny-en" / "tokens.txt")
    assert check_phrases(("SEND THOSE", "GUY"), en).unencodable == ()
    assert check_phrases(("SENDS",), en).unencodable == ("SENDS",)  # whole words only
    bpe = read_vocabulary(MODELS / "tiny-random-bpe" / "tokens.txt")
    assert check_phrases(("RECOGNITION", "SPEECHES"), bpe).unencodable == ()  # spelled by pieces
    mixed = read_vocabulary(MODELS / "tiny-random-cjkchar-bpe" / "tokens.txt")
    assert check_phrases(("你好HELLO", "THE世界"), mixed).unencodable == ()


def test_score_suffix_and_blank_lines_are_read_like_the_engine(tmp_path: Path) -> None:
    path = Path(_hotwords(tmp_path, "HELLO WORLD :3.5", "", "GUY"))
    assert read_phrases(path) == ("HELLO WORLD", "GUY")
