"""`streamasr bench` against bad folders, bad rows, forged audio, kills and missing packages.

Why: a bench can run for hours. A results folder that cannot be written, or a `--plot` that
cannot be drawn, must stop it before the first utterance; a bad row or a forged file must
cost one row or one utterance, not the run; a kill midway must keep what was measured; and
no latency it reports may be negative. Every run here is a fresh `python -m streamasr.cli`
process on the bundled models through real sherpa-onnx, as a user would start it.
"""

from __future__ import annotations

import json
import os
import re
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from conftest import make_dataset, require_tool

from streamasr.backends.base import EngineOptions
from streamasr.backends.sherpa.engine import SherpaRecognizer
from streamasr.backends.sherpa.modeldir import resolve_model
from streamasr.bench.datasets import Utterance, load_dataset
from streamasr.bench.report import summarize
from streamasr.bench.runner import RunOptions, run_batched, run_sequential
from streamasr.bench.sweep import compare_batched

REPO = Path(__file__).resolve().parent.parent
RANDOM = ["--model", "tiny-random-transducer"]

# ---- measured on the bundled model: models/tiny-en/README.md --------------------------
# DynamicQuantizeLinear nodes in tiny-en's int8 chunk-32 encoder (set by the architecture)
INT8_QUANTISE_NODES = 120
# a make_dataset seed whose 20 utterances, batched together, show int8 batching move a
# token time in at least one (scripts/batch_timestamps.py models/tiny-en 32 <its wavs>)
BATCHING_SEED = 0
# ----------------------------------------------------------------------------------------
OUTPUT_FRAME_S = 0.04  # a token time moves by whole encoder output frames


def bench(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "streamasr.cli", "bench", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=300,
    )


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_dataset(tmp_path_factory.mktemp("hardening"), n=3, seed=5)


