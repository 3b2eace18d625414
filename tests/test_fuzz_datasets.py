"""Property tests of the benchmark's dataset readers: JSONL manifests, TSV/CSV tables and
Kaldi data directories, generated from valid rows with fields changed, broken or left out.

Each dataset is read (its bad rows skipped, each with its line and a reason on one line) or
refused with one DatasetError; a row written valid is read as written.
"""

from __future__ import annotations

import csv
import io
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf
from fuzz_inputs import BROKEN_JSON, accepted, assert_clear, json_text, mutated, scratch
from hypothesis import example, given
from hypothesis import strategies as st

from streamasr.bench.datasets import Dataset, load_dataset
from streamasr.errors import DatasetError

ROOT = scratch("streamasr-fuzz-data-")
AUDIO_S = 0.5  # each audio file's length
#: Audio files that exist beside every dataset (others named in rows are missing).
PRESENT = ("a.wav", "b.wav")
for _name in PRESENT:
    sf.write(ROOT / _name, np.zeros(int(16000 * AUDIO_S), np.float32), 16000)

#: Audio paths as rows may give them: present, missing, odd, hostile.
AUDIO_PATHS = st.sampled_from([
    *PRESENT, "missing.wav", "sub/../a.wav", "~nosuchuser/a.wav", "~/a.wav", "a\0.wav", "",
    "/dev/null", ".", "clips", "a.wav |", "x" * 300,
]) | st.text(max_size=12)  # fmt: skip
TEXTS = st.text(max_size=30)
IDS = st.sampled_from(["u1", "u2", "u3"]) | st.text(max_size=6)


def _folder() -> Path:
    """A fresh folder with the audio files in it."""
    folder = Path(tempfile.mkdtemp(dir=ROOT))
    for name in PRESENT:
        shutil.copy(ROOT / name, folder / name)
    return folder


def _read(path: Path, fmt: str) -> Dataset | None:
    try:
        dataset = load_dataset(path, fmt)
    except DatasetError as exc:
        assert_clear(exc)
        return None
    accepted()
    for row in dataset.bad_rows:
        assert row.line >= 0 and row.reason.strip() and "\n" not in row.reason
        assert len(row.reason) <= 600
    for utterance in dataset.utterances:
        assert utterance.audio.is_file() and isinstance(utterance.text, str)
        onset, end = utterance.speech_onset_s, utterance.speech_end_s
        assert onset is None or end is None or onset <= end
    return dataset


# -- JSONL --------------------------------------------------------------------------------


SECONDS = st.floats(0, AUDIO_S)
VALID_ROWS = st.fixed_dictionaries(
    {"audio_filepath": st.sampled_from(PRESENT), "text": TEXTS},
    optional={"id": IDS, "duration": st.just(AUDIO_S), "speech_onset_s": st.just(0.1),
              "speech_end_s": st.just(0.4),
              "words": st.lists(st.fixed_dictionaries({"word": TEXTS, "start": SECONDS,
                                                       "end": SECONDS}), max_size=3)},
)  # fmt: skip
ROW_KEYS = ("audio_filepath", "text", "id", "utt_id", "duration", "speech_onset_s",
            "speech_end_s", "words")  # fmt: skip
LINES = st.one_of(
    mutated(VALID_ROWS, ROW_KEYS).map(json_text),
    st.fixed_dictionaries({"audio_filepath": AUDIO_PATHS, "text": TEXTS}).map(json_text),
    BROKEN_JSON.filter(lambda text: "\n" not in text and "\r" not in text),
)


@given(st.lists(LINES | st.binary(max_size=20).map(lambda b: b.decode("latin-1")), max_size=6),
       st.sampled_from([b"\n", b"\r\n"]))  # fmt: skip
@example(['{"audio_filepath": "~nosuchuser/a.wav", "text": "x"}'], b"\n")  # RuntimeError
# OverflowError (math.isfinite of 10**400); a reason that quoted the value whole
@example(['{"audio_filepath": "a.wav", "text": "x", "duration": 1' + "0" * 400 + "}"], b"\n")
@example(['{"audio_filepath": "a.wav", "text": "x", "duration": ["' + "x" * 700 + '"]}'], b"\n")
def test_a_jsonl_manifest_is_read_row_by_row(lines: list[str], newline: bytes) -> None:
    folder = _folder()
    path = folder / "manifest.jsonl"
    path.write_bytes(newline.join(line.encode("utf-8", "surrogateescape") for line in lines))
    dataset = _read(path, "jsonl")
    if dataset is None:
        return
    rows = {line: json.loads(line) for line in lines if _valid_row(line)}  # valid ones
    read = {u.origin.rsplit(":", 1)[1]: u for u in dataset.utterances}
    for number, line in enumerate(lines, 1):
        if line in rows and str(number) in read:
            assert read[str(number)].text == rows[line]["text"]


