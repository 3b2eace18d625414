"""bench reads the test sets people have: trans.txt beside the clips, TSV/CSV tables, and
scores a Chinese test set as CER even on a model that declares no language.

Why: a benchmark that only reads its own layouts makes every user write a converter first,
and a converter is where ids and texts get mixed up. The same clips in every layout must give
the same hypotheses and the same error rate. Each run is a real `streamasr bench` process on
the bundled model.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from streamasr.bench.datasets import load_dataset
from streamasr.bench.metrics import reference_metric

REPO = Path(__file__).resolve().parent.parent
CLIPS = REPO / "models" / "tiny-en" / "test_wavs"
ZH = REPO / "tests" / "data" / "zh"


def bench(*args: str, out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "streamasr", "bench", *args, "--out", str(out), "--threads", "1"],
        capture_output=True, text=True, timeout=300, cwd=REPO,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
    )


def hypotheses(out: Path) -> tuple[str, dict[str, str]]:
    """The error rate and every utterance's hypothesis, from bench's own results."""
    rows = [json.loads(line) for line in (out / "utterances.jsonl").read_text().splitlines()]
    doc = json.loads((out / "results.json").read_text())
    summary = doc["settings"][0]["summary"]
    return f"{summary['error_rate_pct']}", {row["id"]: row["hypothesis"] for row in rows}


def references() -> dict[str, str]:
    lines = (CLIPS / "trans.txt").read_text(encoding="utf-8").splitlines()
    return dict(line.split(maxsplit=1) for line in lines if line.strip())


def common_voice_copy(root: Path) -> Path:
    """The bundled clips laid out as Common Voice does: test.tsv, audio under clips/."""
    (root / "clips").mkdir(parents=True)
    with (root / "test.tsv").open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, delimiter="\t")
        writer.writerow(["client_id", "path", "sentence", "up_votes", "down_votes"])
        for utt_id, text in references().items():
            shutil.copy(CLIPS / f"{utt_id}.wav", root / "clips" / f"{utt_id}.wav")
            writer.writerow(["c0ffee", f"{utt_id}.wav", text, "2", "0"])
    return root / "test.tsv"


def test_the_bundled_test_wavs_folder_is_a_dataset() -> None:
    data = load_dataset(CLIPS)
    assert data.format == "librispeech"
    assert {u.id: u.text for u in data.utterances} == references()
    assert all(u.audio == CLIPS / f"{u.id}.wav" for u in data.utterances)


def test_the_same_clips_in_every_layout_give_the_same_results(tmp_path: Path) -> None:
    tsv = common_voice_copy(tmp_path / "cv")
    table = tmp_path / "mine.csv"
    with table.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["recording", "words", "speaker"])
        for utt_id, text in references().items():
            writer.writerow([str(CLIPS / f"{utt_id}.wav"), text, "spk, with a comma"])
    results = {}
    for name, args in {
        "trans.txt": [str(CLIPS)],
        "tsv": [str(tsv)],
        "csv": [str(table), "--audio-column", "recording", "--text-column", "words"],
    }.items():
        done = bench(*args, out=tmp_path / name)
        assert done.returncode == 0, done.stderr
        results[name] = hypotheses(tmp_path / name)
    rate, hyps = results["trans.txt"]
    assert sorted(hyps) == sorted(references()) and any(hyps.values())
    assert results["tsv"] == (rate, hyps)
    # the CSV has no id column: ids are the audio file names
    assert results["csv"] == (rate, hyps)


@pytest.mark.parametrize(
    ("header", "args", "message"),
    [
        (["file", "words"], [], "none of the columns (file, words) looks like the reference"),
        (["path", "text"], ["--text-column", "sentence"], "no column 'sentence'"),
        ([], [], "empty table"),
        (["0.wav", "HELLO"], [], "no header line (the first line is a row: '0.wav\\tHELLO'); "
         "add one naming the columns, e.g. path<TAB>sentence"),
        (["0.wav", "HELLO"], ["--audio-column", "a"], "no header line"),
    ],
)
def test_a_table_without_the_columns_is_one_line(
    tmp_path: Path, header: list[str], args: list[str], message: str
) -> None:
    table = tmp_path / "t.tsv"
    table.write_text("\t".join(header) + ("\n0.wav\tHELLO\n" if header else ""), encoding="utf-8")
    done = bench(str(table), *args, out=tmp_path / "out")
    assert done.returncode == 1, done.stderr
    assert message in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_bad_table_rows_are_skipped_with_their_line(tmp_path: Path) -> None:
    tsv = common_voice_copy(tmp_path / "cv")
    with tsv.open("a", encoding="utf-8") as handle:
        handle.write("only-two\tfields\n")
        handle.write("c0ffee\t\tEMPTY PATH\t0\t0\n")
    data = load_dataset(tsv)
    assert len(data.utterances) == len(references())
    assert [(row.line, row.reason) for row in data.bad_rows] == [
        (7, "2 fields where the header has 5"),
        (8, "empty 'path'"),
    ]


def test_the_metric_follows_the_reference_text() -> None:
    assert reference_metric(["今天天气很好"]) == "cer"
    assert reference_metric(["我们用 HELLO WORLD 学习中文"]) == "mer"
    assert reference_metric(["我用iPhone拍照"]) == "mer"
    assert reference_metric(["TURN YOUR FACE TO THE WALL", "42"]) == "wer"
    assert reference_metric([]) == "wer"


def test_a_chinese_test_set_on_a_byte_level_model_is_scored_by_characters(
    tmp_path: Path,
) -> None:
    zh_only = tmp_path / "zh"
    zh_only.mkdir()
    shutil.copy(ZH / "zh-weather.wav", zh_only)
    (zh_only / "trans.txt").write_text("zh-weather 今天天气很好\n", encoding="utf-8")
    for folder, expected in ((zh_only, "cer"), (ZH, "mer")):
        out = tmp_path / f"out-{expected}"
        done = bench(str(folder), "--model", "tiny-random-byte", out=out)
        assert done.returncode == 0, done.stderr
        run = json.loads((out / "results.json").read_text())["run"]
        assert run["metric"] == expected


def test_fail_on_against_a_baseline_with_no_matching_setting_is_refused(tmp_path: Path) -> None:
    first = bench(str(CLIPS), "--limit", "1", out=tmp_path / "base")
    assert first.returncode == 0, first.stderr
    done = bench(
        str(CLIPS), "--limit", "1", "--chunk", "32", "--baseline",
        str(tmp_path / "base" / "results.json"), "--fail-on", "wer+1", out=tmp_path / "never",
    )
    assert done.returncode == 2, done.stderr
    assert "has no setting of this run" in done.stderr and "chunk" in done.stderr
    assert not (tmp_path / "never").exists()
