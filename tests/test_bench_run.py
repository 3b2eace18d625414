"""`streamasr bench` end to end on the bundled models through real sherpa-onnx.

Why: the numbers a bench prints must come from the same streaming loop users run, batched
decoding must not change a single result, and the results file and the CI gate must behave
as documented. The random-weight models make the text meaningless but deterministic, which
is what these properties need; with the trained `tiny-en` model present, a WER bound is
checked too.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import typer
from conftest import make_dataset
from typer.testing import CliRunner

from streamasr.backends.base import EndpointOptions, EngineOptions
from streamasr.backends.sherpa.engine import SherpaRecognizer
from streamasr.backends.sherpa.modeldir import resolve_model
from streamasr.bench.datasets import load_dataset
from streamasr.bench.runner import RunOptions, run_batched, run_sequential, run_utterance
from streamasr.commands import bench as bench_commands
from streamasr.session.stream import StreamOptions

REPO = Path(__file__).resolve().parent.parent
RANDOM = ["--model", "tiny-random-transducer"]
# measured on the bundled model: models/tiny-en/README.md. A loose bound on tiny-en's WER on
# the 3 utterances of make_dataset seed 5 (`data` below): 3 utterances, a tiny model
TRAINED_WER_BOUND_PCT = 70.0  # measured 53.9 %
runner = CliRunner()


def bench_app() -> typer.Typer:
    app = typer.Typer()

    @app.callback()
    def _root() -> None:
        """Test root."""

    bench_commands.register(app)
    return app


APP = bench_app()


def invoke(*args: str):
    return runner.invoke(APP, ["bench", *args])


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three espeak-ng utterances in all layouts (scripts/make_dataset.py)."""
    return make_dataset(tmp_path_factory.mktemp("bench-run"), n=3, seed=5)


@pytest.fixture(scope="module")
def sweep(data: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, object]:
    """One sweep over both exports, batched too, with a plot: shared by several tests."""
    out = tmp_path_factory.mktemp("sweep")
    args = [
        str(data / "manifest.jsonl"),
        *RANDOM,
        "--chunk",
        "16,32",
        "--streams",
        "2",
        "--out",
        str(out),
    ]
    try:
        import matplotlib  # noqa: F401

        args += ["--plot", str(out / "tradeoff.png")]
    except ImportError:
        pass
    result = invoke(*args)
    assert result.exit_code == 0, result.output
    return out, result


def algorithmic(records: list) -> list[dict]:
    return [r.algorithmic() for r in records]


# ---- batched decoding --------------------------------------------------------------------


@pytest.mark.parametrize("model", ["tiny-random-transducer", "tiny-random-ctc"])
def test_batched_streams_equal_one_stream(data: Path, model: str) -> None:
    # Short endpoint rules cut utterances into several segments, so resets happen mid-batch.
    rules = EndpointOptions(rule2_s=0.3, rule3_s=1.5)
    recognizer = SherpaRecognizer(resolve_model(model, 16), EngineOptions())
    utts = load_dataset(data / "manifest.jsonl").utterances
    options = RunOptions(StreamOptions(block_s=0.1, endpoint=rules))
    sequential = run_sequential(recognizer, utts, options)
    assert any(len(r.finals) > 1 for r in sequential), "endpoints never fired"
    assert all(r.hypothesis for r in sequential)
    for streams in (2, 3):
        batched = run_batched(recognizer, utts, options, streams)
        assert [r.id for r in batched] == [u.id for u in utts]
        assert algorithmic(batched) == algorithmic(sequential)


def test_results_are_deterministic(data: Path) -> None:
    recognizer = SherpaRecognizer(resolve_model("tiny-random-transducer", 32), EngineOptions())
    utts = load_dataset(data / "kaldi").utterances[:2]
    first = run_sequential(recognizer, utts, RunOptions())
    second = run_sequential(recognizer, utts, RunOptions())
    assert algorithmic(first) == algorithmic(second)


# ---- wall-clock latency under pacing ------------------------------------------------------


