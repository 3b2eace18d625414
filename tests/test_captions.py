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

from streamasr.session.events import Final
from streamasr.text.captions import (
    MAX_CUE_S,
    MAX_LINE_CHARS,
    Cue,
    CueRules,
    CueStats,
    Word,
    cues_of,
    respelled,
    sentence_case,
    words_of,
)
from streamasr.text.tokens import split_words

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


def test_a_piece_that_is_only_a_space_separates_words() -> None:
    """A vocabulary's lone ' ' piece: the text says CLEAR ECTS, so the words do too."""
    pieces = [" THE", " CLEAR", " ", "E", "CTS"]
    words = words_of(pieces, [0.0, 0.2, 0.5, 0.6, 0.7], 1.0)
    assert [w.text for w in words] == ["THE", "CLEAR", "ECTS"]
    assert words[2].start_s == 0.6  # the word starts with its first letter's piece
    final = Final(1, 1.0, 0.1, 0, "THE CLEAR ECTS", 0.0, 1.0, tuple(pieces),
                  (0.0, 0.2, 0.5, 0.6, 0.7))
    assert [w.text for w in final.words] == split_words(final.text)


def test_byte_pieces_become_words_that_start_with_their_first_byte() -> None:
    # 你 is E4 BD A0, 好 is E5 A5 BD: each character starts where its first byte came
    pieces = ["<0xE4>", "<0xBD>", "<0xA0>", "<0xE5>", "<0xA5>", "<0xBD>", "▁OK"]
    words = words_of(pieces, [0.1, 0.2, 0.3, 0.5, 0.6, 0.7, 0.9], 1.2)
    assert [(w.text, w.start_s) for w in words] == [("你", 0.1), ("好", 0.5), ("OK", 0.9)]


def test_a_finisher_that_changes_the_word_count_still_respells_every_word() -> None:
    words = (Word("HELLO", 0.0, 0.5), Word("WORLD", 0.5, 1.0))
    assert [w.text for w in respelled(words, "Hello world")] == ["Hello", "world"]
    split = respelled(words, "Hello, wor ld.")
    assert [w.text for w in split] == ["Hello,", "wor", "ld."]
    assert split[0].start_s == 0.0 and split[-1].end_s == 1.0


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


def stats_of(cues: list[Cue], rules: CueRules, words: int) -> CueStats:
    stats = CueStats()
    stats.count(cues, rules, words)
    return stats


def test_a_short_cue_stays_up_its_minimum_extending_into_the_silence_after_it() -> None:
    rules = CueRules()
    (cue,) = cues_of([Word("Yes.", 1.0, 1.2)], rules=rules, free_until_s=5.0)
    assert (cue.start_s, cue.end_s) == (1.0, 1.8)
    # a gap too short to extend into: the cue ends where the next speech may start, counted
    (cut,) = cues_of([Word("Yes.", 1.0, 1.2)], rules=rules, free_until_s=1.5)
    assert (cut.start_s, cut.end_s) == (1.0, 1.5)
    assert stats_of([cut], rules, 1).too_short == 1
    # never over the previous cue: a cue starts no earlier than where the last one ended
    (late,) = cues_of([Word("No.", 1.0, 1.2)], not_before_s=1.1, rules=rules, free_until_s=5.0)
    assert late.start_s == 1.1 and late.end_s == 1.9


def test_reading_speed_is_met_by_extending_and_fast_speech_without_silence_is_counted() -> None:
    rules = CueRules()
    words = [Word(f"quickly{i}", i * 0.2, i * 0.2 + 0.2) for i in range(8)]  # 44 characters/s
    (roomy,) = cues_of(words, rules=rules, free_until_s=10.0)
    assert roomy.cps <= 20 and roomy.end_s == round(roomy.chars / 20, 3)  # extended, no more
    assert stats_of([roomy], rules, len(words)).too_fast == 0
    # the same words with the next speech right after them: nothing to extend into
    tight = cues_of(words, rules=rules, free_until_s=1.6)
    stats = stats_of(tight, rules, len(words))
    assert stats.too_fast == len(tight) >= 1 and all(cue.end_s <= 1.6 for cue in tight)
    assert "faster than 20 characters/s" in stats.note(rules)
    assert stats_of(cues_of(words, rules=rules, free_until_s=10.0), rules, 8).note(rules) == ""


def test_no_orphan_cue_when_the_utterance_can_give_it_neighbours() -> None:
    # 15 words of 5 characters: 89 characters need two cues; filling the first leaves one
    words = [Word(f"word{chr(97 + i)}", i * 0.3, i * 0.3 + 0.3) for i in range(15)]
    cues = cues_of(words, free_until_s=6.0)
    assert len(cues) == 2
    assert all(len(" ".join(cue.lines).split()) >= 3 for cue in cues)
    assert [w for cue in cues for line in cue.lines for w in line.split()] == [
        w.text for w in words
    ]
    # two words are all there is: a cue of two words is no orphan then
    assert stats_of(cues_of(words[:2], free_until_s=2.0), CueRules(), 2).orphans == 0


def lines_of(text: str) -> tuple[str, ...]:
    words = [Word(t, i * 0.3, i * 0.3 + 0.3) for i, t in enumerate(text.split())]
    (cue,) = cues_of(words, free_until_s=30.0)
    return cue.lines


def test_lines_break_at_balanced_points_after_punctuation_or_before_a_conjunction() -> None:
    assert lines_of("When the rain stopped, we walked to the harbour") == (
        "When the rain stopped,", "we walked to the harbour")
    assert lines_of("I think that we should leave the house before the storm arrives tonight") == (
        "I think that we should leave the house", "before the storm arrives tonight")
    assert lines_of("It fits on one line") == ("It fits on one line",)


def test_the_rules_are_options() -> None:
    words = [Word(f"w{i:02d}", i * 0.3, i * 0.3 + 0.3) for i in range(30)]
    rules = CueRules(line_chars=12, lines=1, max_s=3.0, min_s=0.5, max_cps=15.0, min_words=2)
    cues = cues_of(words, rules=rules, free_until_s=20.0)
    assert all(len(cue.lines) == 1 and len(cue.lines[0]) <= 12 for cue in cues)
    assert all(cue.end_s - cue.start_s <= 3.0 for cue in cues)
    assert all(len(cue.lines[0].split()) >= 2 for cue in cues)


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


def test_cue_options_on_the_command_line(tmp_path: Path) -> None:
    clip = str(CLIPS / "0.wav")
    done = run(clip, "-f", "srt", "--cue-line-chars", "16", "--cue-lines", "1",
               "--cue-max-cps", "5", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    blocks = [b.splitlines() for b in done.stdout.strip().split("\n\n")]
    assert len(blocks) > 1 and all(len(b) == 3 and len(b[2]) <= 16 for b in blocks)
    # 5 characters/s is slower than the clip's speech: the cues that cannot meet it are said
    assert "read faster than 5 characters/s" in done.stderr
    for bad, says in [(("--cue-max-cps", "0"), "--cue-max-cps 0: use a number from 5 to 100"),
                      (("--cue-lines", "9"), "--cue-lines 9: use a number from 1 to 3"),
                      (("--cue-min-s", "nan"), "--cue-min-s nan"),
                      (("--cue-min-s", "3", "--cue-max-s", "2"), "longer than --cue-max-s")]:
        refused = run(clip, "-f", "srt", *bad, cwd=tmp_path)
        assert refused.returncode == 2 and says in refused.stderr, refused.stderr
        assert len(refused.stderr.strip().splitlines()) == 1
