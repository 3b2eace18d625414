"""scripts/compare_models.py: its tables are `streamasr bench`'s own figures, regrouped.

Why: the choice of a new bundled model rests on this table, so each cell must be exactly what
bench reports (the script runs the real CLI on real sherpa-onnx models), grouped by the
manifest's own engine and voice fields; a mistyped --set must stop before any model runs.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import MODELS, REPO

from streamasr.bench.metrics import ErrorCounts, total_counts

SCRIPT = REPO / "scripts" / "compare_models.py"
CLIPS = MODELS / "tiny-en" / "test_wavs"
LIBRIVOX = Path("/usr/share/pocketsphinx/test/data/librivox")
RANDOM = str(MODELS / "tiny-random-transducer")
# set -> [(clip, engine, voice)]: two voices in set "one", two engines in set "two"
PLAN = {
    "one": [("0", "espeak", "espeak:a"), ("1", "espeak", "espeak:b"), ("2", "espeak", "espeak:a")],
    "two": [("3", "flite", "flite:rms"), ("4", "festival", "festival:ked")],
}


def run(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *(str(a) for a in args)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )


def write_manifests(folder: Path) -> dict[str, Path]:
    """One manifest per set from the bundled model's test clips, audio paths relative."""
    texts = dict(line.split(maxsplit=1) for line in (CLIPS / "trans.txt").read_text().splitlines())
    manifests = {}
    for name, clips in PLAN.items():
        rows = [
            {
                "audio_filepath": f"wavs/{clip}.wav",
                "text": texts[clip],
                "engine": engine,
                "voice": voice,
            }
            for clip, engine, voice in clips
        ]
        (folder / name / "wavs").mkdir(parents=True)
        for clip, _, _ in clips:
            (folder / name / "wavs" / f"{clip}.wav").write_bytes(
                (CLIPS / f"{clip}.wav").read_bytes()
            )
        manifest = folder / name / "manifest.jsonl"
        manifest.write_text("".join(json.dumps(r) + "\n" for r in rows))
        manifests[name] = manifest
    return manifests


@pytest.fixture(scope="module")
def compared(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str]:
    """The script run once: tiny-en against the random transducer on both sets."""
    root = tmp_path_factory.mktemp("compare")
    manifests = write_manifests(root / "data")
    out = root / "out"
    done = run(
        "--model", "tiny-en", "--model", RANDOM,
        *(a for name, m in manifests.items() for a in ("--set", f"{name}={m}")),
        "--chunk", "16", "--out", out,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return out, done.stdout, done.stderr


def bench_folder(out: Path, model: str, set_name: str) -> Path:
    return out / "bench" / Path(model).name / set_name


def test_set_rows_are_bench_summaries(compared: tuple[Path, str, str]) -> None:
    out, stdout, _ = compared
    doc = json.loads((out / "compare.json").read_text())
    assert (out / "compare.md").read_text().strip() == stdout.strip()
    assert doc["sherpa_onnx_version"]
    assert [r["group"] for r in doc["levels"]["set"]] == ["one", "two"]
    for entry in doc["levels"]["set"]:
        for model in ("tiny-en", RANDOM):
            folder = bench_folder(out, model, entry["group"])
            summary = json.loads((folder / "results.json").read_text())["settings"][0]["summary"]
            figures = entry["models"][model]
            assert figures["wer_pct"] == summary["error_rate_pct"]
            assert figures["words"] == summary["ref_units"]
            line = f"| {entry['group']} |"
            row = next(r for r in stdout.splitlines() if r.startswith(line))
            assert f"| {summary['error_rate_pct']:.2f} | {summary['ref_units']} |" in row
        run_ = next(r for r in doc["runs"] if r["set"] == entry["group"])
        assert run_["command"][1:4] == ["-m", "streamasr.cli", "bench"]
    # the random model cannot beat the trained one
    assert {e["better"] for e in doc["levels"]["set"]} == {"tiny-en"}


def test_voice_and_engine_groups(compared: tuple[Path, str, str]) -> None:
    out, stdout, _ = compared
    doc = json.loads((out / "compare.json").read_text())
    expected = {
        "voice": ["one/espeak:a", "one/espeak:b", "two/festival:ked", "two/flite:rms"],
        "engine": ["one/espeak", "two/festival", "two/flite"],
    }
    for level, groups in expected.items():
        assert [e["group"] for e in doc["levels"][level]] == groups
    bench_rows = {
        (set_name, r["id"]): r
        for set_name in PLAN
        for line in (bench_folder(out, "tiny-en", set_name) / "utterances.jsonl")
        .read_text()
        .splitlines()
        if (r := json.loads(line))
    }
    # one/espeak:a is clips 0 and 2 summed from bench's own per-utterance counts
    counts = total_counts(
        ErrorCounts(*(bench_rows[("one", c)]["counts"][k] for k in ErrorCounts.__annotations__))
        for c in ("0", "2")
    )
    voice_a = doc["levels"]["voice"][0]["models"]["tiny-en"]
    assert voice_a["utterances"] == 2
    assert voice_a["words"] == counts.ref_units
    assert voice_a["wer_pct"] == round(counts.rate_pct, 2)
    assert "| two/flite:rms |" in stdout


def test_bad_set_spec_exits_2_before_any_bench(tmp_path: Path) -> None:
    out = tmp_path / "out"
    for spec, message in [
        ("no-equals-sign", "expected NAME=MANIFEST"),
        ("x=" + str(tmp_path / "missing.jsonl"), "does not exist"),
        ("bad name=" + str(CLIPS / "trans.txt"), "the name may hold only"),
    ]:
        done = run("--model", "tiny-en", "--set", spec, "--out", out)
        assert done.returncode == 2, done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and message in lines[0], done.stderr
        assert not out.exists()


def test_librivox_manifest(tmp_path: Path) -> None:
    sys.path.insert(0, str(REPO / "scripts"))
    from compare_models import write_librivox_manifest

    rows = [
        json.loads(x)
        for x in write_librivox_manifest(LIBRIVOX, tmp_path).read_text().split("\n")
        if x
    ]
    assert len(rows) == 5
    assert rows[1]["text"] == "he was not an ill disposed young man"
    assert all(Path(r["audio_filepath"]).is_file() and r["engine"] == "human" for r in rows)
