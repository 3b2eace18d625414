"""Captions people can use: words with times, cues that follow subtitle rules, one file per
input and format.

Why: SRT cues of a whole utterance (20 s, one 300-character line) are unreadable, and one
SRT whose times restart with every input is not a subtitle file at all. The rules are
checked on the cue builder with exact words, and end to end on the real engine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from streamasr.captions import (
    MAX_CUE_S,
    MAX_LINE_CHARS,
    Word,
    cues_of,
    sentence_case,
    words_of,
)
from streamasr.events import Final

REPO = Path(__file__).resolve().parent.parent
CLIPS = REPO / "models" / "tiny-en" / "test_wavs"


def test_bpe_pieces_become_words_and_cjk_characters_stay_units() -> None:
    words = words_of([" KEEP", " UP", " TO", "MOR", "ROW"], [0.3, 0.7, 0.9, 1.0, 1.2], 2.0)
    assert [w.text for w in words] == ["KEEP", "UP", "TOMORROW"]
    assert [w.start_s for w in words] == [0.3, 0.7, 0.9]
    assert words[0].end_s == 0.7  # up to the next word
    assert words[2].end_s == 1.7  # the last piece plus at most 0.5 s, inside the final
    mixed = words_of(["我", "们", " HELLO", "学"], [0.1, 0.2, 0.5, 1.0], 1.2)
    assert [w.text for w in mixed] == ["我", "们", "HELLO", "学"]
    pause = words_of([" A", " B"], [0.0, 5.0], 6.0)
    assert pause[0].end_s == 0.5  # a pause is not part of the word


def test_a_final_carries_its_words_in_json() -> None:
    final = Final(1, 2.0, 0.1, 0, "KEEP UP", 0.3, 1.0, (" KEEP", " UP"), (0.3, 0.7))
    assert final.to_dict()["words"] == [
        {"text": "KEEP", "start_s": 0.3, "end_s": 0.7},
        {"text": "UP", "start_s": 0.7, "end_s": 1.0},
    ]


def test_cues_keep_to_two_lines_of_42_characters_and_7_seconds() -> None:
    words = [Word(f"word{i:02d}", i * 0.4, i * 0.4 + 0.35) for i in range(60)]
    cues = cues_of(words)
    assert len(cues) > 1
    assert [w for cue in cues for line in cue.lines for w in line.split()] == [
        w.text for w in words
    ]
    for cue, following in zip(cues, cues[1:] + [None], strict=True):
        assert 1 <= len(cue.lines) <= 2 and all(len(line) <= MAX_LINE_CHARS for line in cue.lines)
        assert cue.end_s - cue.start_s <= MAX_CUE_S
        if following is not None:
            assert cue.end_s <= following.start_s  # never overlapping
    slow = [Word("a", i * 2.0, i * 2.0 + 0.3) for i in range(10)]  # few characters, long time
    assert all(cue.end_s - cue.start_s <= MAX_CUE_S for cue in cues_of(slow))


def test_sentence_case_for_all_caps_text_only() -> None:
    assert sentence_case("THE RIGHT TIME TO ACT") == "The right time to act"
    assert sentence_case("I THINK I'M RIGHT") == "I think I'm right"
    assert sentence_case("Already Mixed") == "Already Mixed"
    assert sentence_case("今天天气很好") == "今天天气很好"


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "streamasr", "file", *args],
                          capture_output=True, text=True, timeout=180, cwd=cwd,
                          env=dict(os.environ, PYTHONPATH=str(REPO)))


def test_output_dir_writes_one_file_per_input_and_format(tmp_path: Path) -> None:
    clips = [str(CLIPS / "0.wav"), str(CLIPS / "3.wav")]
    out = tmp_path / "captions"
    done = run(*clips, "-o", str(out), "--format", "srt,vtt,jsonl,txt", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in out.iterdir()) == [
        f"{stem}.{ext}" for stem in ("0", "3") for ext in ("jsonl", "srt", "txt", "vtt")
    ]
    for clip, stem in zip(clips, ("0", "3"), strict=True):
        alone = run(clip, "--format", "text", cwd=tmp_path).stdout
        assert (out / f"{stem}.txt").read_text() == alone
        srt = run(clip, "--format", "srt", cwd=tmp_path).stdout
        assert (out / f"{stem}.srt").read_text() == srt
        vtt = (out / f"{stem}.vtt").read_text()
        assert vtt.startswith("WEBVTT\n") and "-->" in vtt and "," not in vtt.split("-->")[1][:14]
        records = [json.loads(line) for line in (out / f"{stem}.jsonl").read_text().splitlines()]
        finals = [r for r in records if r["type"] == "final"]
        assert finals and all(r["words"] for r in finals)
        assert " ".join(w["text"] for r in finals for w in r["words"]) == alone.strip()
    assert "-> 0.srt, 0.vtt, 0.jsonl, 0.txt" in done.stderr


def test_output_dir_refusals_come_before_the_model_loads(tmp_path: Path) -> None:
    clash = run(str(CLIPS / "0.wav"), str(tmp_path / "0.wav"), "-o", str(tmp_path / "o"),
                cwd=tmp_path)
    assert clash.returncode == 2 and "would both write 0.*" in clash.stderr
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    unwritable = run(str(CLIPS / "0.wav"), "-o", str(blocked / "sub"), cwd=tmp_path)
    assert unwritable.returncode == 1 and "--output-dir" in unwritable.stderr
    assert len(unwritable.stderr.strip().splitlines()) == 1
    bad = run(str(CLIPS / "0.wav"), "-o", str(tmp_path / "o"), "--format", "srt,live",
              cwd=tmp_path)
    assert bad.returncode == 2 and "txt, jsonl, srt, vtt" in bad.stderr
    several = run(str(CLIPS / "0.wav"), "--format", "srt,vtt", cwd=tmp_path)
    assert several.returncode == 2 and "add -o/--output-dir DIR" in several.stderr


def test_sentence_case_option_on_every_output(tmp_path: Path) -> None:
    clip = str(CLIPS / "4.wav")  # the bundled model gets it right: THE RIGHT TIME TO ACT
    # one process writes every format (--output-dir files equal stdout: the test above)
    out = tmp_path / "out"
    done = run(clip, "-o", str(out), "--format", "txt,srt,vtt,jsonl", "--sentence-case",
               cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (out / "4.txt").read_text() == "The right time to act\n"
    assert (out / "4.srt").read_text().splitlines()[2] == "The right time to act"
    assert "The right time to act" in (out / "4.vtt").read_text().splitlines()
    records = [json.loads(line) for line in (out / "4.jsonl").read_text().splitlines()]
    (final,) = [r for r in records if r["type"] == "final"]
    assert [w["text"] for w in final["words"]] == ["The", "right", "time", "to", "act"]