class VirtualTime:
    """A clock that only moves when someone sleeps: compute takes no time at all."""

    def __init__(self) -> None:
        self.now = 100.0

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_realtime_wall_latency_with_a_fake_clock(data: Path) -> None:
    """With zero-cost compute and live pacing, a user waits exactly the algorithmic latency."""
    recognizer = SherpaRecognizer(resolve_model("tiny-random-transducer", 16), EngineOptions())
    utt = load_dataset(data / "manifest.jsonl").utterances[0]
    fake = VirtualTime()
    record = run_utterance(
        recognizer, utt, RunOptions(realtime=True), clock=fake.clock, sleep=fake.sleep
    )
    timing = record.timing
    assert timing.first_token_ms is not None and timing.final_ms is not None
    assert timing.first_token_wall_ms == pytest.approx(timing.first_token_ms, abs=0.2)
    assert timing.final_wall_ms == pytest.approx(timing.final_ms, abs=0.2)
    assert fake.now - 100.0 == pytest.approx(record.audio_s, abs=1e-6)
    assert record.compute_s == 0.0


def test_realtime_cli_wall_latency_no_earlier_than_audio(data: Path, tmp_path: Path) -> None:
    result = invoke(
        str(data / "manifest.jsonl"), *RANDOM, "--realtime", "--limit", "1", "--out", str(tmp_path)
    )
    assert result.exit_code == 0, result.output
    doc = json.loads((tmp_path / "results.json").read_text())
    (utt,) = doc["settings"][0]["utterances"]
    timing = utt["timing"]
    # a paced block is handed over no earlier than its audio time, so the wall form can only
    # add compute time to the algorithmic one
    assert timing["first_token_wall_ms"] >= timing["first_token_ms"] - 0.1
    assert timing["final_wall_ms"] >= timing["final_ms"] - 0.1
    assert "wall first token" in (tmp_path / "results.md").read_text()


# ---- the command -------------------------------------------------------------------------


def test_sweep_table_and_results_schema(sweep: tuple[Path, object], data: Path) -> None:
    out, result = sweep
    for name in ("chunk 16", "chunk 32"):
        assert name in result.stderr
    doc = json.loads((out / "results.json").read_text())
    assert doc["schema"] == "streamasr-bench/1"
    run = doc["run"]
    for key in (
        "streamasr_version",
        "sherpa_onnx_version",
        "model",
        "threads",
        "decoding_method",
        "cpu",
        "date",
        "command",
        "chunks",
        "metric",
    ):
        assert key in run, key
    assert run["chunks"] == [16, 32] and run["metric"] == "wer" and run["streams"] == [2]
    assert doc["dataset"]["utterances"] == 3 and doc["dataset"]["format"] == "jsonl"
    assert [s["name"] for s in doc["settings"]] == ["chunk 16", "chunk 32"]
    model_dir = REPO / "models" / "tiny-random-transducer"
    for setting in doc["settings"]:
        assert setting["chunk_ms"] == setting["chunk"] * 20
        assert len(setting["files"]) == 3
        for name, digest in setting["files"].items():
            assert hashlib.sha256((model_dir / name).read_bytes()).hexdigest() == digest
            assert f"chunk-{setting['chunk']}-" in name
        summary = setting["summary"]
        assert summary["utterances"] == 3 and summary["failed"] == 0
        (batched,) = summary["streams"]
        assert batched["n"] == 2 and batched["identical"] is True and batched["same_text"]
        assert summary["throughput_x"] > 0 and batched["throughput_x"] > 0
        assert summary["text_before_onset"] == len(summary["text_before_onset_ids"])
        assert summary["first_token_wall_ms"] == {}  # only under --realtime
        assert set(summary["first_token_ms"]) == {"p50", "p90", "p99"}
        units = sum(len(u["reference"].split()) for u in setting["utterances"])
        assert summary["ref_units"] == units
        counts = summary["substitutions"] + summary["deletions"] + summary["insertions"]
        assert summary["error_rate_pct"] == pytest.approx(100 * counts / units, abs=0.01)
        for utt in setting["utterances"]:
            assert utt["span_source"] == "dataset"
            assert set(utt["timing"]) >= {"first_token_ms", "final_ms", "final_cause"}
            assert utt["counts"]["ref_units"] == len(utt["reference"].split())
            assert utt["hypothesis"] == " ".join(f["text"] for f in utt["finals"])
    md = (out / "results.md").read_text()
    assert "| chunk 16 |" in md and "| chunk 32 |" in md and "sha256" in md
    if "--plot" in run["command"]:
        assert (out / "tradeoff.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_missing_chunk_stops_before_running(data: Path, tmp_path: Path) -> None:
    out = tmp_path / "never"
    result = invoke(str(data / "kaldi"), *RANDOM, "--chunk", "16,64", "--out", str(out))
    assert result.exit_code == 2  # the request does not fit the model: a usage error
    assert "--chunk 64" in result.stderr and "16, 32" in result.stderr
    assert not out.exists()


def test_baseline_gate_passes_then_fails(
    sweep: tuple[Path, object], data: Path, tmp_path: Path
) -> None:
    base_dir, _ = sweep
    args = [str(data / "manifest.jsonl"), *RANDOM, "--chunk", "16"]
    rules = "wer+0.5,first_token_p90+50ms"
    same = invoke(
        *args,
        "--out",
        str(tmp_path / "a"),
        "--baseline",
        str(base_dir / "results.json"),
        "--fail-on",
        rules,
    )
    assert same.exit_code == 0, same.output
    assert "ok" in same.stderr and "FAIL" not in same.stderr

    better = json.loads((base_dir / "results.json").read_text())
    summary = better["settings"][0]["summary"]
    summary["error_rate_pct"] -= 1.0
    summary["first_token_ms"]["p90"] -= 100.0
    (tmp_path / "better.json").write_text(json.dumps(better))
    worse = invoke(
        *args,
        "--out",
        str(tmp_path / "b"),
        "--baseline",
        str(tmp_path / "better.json"),
        "--fail-on",
        rules,
    )
    assert worse.exit_code == 1, worse.output
    assert worse.stderr.count("FAIL") == 2 and "regression" in worse.stderr
    assert "FAIL" in (tmp_path / "b" / "results.md").read_text()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--fail-on", "wer+1"], "--baseline"),
        (["--realtime", "--streams", "2"], "--streams"),
        (["--metric", "bleu"], "--metric"),
        (["--chunk", "16,x"], "--chunk"),
        (["--fail-on", "wer+1", "--baseline", "nowhere.json"], "no such file"),
    ],
)
def test_usage_errors(data: Path, tmp_path: Path, extra: list[str], message: str) -> None:
    result = invoke(str(data / "kaldi"), *RANDOM, "--out", str(tmp_path / "o"), *extra)
    assert result.exit_code in (1, 2) and message in result.stderr
    assert not (tmp_path / "o").exists()


