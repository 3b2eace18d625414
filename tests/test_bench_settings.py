"""`bench` through the engine seam: settings are loaded by the registry, whatever the engine.

A sweep is over sherpa-onnx exports (`--chunk 16,32`) or over the look-aheads a NeMo model was
trained with (`--att-context-size 70,1/70,13`); every setting is loaded before any runs, and
the run record describes what ran from the loaded model's BackendInfo. Worker processes load
their engines through the registry too, so a backend that lives only in tests works there.
The runs that load the .nemo are forked from one process that imported torch and NeMo once
(`warm_nemo`, tests/warm_nemo.py); the others start a fresh interpreter.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import make_dataset
from warm_nemo import WarmNemo

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
NEMO = REPO / "models" / "tiny-nemo-streaming" / "tiny-nemo-streaming.nemo"
ENERGY = "energy_backend:BACKEND"
SPEED_FIELDS = {"compute_s", "rtf"}  # the only per-utterance fields that depend on the cores


def bench(*args: str | Path) -> subprocess.CompletedProcess:
    """`streamasr bench ...` in a fresh interpreter, with the test backend importable."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), str(REPO)]))
    return subprocess.run(
        [sys.executable, "-m", "streamasr.cli", "bench", *map(str, args)],
        env=env, cwd=REPO, capture_output=True, text=True, timeout=600,
    )


def nemo_bench(warm_nemo: WarmNemo, *args: str | Path) -> subprocess.CompletedProcess:
    """`streamasr bench ...` forked from the process that imported torch and NeMo once."""
    return warm_nemo.cli("bench", *map(str, args), timeout=600)


@pytest.fixture(scope="module")
def manifest(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_dataset(tmp_path_factory.mktemp("ds"), n=2, seed=5) / "manifest.jsonl"


def test_nemo_sweep_over_trained_look_aheads(
    manifest: Path, tmp_path: Path, warm_nemo: WarmNemo
) -> None:
    out = tmp_path / "out"
    done = nemo_bench(warm_nemo, manifest, "--model", NEMO, "--att-context-size", "70,1/70,13",
                 "--streams", "2", "--out", out)
    assert done.returncode == 0, done.stderr
    doc = json.loads((out / "results.json").read_text())
    run = doc["run"]
    assert (run["backend"], run["device"], run["model"]) == ("nemo", "cpu", "tiny-nemo-streaming")
    assert run["settings"] == ["att 70,1", "att 70,13"]
    assert run["att_context_sizes"] == ["70,1", "70,13"] and run["chunks"] == [None, None]
    assert run["lookahead_ms"] == [80, 1040] and run["output_frame_ms"] == 80
    assert run["metric"] == "wer"  # a BPE model that is no catalog release
    digest = hashlib.sha256(NEMO.read_bytes()).hexdigest()
    expected = {"att 70,1": (160, 80), "att 70,13": (1120, 1040)}
    for setting in doc["settings"]:
        chunk_ms, lookahead_ms = expected[setting["name"]]
        assert (setting["chunk_ms"], setting["lookahead_ms"]) == (chunk_ms, lookahead_ms)
        assert setting["output_frame_ms"] == 80 and setting["backend"] == "nemo"
        assert setting["att_context_size"] == setting["name"].split()[1]
        assert "chunk" not in setting
        assert setting["files"] == {NEMO.name: digest}
        summary = setting["summary"]
        assert summary["utterances"] == 2 and summary["failed"] == 0
        (batched,) = summary["streams"]
        assert batched["n"] == 2 and batched["same_text"], batched


def test_untrained_look_ahead_stops_the_sweep_before_anything_runs(
    manifest: Path, tmp_path: Path, warm_nemo: WarmNemo
) -> None:
    out = tmp_path / "out"
    done = nemo_bench(warm_nemo, manifest, "--model", NEMO, "--att-context-size", "70,1/70,3",
                      "--out", out)
    assert done.returncode == 2, done.stderr
    assert "70,3 was not trained" in done.stderr and "70,13, 70,6, 70,1, 70,0" in done.stderr
    assert "Traceback" not in done.stderr
    assert not out.exists()  # checked before a single utterance ran


def test_a_setting_of_the_other_engine_is_a_usage_error(manifest: Path, tmp_path: Path) -> None:
    nemo_chunk = bench(manifest, "--model", NEMO, "--chunk", "16", "--out", tmp_path / "a")
    assert nemo_chunk.returncode == 2 and "--att-context-size" in nemo_chunk.stderr
    sherpa_att = bench(manifest, "--model", "tiny-random-transducer", "--att-context-size",
                       "70,1", "--out", tmp_path / "b")
    assert sherpa_att.returncode == 2 and "--chunk" in sherpa_att.stderr
    both = bench(manifest, "--model", "tiny-random-transducer", "--chunk", "16",
                 "--att-context-size", "70,1", "--out", tmp_path / "c")
    assert both.returncode == 2 and "not both" in both.stderr
    # a backend that declares neither setting refuses both, named by what it is
    energy = bench(manifest, "--backend", ENERGY, "--model", "energy-bursts", "--chunk", "16",
                   "--out", tmp_path / "d")
    assert energy.returncode == 2 and "energy model with no chunk setting" in energy.stderr
    for done in (nemo_chunk, sherpa_att, both, energy):
        assert "Traceback" not in done.stderr


def test_sherpa_chunk_sweep_names_its_settings_and_records_the_export(
    manifest: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    done = bench(manifest, "--model", "tiny-random-transducer", "--chunk", "16,32", "--out", out)
    assert done.returncode == 0, done.stderr
    doc = json.loads((out / "results.json").read_text())
    assert doc["run"]["backend"] == "sherpa-onnx" and doc["run"]["chunks"] == [16, 32]
    for setting, chunk in zip(doc["settings"], (16, 32), strict=True):
        assert setting["name"] == f"chunk {chunk}" and setting["chunk"] == chunk
        # zipformer2 exports: 130 ms look-ahead past the chunk, 40 ms output frames
        assert (setting["lookahead_ms"], setting["output_frame_ms"]) == (130, 40)
        assert setting["settings"]["chunk"] == chunk and "att_context_size" not in setting
    missing = bench(manifest, "--model", "tiny-random-transducer", "--chunk", "16,48",
                    "--out", tmp_path / "m")
    assert missing.returncode == 2 and "Traceback" not in missing.stderr
    assert "16" in missing.stderr and "32" in missing.stderr  # the chunks the model has


def test_workers_load_a_test_backend_through_the_registry(manifest: Path, tmp_path: Path) -> None:
    """Worker processes get the model, the backend name and the EngineOptions (pickled) and
    load the engine themselves: their records equal one worker's."""
    docs = []
    for workers in (1, 2):
        out = tmp_path / f"w{workers}"
        done = bench(manifest, "--backend", ENERGY, "--model", "energy-bursts",
                     "--workers", str(workers), "--out", out)
        assert done.returncode == 0, done.stderr
        docs.append(json.loads((out / "results.json").read_text()))
    one, two = (doc["settings"][0] for doc in docs)
    assert one["name"] == "energy" and two["summary"]["workers"] == 2
    assert one["backend"] == "energy" and one["output_frame_ms"] == 20
    for ua, ub in zip(one["utterances"], two["utterances"], strict=True):
        assert ua["hypothesis"], "speech has energy bursts, so there is text to compare"
        same = {k: v for k, v in ua.items() if k not in SPEED_FIELDS}
        assert same == {k: v for k, v in ub.items() if k not in SPEED_FIELDS}, ua["id"]
