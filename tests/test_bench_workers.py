"""`bench --workers N`: utterances spread over worker processes give the one-worker report."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import make_dataset

SPEED_FIELDS = {"compute_s", "rtf"}  # the only per-utterance fields that depend on the cores


def _bench(dataset: Path, out: Path, *extra: str) -> dict:
    proc = subprocess.run(
        [sys.executable, "-m", "streamasr.cli", "bench", str(dataset / "manifest.jsonl"),
         "--model", "tiny-random-transducer", "--threads", "1", "--chunk", "16,32",
         "--out", str(out), *extra],
        capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads((out / "results.json").read_text(encoding="utf-8"))


def test_workers_give_the_one_worker_results_in_dataset_order(tmp_path: Path) -> None:
    dataset = make_dataset(tmp_path / "ds", n=7, seed=11)
    one = _bench(dataset, tmp_path / "w1")
    three = _bench(dataset, tmp_path / "w3", "--workers", "3")
    assert (one["run"]["workers"], three["run"]["workers"]) == (1, 3)
    assert len(one["settings"]) == len(three["settings"]) == 2
    for a, b in zip(one["settings"], three["settings"], strict=True):
        assert b["summary"]["workers"] == 3
        ids = [u["id"] for u in a["utterances"]]
        assert len(ids) == 7 and [u["id"] for u in b["utterances"]] == ids
        for ua, ub in zip(a["utterances"], b["utterances"], strict=True):
            same = {k: v for k, v in ua.items() if k not in SPEED_FIELDS}
            assert same == {k: v for k, v in ub.items() if k not in SPEED_FIELDS}, ua["id"]
            assert ua["hypothesis"], "random weights still emit text, so text is compared"
        for key in ("error_rate_pct", "first_token_ms", "final_ms", "complete_ms", "audio_s"):
            assert a["summary"][key] == b["summary"][key], key


def test_workers_out_of_range_is_a_usage_error(tmp_path: Path) -> None:
    dataset = make_dataset(tmp_path / "ds", n=1, seed=1)
    proc = subprocess.run(
        [sys.executable, "-m", "streamasr.cli", "bench", str(dataset / "manifest.jsonl"),
         "--model", "tiny-random-transducer", "--workers", "0", "--out", str(tmp_path / "o")],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 2
    assert "--workers must be between 1 and" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_int8_batching_is_reported_plainly(tmp_path: Path) -> None:
    """An int8 model batched gets a note that batches are not bit-exact; fp32 does not."""
    dataset = make_dataset(tmp_path / "ds", n=2, seed=4)
    notes = {}
    for model in ("tiny-en", "tiny-random-transducer"):
        proc = subprocess.run(
            [sys.executable, "-m", "streamasr.cli", "bench", str(dataset / "manifest.jsonl"),
             "--model", model, "--streams", "2", "--out", str(tmp_path / model)],
            capture_output=True, text=True, timeout=600,
        )
        assert proc.returncode == 0, proc.stderr
        notes[model] = "quantises activations with one scale per batch" in proc.stderr
    assert notes == {"tiny-en": True, "tiny-random-transducer": False}