def test_bad_rows_missing_and_corrupt_audio_do_not_stop_a_run(
    data: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    rows = (data / "manifest.jsonl").read_text().splitlines()[:1]
    first = json.loads(rows[0])
    first["audio_filepath"] = str(data / first["audio_filepath"])
    corrupt = tmp_path / "corrupt.wav"
    corrupt.write_bytes(b"RIFF not really a wav file")
    manifest = tmp_path / "m.jsonl"
    manifest.write_text(
        "\n".join(
            [
                json.dumps(first),
                "{broken",
                json.dumps({"audio_filepath": "missing.wav", "text": "GONE"}),
                json.dumps({"audio_filepath": "corrupt.wav", "text": "BAD AUDIO"}),
            ]
        )
        + "\n"
    )
    out = tmp_path / "out"
    result = invoke(str(manifest), *RANDOM, "--metric", "cer", "--out", str(out))
    assert result.exit_code == 0, result.output
    assert f"{manifest}:2" in caplog.text and "1 utterances have no audio" in caplog.text
    doc = json.loads((out / "results.json").read_text())
    assert doc["dataset"]["bad_rows"][0].startswith(f"{manifest}:2: not valid JSON")
    assert doc["dataset"]["missing_audio"] == [f"missing: {tmp_path / 'missing.wav'}"]
    summary = doc["settings"][0]["summary"]
    assert (summary["utterances"], summary["failed"], summary["metric"]) == (2, 1, "cer")
    broken = doc["settings"][0]["utterances"][1]
    assert "corrupt.wav" in broken["error"] and broken["counts"]["deletions"] == 8  # BADAUDIO
    assert "missing audio" in (out / "results.md").read_text()


def test_trained_model_recognises_synthetic_speech(data: Path, tmp_path: Path) -> None:
    result = invoke(str(data / "librispeech"), "--model", "tiny-en", "--out", str(tmp_path))
    assert result.exit_code == 0, result.output
    summary = json.loads((tmp_path / "results.json").read_text())["settings"][0]["summary"]
    assert summary["error_rate_pct"] < TRAINED_WER_BOUND_PCT, summary
