"""One engine seam: a backend that lives only in tests goes through every command.

`energy_backend.py` beside this file is an engine none of streamasr's modules know: it is
named on the command line as `--backend energy_backend:BACKEND`, with this folder on
PYTHONPATH, exactly as a third-party engine would be.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

import streamasr
from streamasr.backends.base import BackendInfo, EngineOptions
from streamasr.backends.plan import LoadPlan
from streamasr.backends.registry import choose_backend, find_backend
from streamasr.errors import UsageError
from streamasr.session.events import Final

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
BACKEND = "energy_backend:BACKEND"
MODEL = "energy-bursts"


def bursts(rate: int, starts_s: list[float], length_s: float, burst_s: float = 0.15) -> np.ndarray:
    """Silence with a 440 Hz burst at each start time."""
    audio = np.zeros(int(length_s * rate), np.float32)
    t = np.arange(int(burst_s * rate)) / rate
    tone = (0.3 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)
    for start in starts_s:
        first = int(start * rate)
        audio[first : first + len(tone)] = tone
    return audio


@pytest.fixture(scope="module")
def burst_wav(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two groups of bursts with a 3 s pause between, at 16 kHz: the core resamples to 8 kHz."""
    path = tmp_path_factory.mktemp("bursts") / "bursts.wav"
    sf.write(path, bursts(16000, [0.5, 1.0, 1.5, 5.0, 5.5], 7.0), 16000, subtype="PCM_16")
    return path


def cli(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), str(REPO)]))
    return subprocess.run(
        [sys.executable, "-m", "streamasr.cli", *args],
        env=env, cwd=REPO, capture_output=True, input=stdin, timeout=300,
    )


def test_registry_picks_backends_by_model_and_by_name() -> None:
    assert choose_backend("tiny-en").name == "sherpa-onnx"
    assert choose_backend(None).name == "sherpa-onnx"
    assert choose_backend("x.nemo").name == "nemo"
    assert find_backend(BACKEND).name == "energy"
    with pytest.raises(UsageError, match="sherpa-onnx"):
        find_backend("no-such-engine")


def test_library_face_streams_events_with_core_resampling_and_endpointing() -> None:
    model = streamasr.open_model(MODEL, backend=BACKEND)
    assert isinstance(model.info, BackendInfo) and model.info.sample_rate_hz == 8000
    audio = bursts(16000, [0.5, 1.0, 1.5, 5.0, 5.5], 7.0)
    blocks = [audio[i : i + 1600] for i in range(0, len(audio), 1600)]
    finals = [e for e in model.stream(blocks, sample_rate=16000) if isinstance(e, Final)]
    # the 3 s pause ends the first utterance by rule2 (1.2 s after its last token)
    assert [f.text for f in finals] == ["B1 B2 B3", "B1 B2"]
    assert finals[0].token_times_s == pytest.approx((0.5, 1.0, 1.5), abs=0.02)
    assert finals[1].token_times_s == pytest.approx((5.0, 5.5), abs=0.02)
    # a final ends one output frame (20 ms here, not Zipformer's 40 ms) after its last token
    assert finals[0].end_s == pytest.approx(finals[0].token_times_s[-1] + 0.02, abs=1e-6)


def test_library_result_does_not_depend_on_feed_block() -> None:
    model = streamasr.open_model(MODEL, backend=BACKEND)
    audio = bursts(44100, [0.3, 0.9, 4.0], 6.0)
    results = set()
    for block in (441, 4410, 14112, len(audio)):
        events = list(model.stream([audio[i : i + block] for i in range(0, len(audio), block)],
                                   sample_rate=44100))
        results.add(tuple((f.text, f.token_times_s) for f in events if isinstance(f, Final)))
    assert len(results) == 1 and next(iter(results))


def test_file_command_runs_the_test_backend(burst_wav: Path) -> None:
    done = cli("file", str(burst_wav), "--backend", BACKEND, "--model", MODEL, "-f", "jsonl")
    assert done.returncode == 0, done.stderr.decode()
    records = [json.loads(line) for line in done.stdout.decode().splitlines()]
    finals = [r for r in records if r["type"] == "final"]
    assert [f["text"] for f in finals] == ["B1 B2 B3", "B1 B2"]


