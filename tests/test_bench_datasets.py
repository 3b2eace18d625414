"""Bench dataset readers: the three layouts agree, and bad rows are skipped with line numbers.

Why: a benchmark that silently drops or crashes on one malformed line of a 2,620-line
transcript gives a wrong number or none; every reader must name what it skipped and why.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from conftest import make_dataset

from streamasr.bench.datasets import detect_format, load_dataset
from streamasr.errors import DatasetError

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three espeak-ng utterances written in all three layouts by scripts/make_dataset.py."""
    return make_dataset(tmp_path_factory.mktemp("bench-data"), n=3, seed=1)


def write_wav(path: Path, seconds: float = 0.2) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    sf.write(path, np.zeros(int(16000 * seconds), np.float32), 16000)
    return path


def test_three_layouts_give_the_same_utterances(synthetic: Path) -> None:
    sets = {
        name: load_dataset(synthetic / sub)
        for name, sub in (
            ("librispeech", "librispeech"),
            ("kaldi", "kaldi"),
            ("jsonl", "manifest.jsonl"),
        )
    }
    for name, data in sets.items():
        assert data.format == name
        assert not data.bad_rows and not data.missing_audio
        assert all(u.audio.is_file() for u in data.utterances)
    by_id = {name: {u.id: u.text for u in data.utterances} for name, data in sets.items()}
    assert len(by_id["jsonl"]) == 3
    assert by_id["librispeech"] == by_id["kaldi"] == by_id["jsonl"]
    # only the manifest carries the speech span
    manifest = sets["jsonl"].utterances
    assert all(0 < u.speech_onset_s < u.speech_end_s <= u.duration_s for u in manifest)
    assert all(u.speech_onset_s is None for u in sets["kaldi"].utterances)
    assert all(u.duration_s for u in sets["kaldi"].utterances)  # from utt2dur


def test_limit_keeps_the_first_utterances(synthetic: Path) -> None:
    data = load_dataset(synthetic / "manifest.jsonl")
    assert [u.id for u in data.limited(2).utterances] == [u.id for u in data.utterances[:2]]


def test_manifest_bad_rows_are_skipped_with_line_numbers(tmp_path: Path) -> None:
    write_wav(tmp_path / "a.wav")
    write_wav(tmp_path / "b.wav")
    write_wav(tmp_path / "c.wav")
    rows = [
        json.dumps(
            {"audio_filepath": "a.wav", "text": "HELLO", "speech_onset_s": 0.1, "speech_end_s": 0.2}
        ),
        "{not json",
        json.dumps({"audio_filepath": "b.wav"}),
        json.dumps(["a list"]),
        "",
        json.dumps({"audio_filepath": "b.wav", "text": "X", "speech_onset_s": -1}),
        json.dumps(
            {"audio_filepath": "b.wav", "text": "X", "speech_onset_s": 0.5, "speech_end_s": 0.2}
        ),
        json.dumps(
            {
                "audio_filepath": "b.wav",
                "text": "WORDS",
                "words": [
                    {"word": "WORDS", "start": 0.05, "end": 0.15},
                    {"word": "TOO", "start": 0.16, "end": 0.19},
                ],
            }
        ),
        json.dumps({"audio_filepath": "gone.wav", "text": "MISSING"}),
        json.dumps({"audio_filepath": "a.wav", "text": "AGAIN"}),
        json.dumps({"audio_filepath": "c.wav", "text": "", "duration": "long"}),
        json.dumps({"audio_filepath": "c.wav", "text": ""}),
    ]
    manifest = tmp_path / "m.jsonl"
    manifest.write_text("\n".join(rows) + "\n", encoding="utf-8")
    data = load_dataset(manifest)
    reasons = {row.line: row.reason for row in data.bad_rows}
    assert sorted(reasons) == [2, 3, 4, 6, 7, 10, 11]
    assert "not valid JSON" in reasons[2]
    assert "'text'" in reasons[3]
    assert "object" in reasons[4]
    assert "speech_onset_s" in reasons[6]
    assert "before" in reasons[7]
    assert "duplicate id a" in reasons[10]
    assert "duration" in reasons[11]
    assert all(row.file == str(manifest) for row in data.bad_rows)
    assert [u.id for u in data.utterances] == ["a", "b", "c"]
    a, b, c = data.utterances
    assert (a.speech_onset_s, a.speech_end_s) == (0.1, 0.2)
    assert (b.speech_onset_s, b.speech_end_s) == (0.05, 0.19)  # from the word alignments
    assert c.text == ""  # an empty reference is a valid row (silence)
    assert [u.id for u in data.missing_audio] == ["gone"]


