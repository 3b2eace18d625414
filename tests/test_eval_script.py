"""The tiny model's eval script and `streamasr bench` give the same text and the same WER.

Why: models/tiny-en/README.md quotes figures from both and says they agree. They share one
streaming loop (open_model's session) and one scoring (streamasr.bench.metrics), so on the
same test set every hypothesis and every error count must be identical, not just close.
Both run as a user runs them: fresh processes on real sherpa-onnx with the bundled model.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, make_dataset

SCRIPT = REPO / "scripts" / "eval_tiny_model.py"
LIBRIVOX = Path("/usr/share/pocketsphinx/test/data/librivox")
N_UTTERANCES = 20
# measured on the bundled model: models/tiny-en/README.md. The highest corpus WER on these
# 20 utterances (make_dataset seed 3, espeak-ng word lists) at chunk 16
MAX_CORPUS_WER_PCT = 85.0


def run(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *(str(a) for a in args)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def evalset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """20 espeak-ng utterances with exact transcripts, seen and held-out voices."""
    out = make_dataset(tmp_path_factory.mktemp("evalset"), N_UTTERANCES, seed=3)
    return out / "manifest.jsonl"


@pytest.fixture(scope="module")
def both_runs(evalset: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, list, dict]:
    """(eval report, eval per-utterance records, bench results.json) on the same set."""
    out = tmp_path_factory.mktemp("runs")
    evaluated = run(
        SCRIPT, "--model-dir", "models/tiny-en", "--chunk", "16", "--test", evalset,
        "--librivox", out / "no-librivox", "--json", out / "eval.json",
        "--utterances", out / "eval-utterances.jsonl",
    )
    assert evaluated.returncode == 0, evaluated.stderr
    benched = run(
        "-m", "streamasr.cli", "bench", evalset, "-m", "tiny-en", "--chunk", "16",
        "--out", out / "bench",
    )
    assert benched.returncode == 0, benched.stderr
    report = json.loads((out / "eval.json").read_text())
    assert json.loads(evaluated.stdout) == report  # stdout is the same report
    records = read_jsonl(out / "eval-utterances.jsonl")
    return report, records, json.loads((out / "bench" / "results.json").read_text())


def test_same_hypothesis_and_counts_per_utterance(both_runs: tuple[dict, list, dict]) -> None:
    _, records, bench = both_runs
    (setting,) = bench["settings"]
    bench_by_id = {u["id"]: u for u in setting["utterances"]}
    assert [r["id"] for r in records] == list(bench_by_id)  # same utterances, same order
    assert len(records) == N_UTTERANCES
    for record in records:
        benched = bench_by_id[record["id"]]
        assert record["reference"] == benched["reference"]
        assert record["hypothesis"] == benched["hypothesis"], record["id"]
        for key in ("ref_units", "substitutions", "deletions", "insertions"):
            assert record["counts"][key] == benched["counts"][key], (record["id"], key)
    # The model really recognises this speech: most words come out right.
    assert setting["summary"]["error_rate_pct"] <= MAX_CORPUS_WER_PCT, setting["summary"]


def test_same_corpus_wer(both_runs: tuple[dict, list, dict]) -> None:
    report, records, bench = both_runs
    summary = bench["settings"][0]["summary"]
    ref_units = sum(r["counts"]["ref_units"] for r in records)
    errors = sum(
        r["counts"][k] for r in records for k in ("substitutions", "deletions", "insertions")
    )
    assert ref_units == summary["ref_units"]
    assert errors == summary["substitutions"] + summary["deletions"] + summary["insertions"]
    wer = report["tts_test"]["wer"]["all"]
    assert wer == round(errors / ref_units, 4)
    assert round(wer * 100, 2) == summary["error_rate_pct"]  # "agree to the hundredth"


def test_report_keeps_its_groups(both_runs: tuple[dict, list, dict]) -> None:
    """The report's per-voice layout: overall, seen/held-out, voice."""
    report, records, _ = both_runs
    assert set(report) == {"model_dir", "chunk", "head", "tts_test"}  # no LibriVox given
    groups = report["tts_test"]["utterances"]
    assert groups["all"] == N_UTTERANCES
    assert groups.get("voices:seen", 0) + groups.get("voices:heldout", 0) == N_UTTERANCES
    voices = {r["voice"] for r in records}
    assert sum(groups[f"voice:{v}"] for v in voices) == N_UTTERANCES
    assert set(report["tts_test"]["wer"]) == set(groups)
    for voice in voices:
        own = [r for r in records if r["voice"] == voice]
        words = sum(r["counts"]["ref_units"] for r in own)
        errors = sum(
            r["counts"][k] for r in own for k in ("substitutions", "deletions", "insertions")
        )
        assert report["tts_test"]["wer"][f"voice:{voice}"] == round(errors / words, 4)
    examples = report["tts_test"]["examples"]
    assert [e["hyp"] for e in examples] == [r["hypothesis"] for r in records[:8]]


def test_ctc_head_runs_through_the_loop(evalset: Path, tmp_path: Path) -> None:
    done = run(
        SCRIPT, "--model-dir", "models/tiny-random-ctc", "--head", "ctc", "--chunk", "16",
        "--test", evalset, "--librivox", tmp_path, "--utterances", tmp_path / "u.jsonl",
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["head"] == "ctc"
    assert len(read_jsonl(tmp_path / "u.jsonl")) == N_UTTERANCES


@pytest.mark.parametrize(
    ("model_dir", "head", "says"),
    [
        ("models/tiny-en", "ctc", "holds a transducer export"),
        ("models/tiny-random-ctc", "transducer", "holds a ctc export"),
    ],
)
def test_wrong_head_is_refused(evalset: Path, model_dir: str, head: str, says: str) -> None:
    done = run(SCRIPT, "--model-dir", model_dir, "--head", head, "--test", evalset)
    assert done.returncode == 2
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0] and f"--head {head}" in lines[0], done.stderr
    assert "Traceback" not in done.stderr


def test_missing_test_set_names_the_fix(tmp_path: Path) -> None:
    done = run(SCRIPT, "--test", tmp_path / "absent.jsonl")
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "make_training_data.py" in lines[0], done.stderr


def test_librivox_references_lose_only_the_markup() -> None:
    """pocketsphinx-testdata's lines are '<s> words </s> (id)'; the words are the reference."""
    sys.path.insert(0, str(REPO / "scripts"))
    import eval_tiny_model

    clips = eval_tiny_model.librivox_utterances(LIBRIVOX)
    assert len(clips) == 5
    raw = (LIBRIVOX / "transcription").read_text()
    for clip, reference in clips:
        assert (LIBRIVOX / f"{clip}.wav").is_file()
        assert f"<s> {reference} </s> ({clip})" in raw
        assert "<" not in reference and "(" not in reference
