"""`bench --workers` x `--streams`, and `bench --capacity`: live streams paced through the loop."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import make_dataset

from streamasr.backends.base import EngineOptions
from streamasr.backends.plan import LoadPlan
from streamasr.bench.capacity import CapacityProbe, ProbeSpec
from streamasr.bench.capacity_search import search
from streamasr.bench.request import read_ceiling
from streamasr.session.stream import StreamOptions


def _bench(*args: str, timeout: int = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "streamasr", "bench", *args],
        capture_output=True, text=True, timeout=timeout,
    )


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_dataset(tmp_path_factory.mktemp("capacity") / "ds", n=3, seed=7)


def test_workers_times_streams_give_the_one_stream_text(dataset: Path, tmp_path: Path) -> None:
    """Two workers each batching their share of 4 streams: same records as one stream (fp32)."""
    proc = _bench(str(dataset / "manifest.jsonl"), "--model", "tiny-random-transducer",
                  "--threads", "1", "--workers", "2", "--streams", "4", "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((tmp_path / "results.json").read_text(encoding="utf-8"))
    (setting,) = doc["settings"]
    summary = setting["summary"]
    assert summary["workers"] == 2 and summary["load_s"] > 0
    (entry,) = [s for s in summary["streams"] if s["n"] == 4]
    assert entry["workers"] == 2 and entry["streams_per_worker"] == [2, 2]
    assert entry["same_text"] and entry["identical"], entry
    rows = (dataset / "manifest.jsonl").read_text(encoding="utf-8").splitlines()
    order = [Path(json.loads(row)["audio_filepath"]).name for row in rows]
    assert [Path(u["audio"]).name for u in setting["utterances"]] == order
    assert all(u["hypothesis"] for u in setting["utterances"])
    assert "2 workers loaded the model in" in proc.stderr


def test_capacity_reports_live_streams_held(dataset: Path, tmp_path: Path) -> None:
    """--schedule aligned: the streams step at one clock's ticks, each block's wait for its
    tick is below one chunk and part of its latency, on both workers' common clock;
    --ceiling gives the fraction."""
    proc = _bench(str(dataset / "manifest.jsonl"), "--model", "tiny-en", "--threads", "1",
                  "--workers", "2", "--capacity", "--streams", "1,3", "--probe-seconds", "2",
                  "--schedule", "aligned", "--ceiling", "40", "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((tmp_path / "results.json").read_text(encoding="utf-8"))
    cap = doc["capacity"]
    assert cap["largest_streams"] >= 1 and cap["schedule"] == "aligned"
    assert cap["deadline_ms"] == 320.0 and cap["workers"] == 2 and cap["load_s"] > 0
    assert cap["ceiling_streams"] == 40
    assert cap["of_ceiling"] == pytest.approx(cap["largest_streams"] / 40, abs=1e-3)
    assert [p["streams"] for p in cap["probes"]] == [1, 3]
    assert [p["streams_per_worker"] for p in cap["probes"]] == [[1], [2, 1]]
    for p in cap["probes"]:
        assert p["blocks"] > 0 and p["p50_ms"] <= p["p99_ms"] <= p["max_ms"]
        assert 0 <= p["align_wait_p50_ms"] <= p["align_wait_max_ms"] < 320.0
        assert p["step_p99_ms"] <= p["p99_ms"]
        assert p["cpu_s_per_audio_s"] > 0 and p["held"] == (p["step_p99_ms"] <= 320.0)
    one, three = cap["probes"]
    # one stream starts on the clock's phase; three (over two workers) at thirds of a chunk
    # wait up to 2/3 of it
    assert one["align_wait_max_ms"] < 1.0 < three["align_wait_max_ms"]
    assert doc["run"]["cpu"] and "loadavg_after" in doc["run"]
    assert "live streams held" in proc.stderr and "aligned schedule" in proc.stderr
    assert "of the engine's ceiling of 40" in proc.stderr
    assert "| streams |" in (tmp_path / "results.md").read_text(encoding="utf-8")


def test_capacity_default_ready_schedule_steps_on_arrival(dataset: Path, tmp_path: Path) -> None:
    """The default schedule, ready (as serve's): each stream steps as its chunk arrives, so
    no align wait."""
    proc = _bench(str(dataset / "manifest.jsonl"), "--model", "tiny-en", "--threads", "1",
                  "--capacity", "--streams", "2", "--probe-seconds", "2", "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    cap = json.loads((tmp_path / "results.json").read_text(encoding="utf-8"))["capacity"]
    (p,) = cap["probes"]
    assert cap["schedule"] == "ready" and cap["of_ceiling"] is None
    assert p["align_wait_p50_ms"] is None and p["step_p99_ms"] == p["p99_ms"]
    assert p["blocks"] > 0 and p["held"] == (p["p99_ms"] <= 320.0)


class _FakeTime:
    """A clock that moves only when the probe sleeps: engine steps take no time, so every
    latency is exactly the schedule's own wait."""

    def __init__(self) -> None:
        self.now_s = 100.0

    def clock(self) -> float:
        return self.now_s

    def sleep(self, seconds: float) -> None:
        self.now_s += max(0.0, seconds)


@pytest.mark.parametrize("schedule", ["aligned", "ready"])
def test_probe_latency_is_the_schedules_wait(schedule: str) -> None:
    """Four streams at quarter-chunk phases on the real tiny-en: aligned, each block waits
    for the clock's next tick (0, 3/4, 1/2, 1/4 of the 320 ms chunk) and that wait is its
    latency; ready, each steps the moment its block is there."""
    recognizer = LoadPlan("tiny-en", engine=EngineOptions(threads=1)).load()
    clip = np.random.default_rng(3).standard_normal(16000 * 2).astype(np.float32) * 0.1
    time_ = _FakeTime()
    spec = ProbeSpec(clip, 16000, streams=4, first=0, total=4, duration_s=4.0, schedule=schedule)
    probe = CapacityProbe(recognizer, spec, StreamOptions(), time_.clock, time_.sleep)
    result = probe.run(start_at=time_.now_s + 0.5)
    assert not result.fell_behind and result.late_start_ms == 0
    # 12 blocks a stream, those all there before the first second left out: 9 of stream 0's
    # (due at 0.32 k s), 10 of each other's (due 80, 160, 240 ms later)
    assert len(result.latencies_ms) == 9 + 3 * 10
    if schedule == "ready":
        assert result.align_waits_ms == () and max(result.latencies_ms) < 1e-6
        return
    assert sorted({round(w) for w in result.align_waits_ms}) == [0, 80, 160, 240]
    assert result.latencies_ms == pytest.approx(result.align_waits_ms, abs=1e-3)


def test_search_doubles_then_bisects() -> None:
    """The search's arithmetic, on a rule that holds up to 13 streams."""
    order: list[int] = []

    def probe(n: int) -> dict[str, object]:
        order.append(n)
        return {"streams": n, "held": n <= 13}

    probes = search(probe, None, 1, 512)
    assert order == [1, 2, 4, 8, 16, 12, 14, 13]
    assert max(p["streams"] for p in probes if p["held"]) == 13  # type: ignore[type-var]
    order.clear()
    search(probe, None, 2, 8)  # everything up to the cap held: stops there
    assert order == [2, 4, 8]


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (["--streams", "0"], "--streams"),
        (["--realtime"], "drop --realtime"),
        (["--probe-seconds", "0.1"], "--probe-seconds must be between"),
        (["--chunk", "16,32"], "one setting"),
        (["--schedule", "soon"], "use aligned or ready"),
        (["--ceiling", "0"], "positive number"),
        (["--ceiling", "no-such.json"], "neither a number nor a readable JSON"),
    ],
)
def test_capacity_refuses_bad_values(dataset: Path, tmp_path: Path, extra: list[str],
                                     says: str) -> None:
    proc = _bench(str(dataset / "manifest.jsonl"), "--model", "tiny-random-transducer",
                  "--capacity", *extra, "--out", str(tmp_path), timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert says in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_capacity_stopped_keeps_the_probes_done(dataset: Path, tmp_path: Path) -> None:
    """SIGTERM after the first probe: exit 143, results.json holds it, marked incomplete."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamasr", "bench", str(dataset / "manifest.jsonl"),
         "--model", "tiny-en", "--capacity", "--streams", "1,2,3,4,5,6,7,8",
         "--probe-seconds", "1", "--out", str(tmp_path)],
        stderr=subprocess.PIPE, text=True,
    )
    assert proc.stderr is not None
    first = proc.stderr.readline()
    assert first.startswith("capacity: 1 streams: p99"), first
    proc.send_signal(signal.SIGTERM)
    rest = proc.stderr.read()
    assert proc.wait(timeout=60) == 143, rest
    assert "marked incomplete" in rest and "Traceback" not in rest
    doc = json.loads((tmp_path / "results.json").read_text(encoding="utf-8"))
    assert doc["complete"] is False
    assert 1 <= len(doc["capacity"]["probes"]) < 8


@pytest.mark.parametrize("flag", [["--schedule", "ready"], ["--ceiling", "20"]])
def test_live_pacing_options_need_capacity(dataset: Path, tmp_path: Path,
                                           flag: list[str]) -> None:
    proc = _bench(str(dataset / "manifest.jsonl"), "--model", "tiny-random-transducer",
                  "--streams", "2", *flag, "--out", str(tmp_path), timeout=120)
    assert proc.returncode == 2 and "add --capacity" in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_streams_auto_needs_capacity(dataset: Path, tmp_path: Path) -> None:
    proc = _bench(str(dataset / "manifest.jsonl"), "--model", "tiny-random-transducer",
                  "--streams", "auto", "--out", str(tmp_path), timeout=120)
    assert proc.returncode == 2 and "add --capacity" in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_ceiling_script_feeds_bench_ceiling(tmp_path: Path) -> None:
    """scripts/capacity_cpu.py measures the engine's ceiling per batch size; its JSON is what
    `bench --capacity --ceiling FILE` reads."""
    out = tmp_path / "ceiling.json"
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).parent.parent / "scripts" / "capacity_cpu.py"),
         "--seconds", "1", "--batches", "2,1", "--reps", "1", "--bare", "--out", str(out)],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(out.read_text(encoding="utf-8"))
    assert json.loads(proc.stdout) == doc
    assert [row["batch"] for row in doc["rows"]] == [1, 2]
    for row in doc["rows"]:
        for loop in ("streamasr", "bare"):
            cost = row[loop]["cpu_s_per_audio_s"]
            assert cost > 0 and row[loop]["ceiling_streams"] == pytest.approx(
                doc["cores"] / cost, rel=0.01)
    assert doc["ceiling_streams"] == max(r["streamasr"]["ceiling_streams"] for r in doc["rows"])
    assert doc["cpu"] and doc["sherpa_onnx_version"] and len(doc["loadavg_after"]) == 3
    assert "ceiling:" in proc.stderr
    assert read_ceiling(str(out)) == doc["ceiling_streams"]