def test_kaldi_rows_without_a_partner_are_reported(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    write_wav(data_dir / "wavs" / "u1.wav")
    write_wav(data_dir / "wavs" / "u2.wav")
    (data_dir / "wav.scp").write_text(
        "u1 wavs/u1.wav\nu2 wavs/u2.wav\nu3 sox x.wav -t wav - |\nu4\nu1 wavs/u1.wav\n"
        "u5 wavs/u5.wav\n",
        encoding="utf-8",
    )
    (data_dir / "text").write_text("u1 HELLO THERE\nu5 FIVE\nu9 NO AUDIO\n", encoding="utf-8")
    data = load_dataset(data_dir)
    assert data.format == "kaldi"
    reasons = {(Path(r.file).name, r.line): r.reason for r in data.bad_rows}
    assert "piped" in reasons[("wav.scp", 3)]
    assert "no audio path" in reasons[("wav.scp", 4)]
    assert "duplicate" in reasons[("wav.scp", 5)]
    assert "no transcript" in reasons[("wav.scp", 2)]
    assert "no audio in wav.scp" in reasons[("text", 3)]
    assert [u.id for u in data.utterances] == ["u1"]
    assert data.utterances[0].audio == data_dir / "wavs" / "u1.wav"
    assert [u.id for u in data.missing_audio] == ["u5"]


def test_kaldi_segments_are_refused_with_a_fix(tmp_path: Path) -> None:
    (tmp_path / "wav.scp").write_text("r1 r1.wav\n", encoding="utf-8")
    (tmp_path / "text").write_text("s1 HI\n", encoding="utf-8")
    (tmp_path / "segments").write_text("s1 r1 0.0 1.0\n", encoding="utf-8")
    with pytest.raises(DatasetError, match="segments"):
        load_dataset(tmp_path)


def test_librispeech_missing_audio_empty_text_and_bad_bytes(tmp_path: Path) -> None:
    chapter = tmp_path / "19" / "198"
    write_wav(chapter / "19-198-0000.wav")
    write_wav(chapter / "19-198-0001.wav")
    (chapter / "19-198.trans.txt").write_bytes(
        b"19-198-0000 NORTHANGER ABBEY\n19-198-0001\n\xff\xfe broken\n19-198-0002 GONE\n"
        b"19-198-0000 TWICE\n"
    )
    data = load_dataset(tmp_path)
    assert data.format == "librispeech"
    assert [(u.id, u.text) for u in data.utterances] == [
        ("19-198-0000", "NORTHANGER ABBEY"),
        ("19-198-0001", ""),
    ]
    assert [u.id for u in data.missing_audio] == ["19-198-0002"]
    assert {(r.line, r.reason.split()[0]) for r in data.bad_rows} == {(3, "not"), (5, "duplicate")}


@pytest.mark.parametrize("name", ["nothing-here", "empty-dir", "notes.txt"])
def test_unreadable_datasets_raise(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    if name == "empty-dir":
        path.mkdir()
    elif name.endswith(".txt"):
        path.write_text("hello\n")
    with pytest.raises(DatasetError):
        detect_format(path)


def test_manifest_of_only_blank_lines_has_no_utterances(tmp_path: Path) -> None:
    manifest = tmp_path / "m.jsonl"
    manifest.write_text("\n\n", encoding="utf-8")
    with pytest.raises(DatasetError, match="no utterances"):
        load_dataset(manifest)