def test_bench_with_streams_runs_the_test_backend(burst_wav: Path, tmp_path: Path) -> None:
    manifest = tmp_path / "set.jsonl"
    lines = [
        json.dumps({"audio_filepath": str(burst_wav), "text": "b1 b2 b3 b1 b2", "id": f"u{i}"})
        for i in range(3)
    ]
    manifest.write_text("\n".join(lines) + "\n")
    done = cli("bench", str(manifest), "--backend", BACKEND, "--model", MODEL,
               "--streams", "2", "--out", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr.decode()
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    setting = results["settings"][0]
    assert setting["summary"]["error_rate_pct"] == 0.0
    assert results["run"]["backend"] == "energy"


def test_latency_measure_runs_the_test_backend() -> None:
    done = cli("latency", "--backend", BACKEND, "--model", MODEL, "--measure", "-f", "json")
    assert done.returncode == 0, done.stderr.decode()
    report = json.loads(done.stdout)
    lines = {line["key"]: line for line in report["lines"]}
    # the backend needs one chunk (160 ms) plus its 40 ms look-ahead before its first step
    assert lines["measured_first_step_ms"]["value"] == pytest.approx(200.0, abs=0.5)
    assert lines["measured_step_interval_ms"]["value"] == pytest.approx(160.0, abs=0.5)


def test_engine_options_reach_the_backend() -> None:
    rec = LoadPlan(MODEL, BACKEND, EngineOptions(threads=1)).load()
    assert rec.options.threads == 1


def test_mic_runs_the_test_backend_from_an_injected_source() -> None:
    """`mic`'s own builder and live loop, a 48 kHz stereo headset (PortAudio stream injected)."""
    import io

    from test_mic import HEADSET, factory

    from streamasr.commands.mic import terminal_output
    from streamasr.commands.options import ModelOptions, build
    from streamasr.devices.live import run_capture
    from streamasr.devices.mic import MicSource
    from streamasr.output.render import JsonlRenderer

    recognizer, options = build(ModelOptions(model=MODEL, backend=BACKEND), paced=True)
    assert recognizer.info.backend == "energy"
    mono = bursts(48000, [0.5, 1.0, 1.5, 5.0, 5.5], 7.5)  # more than the 7 s captured
    source = MicSource(HEADSET, recognizer.chunk_s,
                       stream_factory=factory(np.stack([mono, mono], axis=1)))
    shown = io.StringIO()
    summary = run_capture(source, recognizer, options, terminal_output(JsonlRenderer(shown), None),
                          None, 7.0)
    assert summary is not None and summary.audio_s == pytest.approx(7.0)
    records = [json.loads(line) for line in shown.getvalue().splitlines()]
    finals = [r for r in records if r["type"] == "final"]
    assert [f["text"] for f in finals] == ["B1 B2 B3", "B1 B2"]
    # live: the core resampled 48 kHz to the backend's 8 kHz and timed tokens in audio time
    assert finals[1]["token_times_s"] == pytest.approx([5.0, 5.5], abs=0.02)


def test_file_options_reach_the_test_backend_and_the_core(burst_wav: Path) -> None:
    """--no-endpoint is the core's (one final at the end), --threads the engine's."""
    done = cli("file", str(burst_wav), "--backend", BACKEND, "--model", MODEL, "-f", "jsonl",
               "--no-endpoint", "--threads", "2", "--block-ms", "37")
    assert done.returncode == 0, done.stderr.decode()
    records = [json.loads(line) for line in done.stdout.decode().splitlines()]
    assert [r["text"] for r in records if r["type"] == "final"] == ["B1 B2 B3 B4 B5"]


def readme_python_section() -> tuple[str, list[str]]:
    """The manual's "Use it from Python" example and the output it says it prints."""
    text = (REPO / "docs" / "python.md").read_text(encoding="utf-8")
    section = text.split("# Use it from Python\n", 1)[1].split("\n## ", 1)[0]
    code_part, rest = section.split("Run from a checkout", 1)
    code = "\n".join(
        line[4:] for line in code_part.splitlines() if line.startswith("    ") or not line.strip()
    )
    shown = [line[4:] for line in rest.split("\n\n")[1].splitlines()]
    return code.strip() + "\n", shown


def test_readme_python_example_runs_and_prints_what_the_readme_says() -> None:
    code, shown = readme_python_section()
    assert "streamasr.open_model(" in code and "model.stream(" in code
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=300)
    assert done.returncode == 0, done.stderr
    printed = done.stdout.splitlines()
    assert len(printed) == len(shown) == 2
    assert printed[0] == shown[0]  # the final with its start and end times, exactly
    # the summary line: same text; the RTF is a timing and differs from run to run
    assert printed[1].split(" (RTF")[0] == shown[1].split(" (RTF")[0]