@pytest.fixture(scope="module")
def data20(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """20 utterances: batched together, at least one shows int8 batching move a token time."""
    return make_dataset(tmp_path_factory.mktemp("batching"), n=20, seed=BATCHING_SEED)


# ---- --out is proved writable before anything runs -------------------------------------


def test_out_that_is_a_file_is_refused_before_decoding(data: Path, tmp_path: Path) -> None:
    target = tmp_path / "results"
    target.write_text("keep me\n")
    result = bench(str(data / "manifest.jsonl"), *RANDOM, "--out", str(target))
    assert result.returncode == 2, result.stderr
    assert "is a file" in result.stderr and "Traceback" not in result.stderr
    assert target.read_text() == "keep me\n"
    assert "results:" not in result.stderr  # no table: nothing was decoded


def in_namespace_with_tmpfs(mount: Path, options: str, script: str) -> list[str]:
    """A command that runs `script` where `mount` is a fresh tmpfs (user + mount namespace:
    a read-only or full file system even for root, and without touching the host)."""
    require_tool("unshare")
    return [
        "unshare",
        "-rm",
        "sh",
        "-c",
        f"mount -t tmpfs -o {options} tmpfs '{mount}' && {script}",
    ]


def bench_out_on_tmpfs(
    data: Path, mount: Path, options: str, before: str = ""
) -> subprocess.CompletedProcess:
    """`streamasr bench --out` on a private tmpfs mounted with `options` (after `before`)."""
    mount.mkdir()
    cli = f"'{sys.executable}' -m streamasr.cli bench '{data / 'manifest.jsonl'}' "
    cli += f"--model tiny-random-transducer --out '{mount}/res'"
    return subprocess.run(
        in_namespace_with_tmpfs(mount, options, before + cli),
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )


def test_read_only_out_is_refused_before_decoding(data: Path, tmp_path: Path) -> None:
    result = bench_out_on_tmpfs(data, tmp_path / "ro", "ro,size=1m")
    assert result.returncode == 1, result.stderr
    assert "read-only file system" in result.stderr and "Traceback" not in result.stderr
    assert "results:" not in result.stderr


def test_full_disk_out_is_refused_before_decoding(data: Path, tmp_path: Path) -> None:
    mount = tmp_path / "full"
    fill = f"(head -c 1000000 /dev/zero > '{mount}/fill' 2>/dev/null; true) && "
    result = bench_out_on_tmpfs(data, mount, "size=128k", before=fill)
    assert result.returncode == 1, result.stderr
    assert "no space left" in result.stderr and "Traceback" not in result.stderr
    assert "results:" not in result.stderr


def test_records_survive_a_run_killed_midway(data: Path, tmp_path: Path) -> None:
    # --realtime paces each utterance at live speed (3-5 s each): time enough to kill it
    # after the first record and before the last
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "streamasr.cli",
            "bench",
            str(data / "manifest.jsonl"),
            *RANDOM,
            "--realtime",
            "--out",
            str(out),
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    records = out / "utterances.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if records.is_file() and records.read_text().count("\n") >= 1:
            break
        time.sleep(0.05)
    assert proc.poll() is None, "the run ended before it could be killed"
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 143, stderr
    assert "Traceback" not in stderr and "utterances.jsonl" in stderr
    lines = records.read_text().splitlines()
    assert 1 <= len(lines) < 3
    ids = [u.id for u in load_dataset(data / "manifest.jsonl").utterances]
    for line, utt_id in zip(lines, ids, strict=False):
        record = json.loads(line)
        assert record["id"] == utt_id and record["setting"] == "chunk 16"
        assert record["hypothesis"] and record["timing"]["first_token_ms"] >= 0


def test_records_are_written_as_utterances_finish(data: Path, tmp_path: Path) -> None:
    result = bench(str(data / "kaldi"), *RANDOM, "--streams", "1,2", "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    lines = [json.loads(x) for x in (tmp_path / "utterances.jsonl").read_text().splitlines()]
    doc = json.loads((tmp_path / "results.json").read_text())
    one = [r for r in lines if r["setting"] == "chunk 16"]
    assert [r["hypothesis"] for r in one] == [
        u["hypothesis"] for u in doc["settings"][0]["utterances"]
    ]
    assert len([r for r in lines if r["setting"] == "chunk 16 x2"]) == 3


# ---- --plot without matplotlib ---------------------------------------------------------


def test_plot_without_matplotlib_fails_before_running(data: Path, tmp_path: Path) -> None:
    shadow = tmp_path / "shadow" / "matplotlib"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text('raise ImportError("No module named matplotlib")\n')
    env = {**os.environ, "PYTHONPATH": str(shadow.parent)}
    out = tmp_path / "out"
    result = bench(
        str(data / "manifest.jsonl"),
        *RANDOM,
        "--plot",
        str(tmp_path / "p.png"),
        "--out",
        str(out),
        env=env,
    )
    assert result.returncode == 1, result.stderr
    assert "pip install 'streamasr[plot]'" in result.stderr
    assert "Traceback" not in result.stderr
    assert not out.exists() and not (tmp_path / "p.png").exists()


def test_plot_names_model_and_dataset_and_starts_at_zero(data: Path, tmp_path: Path) -> None:
    from streamasr.bench.plot import tradeoff_figure

    result = bench(
        str(data / "manifest.jsonl"),
        *RANDOM,
        "--chunk",
        "16,32",
        "--out",
        str(tmp_path),
        "--plot",
        str(tmp_path / "p.png"),
    )
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    doc = json.loads((tmp_path / "results.json").read_text())
    fig = tradeoff_figure(doc)
    (ax,) = fig.axes
    title = ax.get_title()
    assert "tiny-random-transducer" in title and f"{data.name}/manifest.jsonl" in title
    assert ax.get_ylim()[0] == 0 and ax.get_xlim()[0] == 0
    rates = [s["summary"]["error_rate_pct"] for s in doc["settings"]]
    assert ax.get_ylim()[1] >= max(rates)
    labels = [t.get_text() for t in ax.texts]
    assert labels == ["chunk 16 (320 ms)", "chunk 32 (640 ms)"]
    for text, setting in zip(ax.texts, doc["settings"], strict=True):
        s = setting["summary"]
        assert text.xy == (s["first_token_ms"]["p50"], s["error_rate_pct"])


# ---- bad rows and forged audio ---------------------------------------------------------


def test_deeply_nested_and_out_of_audio_rows_are_skipped(data: Path, tmp_path: Path) -> None:
    rows = [json.loads(x) for x in (data / "manifest.jsonl").read_text().splitlines()]
    for row in rows:
        row["audio_filepath"] = str(data / row["audio_filepath"])
    no_duration = {k: v for k, v in rows[1].items() if k != "duration"}
    manifest = tmp_path / "m.jsonl"
    manifest.write_text(
        "\n".join(
            [
                json.dumps(rows[0]),
                "[" * 200_000 + "]" * 200_000,
                json.dumps({**rows[1], "id": "far", "speech_onset_s": 1e9}),
                json.dumps(
                    {**no_duration, "id": "far2", "speech_onset_s": 1e9, "speech_end_s": 2e9}
                ),
                json.dumps({**no_duration, "id": "late-end", "speech_end_s": 99.0}),
                json.dumps(rows[2]),
            ]
        )
        + "\n"
    )
    found = load_dataset(manifest)
    assert [u.id for u in found.utterances] == [rows[0]["id"], rows[2]["id"]]
    bad = [str(b) for b in found.bad_rows]
    assert bad[0].startswith(f"{manifest}:2: JSON nested too deeply")
    assert bad[1].startswith(f"{manifest}:3: 'speech_onset_s' 1e+09 s lies after the end")
    assert bad[2].startswith(f"{manifest}:4: 'speech_onset_s' 1e+09 s lies after the end")
    assert bad[3].startswith(f"{manifest}:5: 'speech_end_s' 99 s lies after the end")
    result = bench(str(manifest), *RANDOM, "--out", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    assert f"{manifest}:2: JSON nested too deeply" in result.stderr
    assert "Traceback" not in result.stderr
    summary = json.loads((tmp_path / "out" / "results.json").read_text())["settings"][0]
    assert all(u["timing"]["first_token_ms"] >= 0 for u in summary["utterances"])


def forged_rate_wav(path: Path) -> Path:
    """A valid 16-bit WAV whose header then claims 2^31-1 samples per second."""
    sf.write(path, np.zeros(16000, np.float32), 16000, subtype="PCM_16")
    raw = bytearray(path.read_bytes())
    raw[24:28] = struct.pack("<I", 2**31 - 1)
    raw[28:32] = struct.pack("<I", (2**31 - 1) * 2)
    path.write_bytes(bytes(raw))
    return path


@pytest.mark.parametrize("streams", ["1", "1,2"])
def test_forged_sample_rate_is_one_failed_utterance(
    data: Path, tmp_path: Path, streams: str
) -> None:
    rows = [json.loads(x) for x in (data / "manifest.jsonl").read_text().splitlines()]
    forged = forged_rate_wav(tmp_path / "forged.wav")
    lines = []
    for row in rows[:2]:
        row["audio_filepath"] = str(data / row["audio_filepath"])
        lines.append(json.dumps(row))
    lines.insert(1, json.dumps({"audio_filepath": str(forged), "text": "A B", "id": "forged"}))
    manifest = tmp_path / "m.jsonl"
    manifest.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    result = bench(str(manifest), *RANDOM, "--streams", streams, "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    setting = json.loads((out / "results.json").read_text())["settings"][0]
    assert setting["summary"]["failed"] == 1 and setting["summary"]["utterances"] == 3
    first, bad, last = setting["utterances"]
    assert "Hz" in bad["error"] and "forged.wav" in bad["error"]
    assert first["hypothesis"] and last["hypothesis"] and not first["error"]
    for info in setting["summary"]["streams"] or []:
        assert info["same_text"] and info["identical"]


# ---- batching: exact in fp32; in int8 what changes is reported ---------------------------


def _sequential_and_batched(data20: Path, model: str, chunk: int):
    """The 20 clips decoded one at a time, then batched by 2 and by 4, with bench's report."""
    recognizer = SherpaRecognizer(resolve_model(model, chunk), EngineOptions(threads=1))
    utts = load_dataset(data20 / "manifest.jsonl").utterances
    sequential = run_sequential(recognizer, utts, RunOptions())
    assert any(r.hypothesis for r in sequential)
    for n in (2, 4):
        batched = run_batched(recognizer, utts, RunOptions(), n)
        yield sequential, batched, compare_batched("x", sequential, batched, n, 1.0)


@pytest.mark.parametrize("chunk", [16, 32])
def test_fp32_batching_is_exact(data20: Path, chunk: int) -> None:
    for sequential, batched, info in _sequential_and_batched(
        data20, "tiny-random-transducer", chunk
    ):
        assert [a.text() for a in sequential] == [b.text() for b in batched]
        assert info["same_text"] and info["identical"], info["mismatched"]


@pytest.mark.parametrize("chunk", [16, 32])
def test_int8_batching_differences_are_reported_utterance_by_utterance(
    data20: Path, chunk: int
) -> None:
    """The int8 tiny-en picks one activation scale per batch, so batching can change a
    token; bench must name exactly the utterances that changed."""
    for sequential, batched, info in _sequential_and_batched(data20, "tiny-en", chunk):
        changed = [a.id for a, b in zip(sequential, batched, strict=True) if a.text() != b.text()]
        moved = [
            a.id for a, b in zip(sequential, batched, strict=True)
            if a.algorithmic() != b.algorithmic()
        ]  # fmt: skip
        assert info["text_mismatched"] == changed and info["same_text"] == (not changed)
        assert info["mismatched"] == moved and info["identical"] == (not moved)
        assert set(changed) <= set(moved)
        assert len(changed) < len(sequential) // 2  # most utterances keep their text


def _moved_times(report: str) -> list[tuple[float, float]]:
    """(alone, batched) of every token time batch_timestamps.py prints as moved."""
    found = re.findall(r"alone ([0-9.]+) s, batched ([0-9.]+) s", report)
    return [(float(a), float(b)) for a, b in found]


def test_bare_engine_shows_int8_batching_moves_a_token_time(data20: Path) -> None:
    """On bare sherpa-onnx, batched int8 moves token times in some clips, never alone-vs-copies."""
    args = [str(w) for w in sorted((data20 / "wavs").glob("*.wav"))]
    assert len(args) == 20
    script = [sys.executable, str(REPO / "scripts" / "batch_timestamps.py")]
    int8 = subprocess.run(
        [*script, str(REPO / "models/tiny-en"), "32", *args],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    ).stdout
    assert f"{INT8_QUANTISE_NODES} DynamicQuantizeLinear nodes" in int8
    batched, control = int8.split("copies of itself:")
    verdicts = re.findall(r"^\S+\.wav: (.+)$", batched, flags=re.MULTILINE)
    assert len(verdicts) == 20
    assert "identical" in verdicts and any("timestamps" in v for v in verdicts), int8
    moved = _moved_times(batched)
    # every moved time moves by whole 40 ms output frames
    assert moved and all(
        abs(round((a - b) / OUTPUT_FRAME_S) * OUTPUT_FRAME_S - (a - b)) < 1e-6 for a, b in moved
    ), moved
    assert "differs" not in control
    fp32 = subprocess.run(
        [*script, str(REPO / "models/tiny-random-transducer"), "32", *args],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    ).stdout
    assert "0 DynamicQuantizeLinear nodes" in fp32 and "0 of 20 clips differ" in fp32


def test_streams_sweep_reports_each_value(data: Path, tmp_path: Path) -> None:
    result = bench(
        str(data / "manifest.jsonl"), *RANDOM, "--streams", "1,2,3", "--out", str(tmp_path)
    )
    assert result.returncode == 0, result.stderr
    doc = json.loads((tmp_path / "results.json").read_text())
    assert doc["run"]["streams"] == [1, 2, 3]
    entries = doc["settings"][0]["summary"]["streams"]
    assert [e["n"] for e in entries] == [2, 3]
    assert all(e["identical"] and e["same_text"] and e["throughput_x"] > 0 for e in entries)
    md = (tmp_path / "results.md").read_text()
    assert "x real time 2 streams" in md and "x real time 3 streams" in md
    refused = bench(
        str(data / "manifest.jsonl"), *RANDOM, "--streams", "1,x", "--out", str(tmp_path / "no")
    )
    assert refused.returncode == 2 and "--streams" in refused.stderr


# ---- latencies are never negative ------------------------------------------------------


def test_text_before_the_onset_is_counted_not_negative(data: Path) -> None:
    recognizer = SherpaRecognizer(resolve_model("tiny-en", 16), EngineOptions())
    utts = list(load_dataset(data / "manifest.jsonl").utterances)
    # the trained model shows text after the real onsets; an onset claimed 0.1 s before
    # the end of the audio comes after that text
    late = utts[0]
    utts[0] = Utterance(
        late.id,
        late.audio,
        late.text,
        late.origin,
        late.duration_s,
        (late.duration_s or 3.0) - 0.1,
        late.duration_s,
    )
    records = run_sequential(recognizer, utts, RunOptions())
    assert records[0].timing.text_before_onset and records[0].timing.first_token_ms == 0.0
    assert not any(r.timing.text_before_onset for r in records[1:])
    summary = summarize(records, "wer", 1.0)
    assert summary["text_before_onset"] == 1 and summary["text_before_onset_ids"] == [late.id]
    kept = sorted(r.timing.first_token_ms for r in records[1:])
    assert summary["first_token_ms"]["p50"] == pytest.approx(float(np.percentile(kept, 50)))