def _valid_row(line: str) -> bool:
    try:
        row = json.loads(line)
    except (ValueError, RecursionError):
        return False
    return isinstance(row, dict) and row.get("audio_filepath") in PRESENT and isinstance(
        row.get("text"), str)  # fmt: skip


# -- TSV / CSV ----------------------------------------------------------------------------


CELLS = st.sampled_from(PRESENT) | TEXTS | AUDIO_PATHS | st.sampled_from(['"', "\t", ",", "\n"])
HEADERS = st.sampled_from([["path", "sentence"], ["id", "path", "sentence"]]) | st.lists(
    st.sampled_from(["path", "sentence", "id", "text", "audio", "client_id"]) | TEXTS,
    max_size=4,
)


@given(HEADERS, st.lists(st.lists(CELLS, max_size=5), max_size=5), st.sampled_from(["tsv", "csv"]),
       st.booleans())  # fmt: skip
@example(["\r"], [], "tsv", False)  # a column named by a line break: a message of two lines
@example(["path", "sentence"], [["sub/../a.wav", "x"], ["a.wav", "y"]], "tsv", False)  # one id
def test_a_table_is_read_row_by_row(
    header: list[str], rows: list[list[str]], kind: str, raw: bool
) -> None:
    folder = _folder()
    path = folder / f"test.{kind}"
    if raw:  # not quoted: the reader sees what a careless export writes
        separator = "\t" if kind == "tsv" else ","
        path.write_text("\n".join(separator.join(r) for r in [header, *rows]), encoding="utf-8")
    else:
        buffer = io.StringIO()
        csv.writer(buffer, delimiter="\t" if kind == "tsv" else ",").writerows([header, *rows])
        path.write_text(buffer.getvalue(), encoding="utf-8")
    dataset = _read(path, "table")
    if dataset is not None and not raw and header == ["path", "sentence"]:
        first: dict[str, list[str]] = {}  # the first row of each id (the path's stem)
        for row in rows:
            if len(row) == 2 and row[0].strip():
                first.setdefault(Path(row[0].strip()).stem, row)
        expected = {utt_id: row[1].strip() for utt_id, row in first.items()
                    if row[0].strip() in PRESENT}  # fmt: skip
        read = {u.id: u.text for u in dataset.utterances if u.audio.name in PRESENT}
        assert {k: v for k, v in read.items() if k in expected} == expected



# -- Kaldi --------------------------------------------------------------------------------


KALDI_LINES = st.lists(st.tuples(IDS, AUDIO_PATHS | TEXTS).map(" ".join) | TEXTS, max_size=5)


@given(KALDI_LINES, KALDI_LINES, st.none() | KALDI_LINES, st.booleans())
@example(["u1 ~nosuchuser/a.wav"], ["u1 hello"], None, False)  # RuntimeError
def test_a_kaldi_data_dir_is_read_row_by_row(
    scp: list[str], text: list[str], utt2dur: list[str] | None, segments: bool
) -> None:
    folder = _folder()
    (folder / "wav.scp").write_text("\n".join(scp), encoding="utf-8")
    (folder / "text").write_text("\n".join(text), encoding="utf-8")
    if utt2dur is not None:
        (folder / "utt2dur").write_text("\n".join(utt2dur), encoding="utf-8")
    if segments:
        (folder / "segments").write_text("u1 a 0 1\n", encoding="utf-8")
    dataset = _read(folder, "kaldi")
    if dataset is None:
        return
    assert not segments
    ids = {line.split(maxsplit=1)[0] for line in text if line.split()}
    assert {u.id for u in dataset.utterances} <= ids


def test_fields_of_any_json_type_in_a_valid_row_are_bad_rows_not_errors() -> None:
    """A direct case beside the generated ones: every field of a row given each JSON type."""
    folder = _folder()
    values: list[Any] = [None, True, 1, 1.5, "x", [], {}, [1], {"a": 1}, float("nan"), -1]
    lines = [json_text({"audio_filepath": "a.wav", "text": "t", key: value})
             for key in ROW_KEYS for value in values]  # fmt: skip
    (folder / "m.jsonl").write_text("\n".join(lines), encoding="utf-8")
    dataset = _read(folder / "m.jsonl", "jsonl")
    assert dataset is not None and dataset.utterances
