#!/usr/bin/env python3
"""Speed and memory at real size, each figure beside its anchor and its bare sherpa-onnx twin.

Builds (or reuses) the full-size random exports (`make_test_models.py --size full`: the
en-2023-06-26 architecture; random weights cost exactly what trained ones cost) and measures:

- speed: RTF at 1 and 2 threads, fp32 and int8, streamasr's loop and a bare sherpa-onnx loop,
  interleaved in one process (ratios are robust to other work on the machine), with per-chunk
  compute p50/p99;
- startup and memory: time to first sample and peak RSS, one fresh process per figure, in a
  folder laid out like the release (fp32 + int8, left 64 + 128);
- capacity: throughput and the most real-time streams (streams per engine x one single-thread
  engine per core, every step of the batch done in less than a chunk at p99);
- int8 batching: does a stream's output depend on its batch companions (bare sherpa-onnx,
  fp32 vs int8), and what batching does to WER on the trained tiny-en (int8) model;
- memory flat in audio length: a long and a 1-minute file through `streamasr file`'s path;
- cost per step along one long utterance on the bundled tiny-en (scripts/step_cost.py): the
  loop-only microseconds per step from first to last (flat = constant work per step), and
  wall and CPU time against a bare sherpa-onnx loop;
- with --nemo: the NeMo engine at full size (the released streaming FastConformer hybrid's
  architecture, random weights) against NeMo's own cache-aware streaming loop, whole
  processes (scripts/perf_nemo.py): CPU, wall, peak RSS, first step, same decoded pieces.

Writes results.json and results.md (with the run record) under --out and prints the table.

    python scripts/perf_report.py                     # ~10 minutes on 2 cores
    python scripts/perf_report.py --long-minutes 30   # shorter memory check
    python scripts/perf_report.py --only nemo         # the NeMo comparison alone (~15 min)
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
FULL_DIR = ROOT / "build" / "full" / "full-random-en"
RATE = 16000

# Anchors: published or asked-for figures the measurements are read against.
ANCHOR_RTF = {"fp32": 0.18, "int8": 0.13}  # k2-fsa colab, en-2023-06-26, 1 Xeon thread
GOAL_RATIO_TIME = 1.03
GOAL_RATIO_RSS = 1.10
GOAL_FIRST_SAMPLE_S = 1.0
GOAL_STREAMS = 50
GOAL_FLAT = 1.10


def audio(seconds: float, seed: int = 0) -> np.ndarray:
    """Speech-like synthetic audio: noise bursts under a syllable-rate envelope."""
    rng = np.random.default_rng(seed)
    n = int(seconds * RATE)
    t = np.arange(n) / RATE
    envelope = 0.5 + 0.5 * np.sin(2 * np.pi * 4.0 * t + rng.uniform(0, 6))
    return (rng.standard_normal(n) * 0.1 * envelope).astype(np.float32)


def export_files(precision: str, chunk: int = 16, left: int = 128) -> dict[str, str]:
    suffix = f"epoch-0-avg-1-chunk-{chunk}-left-{left}"
    p = ".int8" if precision == "int8" else ""
    return {
        "tokens": str(FULL_DIR / "tokens.txt"),
        "encoder": str(FULL_DIR / f"encoder-{suffix}{p}.onnx"),
        "decoder": str(FULL_DIR / f"decoder-{suffix}.onnx"),
        "joiner": str(FULL_DIR / f"joiner-{suffix}{p}.onnx"),
    }


def bare_engine(precision: str, threads: int, models: Path | None = None) -> Any:
    import sherpa_onnx

    files = export_files(precision)
    return sherpa_onnx.OnlineRecognizer.from_transducer(num_threads=threads, **files)


def ours_engine(precision: str, threads: int) -> Any:
    from streamasr.backends.base import EngineOptions
    from streamasr.backends.sherpa.engine import SherpaRecognizer
    from streamasr.backends.sherpa.modeldir import resolve_model

    files = resolve_model(str(FULL_DIR), 16, prefer_int8=precision == "int8")
    return SherpaRecognizer(files, EngineOptions(threads=threads))


def run_bare(engine: Any, samples: np.ndarray, block: int) -> list[float]:
    """The sherpa-onnx example loop; returns the seconds each block took."""
    stream = engine.create_stream()
    steps = []
    for start in range(0, len(samples), block):
        t0 = time.perf_counter()
        stream.accept_waveform(RATE, samples[start:start + block])
        while engine.is_ready(stream):
            engine.decode_stream(stream)
        engine.get_result(stream)
        steps.append(time.perf_counter() - t0)
    stream.input_finished()
    while engine.is_ready(stream):
        engine.decode_stream(stream)
    return steps


def run_ours(recognizer: Any, samples: np.ndarray, block: int) -> list[float]:
    """streamasr's loop (StreamSession, as `streamasr file` runs it)."""
    from streamasr.session.stream import StreamSession

    session = StreamSession(recognizer, RATE, "perf")
    steps = []
    for start in range(0, len(samples), block):
        t0 = time.perf_counter()
        session.feed(samples[start:start + block])
        steps.append(time.perf_counter() - t0)
    session.finish()
    return steps


def peak_rss_mb() -> float:
    """This process's own peak RSS (VmHWM). Not ru_maxrss: Linux carries that over exec from
    the parent, so a child of a big parent would report the parent's peak."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q)) if values else float("nan")


def measure_speed(seconds: float, reps: int) -> list[dict[str, Any]]:
    """RTF and per-chunk compute, every variant interleaved in this one process."""
    samples = audio(seconds, seed=1)
    block = int(0.32 * RATE)  # one chunk (16 = 320 ms) per block
    variants = {}
    for precision in ("int8", "fp32"):
        for threads in (1, 2):
            variants[(precision, threads, "bare")] = bare_engine(precision, threads)
            variants[(precision, threads, "streamasr")] = ours_engine(precision, threads)
    warm = audio(1.0, seed=9)
    for (_, _, kind), engine in variants.items():
        (run_bare if kind == "bare" else run_ours)(engine, warm, block)
    totals: dict[Any, list[float]] = {k: [] for k in variants}
    cpu: dict[Any, list[float]] = {k: [] for k in variants}
    steps: dict[Any, list[float]] = {k: [] for k in variants}
    for _ in range(reps):
        for key, engine in variants.items():
            t0, c0 = time.perf_counter(), time.process_time()
            per_block = (run_bare if key[2] == "bare" else run_ours)(engine, samples, block)
            totals[key].append(time.perf_counter() - t0)
            cpu[key].append(time.process_time() - c0)
            steps[key].extend(per_block)
    rows = []
    for precision in ("int8", "fp32"):
        for threads in (1, 2):
            bare, ours = (precision, threads, "bare"), (precision, threads, "streamasr")
            ratios = [o / b for o, b in zip(totals[ours], totals[bare], strict=True)]
            rows.append({
                "precision": precision, "threads": threads,
                "rtf_bare": statistics.median(totals[bare]) / seconds,
                "rtf_streamasr": statistics.median(totals[ours]) / seconds,
                "ratio_time": statistics.median(ratios),
                "cpu_rtf_bare": statistics.median(cpu[bare]) / seconds,
                "cpu_rtf_streamasr": statistics.median(cpu[ours]) / seconds,
                "chunk_p50_ms_bare": pct(steps[bare], 50) * 1000,
                "chunk_p99_ms_bare": pct(steps[bare], 99) * 1000,
                "chunk_p50_ms_streamasr": pct(steps[ours], 50) * 1000,
                "chunk_p99_ms_streamasr": pct(steps[ours], 99) * 1000,
                "anchor_rtf": ANCHOR_RTF[precision] if threads == 1 else None,
            })
    return rows


def measure_threads_batch(streams: int, seconds: float, reps: int) -> list[dict[str, Any]]:
    """1 vs 2 engine threads for a batch of streams (int8 and fp32), interleaved."""
    block = int(0.32 * RATE)
    samples = [audio(seconds, seed=400 + i) for i in range(streams)]
    engines = {(p, t): bare_engine(p, t) for p in ("int8", "fp32") for t in (1, 2)}
    wall: dict[Any, list[float]] = {k: [] for k in engines}
    cpu: dict[Any, list[float]] = {k: [] for k in engines}
    for _ in range(reps):
        for key, engine in engines.items():
            handles = [engine.create_stream() for _ in range(streams)]
            t0, c0 = time.perf_counter(), time.process_time()
            for start in range(0, int(seconds * RATE), block):
                for h, x in zip(handles, samples, strict=True):
                    h.accept_waveform(RATE, x[start:start + block])
                while True:
                    ready = [h for h in handles if engine.is_ready(h)]
                    if not ready:
                        break
                    engine.decode_streams(ready)
            wall[key].append(time.perf_counter() - t0)
            cpu[key].append(time.process_time() - c0)
    audio_s = streams * seconds
    return [
        {"precision": p, "threads": t, "streams": streams,
         "throughput_x": audio_s / statistics.median(wall[(p, t)]),
         "cpu_s_per_audio_s": statistics.median(cpu[(p, t)]) / audio_s}
        for p, t in engines
    ]


# --- fresh processes: time to first sample and peak RSS ------------------------------------


def child_startup(kind: str, precision: str, seconds: float) -> None:
    """Run in a fresh process: load, decode the first chunk, stream the rest; print JSON."""
    t0 = time.perf_counter()
    samples = audio(seconds, seed=2)
    block = int(0.32 * RATE)
    if kind == "bare":
        engine = bare_engine(precision, 1)
        stream = engine.create_stream()
        first = None
        for start in range(0, len(samples), block):
            stream.accept_waveform(RATE, samples[start:start + block])
            while engine.is_ready(stream):
                engine.decode_stream(stream)
                first = first or (time.perf_counter() - t0, time.process_time())
        stream.input_finished()
        while engine.is_ready(stream):
            engine.decode_stream(stream)
    else:
        from streamasr.session.stream import StreamSession

        recognizer = ours_engine(precision, 1)
        session = StreamSession(recognizer, RATE, "perf")
        first = None
        for start in range(0, len(samples), block):
            events = session.feed(samples[start:start + block])
            if first is None and session.audio_s >= 0.48:
                first = (time.perf_counter() - t0, time.process_time())
            del events
        session.finish()
    print(json.dumps({
        "first_sample_s": first[0] if first else None,
        "first_sample_cpu_s": first[1] if first else None,
        "peak_rss_mb": peak_rss_mb(),
    }))


def spawn(*args: str) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, __file__, *args], check=True, capture_output=True, text=True
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def measure_startup(seconds: float, reps: int) -> list[dict[str, Any]]:
    rows = []
    for precision in ("int8", "fp32"):
        got: dict[str, list[dict[str, Any]]] = {"bare": [], "streamasr": []}
        for _ in range(reps):
            for kind in ("bare", "streamasr"):
                got[kind].append(spawn("--child-startup", kind, precision, str(seconds)))
        row: dict[str, Any] = {"precision": precision}
        for kind in ("bare", "streamasr"):
            row[f"first_sample_s_{kind}"] = statistics.median(
                g["first_sample_s"] for g in got[kind]
            )
            row[f"first_sample_cpu_s_{kind}"] = statistics.median(
                g["first_sample_cpu_s"] for g in got[kind]
            )
            row[f"peak_rss_mb_{kind}"] = max(g["peak_rss_mb"] for g in got[kind])
        row["ratio_rss"] = row["peak_rss_mb_streamasr"] / row["peak_rss_mb_bare"]
        rows.append(row)
    return rows


# --- capacity: streams x workers ---------------------------------------------------------


def child_capacity(streams: int, seconds: float) -> None:
    """One single-thread int8 engine decoding `streams` streams fed one chunk at a time."""
    engine = bare_engine("int8", 1)
    samples = [audio(seconds, seed=100 + i) for i in range(streams)]
    block = int(0.32 * RATE)
    handles = [engine.create_stream() for _ in range(streams)]
    steps = []
    t0, c0 = time.perf_counter(), time.process_time()
    for start in range(0, int(seconds * RATE), block):
        for h, s in zip(handles, samples, strict=True):
            h.accept_waveform(RATE, s[start:start + block])
        t_step = time.perf_counter()
        while True:
            ready = [h for h in handles if engine.is_ready(h)]
            if not ready:
                break
            engine.decode_streams(ready)
        steps.append(time.perf_counter() - t_step)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    record = {"steps_s": steps, "wall_s": wall, "cpu_s": cpu, "audio_s": streams * seconds}
    print(json.dumps(record))


def measure_capacity(counts: list[int], workers: int, seconds: float) -> list[dict[str, Any]]:
    """Each count runs `workers` processes at once; p99 of a chunk's batch step vs 320 ms."""
    rows = []
    for n in counts:
        procs = [
            subprocess.Popen(
                [sys.executable, __file__, "--child-capacity", str(n), str(seconds)],
                stdout=subprocess.PIPE, text=True,
            )
            for _ in range(workers)
        ]
        results = [json.loads(p.communicate()[0].strip().splitlines()[-1]) for p in procs]
        # the first chunk steps are warm-up of fresh engines: leave out the first 3
        steps = [s for r in results for s in r["steps_s"][3:]]
        p99 = pct(steps, 99) * 1000
        rows.append({
            "streams_per_engine": n, "workers": workers, "streams": n * workers,
            "step_p50_ms": pct(steps, 50) * 1000, "step_p99_ms": p99,
            "realtime": p99 < 320.0,
            "throughput_x": sum(r["audio_s"] for r in results)
            / max(r["wall_s"] for r in results),
            # what the wall-clock throughput is made of: each engine's CPU per audio second
            # (a throughput above cores / this would mean the timing under-counts)
            "cpu_s_per_audio_s": sum(r["cpu_s"] for r in results)
            / sum(r["audio_s"] for r in results),
        })
    return rows


# --- int8 batching -----------------------------------------------------------------------


def _decode_batch(engine: Any, batch: list[np.ndarray]) -> list[tuple[tuple[str, ...], tuple]]:
    handles = [engine.create_stream() for _ in batch]
    for h, s in zip(handles, batch, strict=True):
        h.accept_waveform(RATE, s)
        h.accept_waveform(RATE, np.zeros(int(0.66 * RATE), np.float32))
        h.input_finished()
    while True:
        ready = [h for h in handles if engine.is_ready(h)]
        if not ready:
            break
        engine.decode_streams(ready)
    out = []
    for h in handles:
        r = engine.get_result_all(h)
        out.append((tuple(r.tokens), tuple(round(t, 3) for t in r.timestamps)))
    return out


def measure_batch_leak(n_utts: int, tmp: Path) -> list[dict[str, Any]]:
    """Does an utterance's result depend on its batch companions? Bare sherpa-onnx, on
    espeak-ng speech from make_dataset.py."""
    import soundfile as sf

    subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "make_dataset.py"), "--out", str(tmp / "leak"),
         "--n", str(n_utts), "--seed", "8"],
        check=True, capture_output=True,
    )
    utts = [sf.read(p, dtype="float32")[0] for p in sorted((tmp / "leak" / "wavs").glob("*.wav"))]
    rows = []
    for precision in ("fp32", "int8"):
        engine = bare_engine(precision, 1)
        alone = [_decode_batch(engine, [u])[0] for u in utts]
        with_zeros = [
            _decode_batch(engine, [u, *[np.zeros_like(u)] * 3])[0] for u in utts
        ]
        batched = []
        for i in range(0, n_utts, 4):
            batched.extend(_decode_batch(engine, utts[i:i + 4]))
        rows.append({
            "precision": precision, "utterances": len(utts),
            "mean_tokens": float(np.mean([len(a[0]) for a in alone])),
            "differ_with_zero_companions": sum(
                a != b for a, b in zip(alone, with_zeros, strict=True)
            ),
            "differ_in_batches_of_4": sum(a != b for a, b in zip(alone, batched, strict=True)),
            "tokens_differ_in_batches_of_4": sum(
                a[0] != b[0] for a, b in zip(alone, batched, strict=True)
            ),
        })
    return rows


def measure_batch_wer(n_utts: int, tmp: Path) -> dict[str, Any]:
    """WER and wall time of one stream vs batches of 4 on the trained tiny-en (int8) model."""
    from streamasr.backends.base import EngineOptions
    from streamasr.backends.sherpa.engine import SherpaRecognizer
    from streamasr.backends.sherpa.modeldir import resolve_model
    from streamasr.bench.datasets import load_dataset
    from streamasr.bench.report import summarize
    from streamasr.bench.runner import RunOptions, run_batched, run_sequential, warm_up

    subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "make_dataset.py"), "--out", str(tmp / "ds"),
         "--n", str(n_utts), "--seed", "5"],
        check=True, capture_output=True,
    )
    data = load_dataset(tmp / "ds" / "manifest.jsonl")
    files = resolve_model("tiny-en", 16)
    recognizer = SherpaRecognizer(files, EngineOptions(threads=1))
    warm_up(recognizer)
    options = RunOptions()
    t0 = time.perf_counter()
    one = run_sequential(recognizer, data.utterances, options)
    wall_one = time.perf_counter() - t0
    t0 = time.perf_counter()
    four = run_batched(recognizer, data.utterances, options, 4)
    wall_four = time.perf_counter() - t0
    s1 = summarize(one, "wer", wall_one)
    s4 = summarize(four, "wer", wall_four)
    return {
        "model": files.name, "encoder": files.encoder.name, "utterances": len(one),
        "wer_one_stream": s1["error_rate_pct"], "wer_batches_of_4": s4["error_rate_pct"],
        "text_differs": sum(a.text() != b.text() for a, b in zip(one, four, strict=True)),
        "token_times_differ": sum(
            a.algorithmic() != b.algorithmic() for a, b in zip(one, four, strict=True)
        ),
        "wall_s_one_stream": wall_one, "wall_s_batches_of_4": wall_four,
    }


# --- memory flat in audio length ---------------------------------------------------------


def child_long(path: str) -> None:
    """`streamasr file`'s path on one file, text to /dev/null; prints peak RSS."""
    import bench_overhead  # noqa: E402  (scripts/ is on sys.path beside this file)

    result = bench_overhead.streamasr_file("tiny-random-transducer", path, 0.32, 1)
    result["peak_rss_mb"] = peak_rss_mb()
    print(json.dumps(result))


def write_long_wav(path: Path, minutes: float) -> None:
    import soundfile as sf

    with sf.SoundFile(path, "w", RATE, 1, "PCM_16") as f:
        for i in range(int(minutes)):
            f.write(audio(60.0, seed=300 + i % 7))


def measure_flat(long_minutes: float, tmp: Path) -> dict[str, Any]:
    short, long = tmp / "one-minute.wav", tmp / "long.wav"
    write_long_wav(short, 1)
    write_long_wav(long, long_minutes)
    a = spawn("--child-long", str(short))
    b = spawn("--child-long", str(long))
    return {
        "model": "tiny-random-transducer", "short_minutes": 1, "long_minutes": long_minutes,
        "peak_rss_mb_short": a["peak_rss_mb"], "peak_rss_mb_long": b["peak_rss_mb"],
        "ratio": b["peak_rss_mb"] / a["peak_rss_mb"], "long_loop_s": b["loop_s"],
    }


# --- cost per step along one long utterance -----------------------------------------------


def measure_steps(minutes: float, reps: int) -> dict[str, Any]:
    """scripts/step_cost.py on the bundled tiny-en: one long utterance, no endpointing."""
    import step_cost  # noqa: E402  (scripts/ is on sys.path beside this file)

    return step_cost.measure("tiny-en", minutes, reps)


def steps_markdown(s: dict[str, Any]) -> list[str]:
    load = s["load_avg_1min_before_after"]
    lines = [f"## Cost per step along one utterance ({s['model']}, {s['audio_s'] / 60:.1f} min, "
             f"no endpointing, interleaved in one process)", "",
             f"Load average {load[0]:.1f} before, {load[1]:.1f} after, on {s['cpus']} cores. "
             "Loop-only: a step's CPU time after the engine's decode_stream. The curve is the "
             "median in ten equal runs of steps, first to last; flat means constant work per "
             "step.", "",
             "| variant | wall / bare | CPU / bare | loop µs, first tenth | last tenth | "
             "µs per 100 steps | JSONL MB | curve µs |", "|---|---|---|---|---|---|---|---|"]
    for name, v in s["variants"].items():
        curve = " ".join(f"{x:.0f}" for x in v["curve_us"])
        lines.append(
            f"| {name} | {v['wall_ratio_to_bare']:.3f} | {v['cpu_ratio_to_bare']:.3f} | "
            f"{v['loop_us_first_tenth']:.0f} | {v['loop_us_last_tenth']:.0f} | "
            f"{v['slope_us_per_100_steps']:.1f} | {v['jsonl_bytes'] / 1e6:.2f} | {curve} |"
        )
    return lines + [""]


# --- NeMo at full size against a bare NeMo loop ------------------------------------------


def measure_nemo(seconds: float, reps: int) -> dict[str, Any]:
    """scripts/perf_nemo.py on the full-size random NeMo model, look-aheads [70,13] and [70,1]."""
    import perf_nemo  # noqa: E402  (scripts/ is on sys.path beside this file)

    return perf_nemo.measure(None, seconds, reps)


# --- report ------------------------------------------------------------------------------


def markdown(doc: dict[str, Any]) -> str:
    f = "{:.3f}".format
    lines = ["# Performance at real size", ""]
    run = doc["run"]
    lines += [f"- {k}: {run[k]}" for k in ("date", "cpu", "platform", "sherpa_onnx_version",
                                             "streamasr_version", "cores", "load_1min")]
    lines += [f"- command: `{' '.join(run['command'])}`", ""]
    lines += ["## Speed (one stream, interleaved in one process)", "",
              "| precision | threads | RTF streamasr | RTF bare | streamasr/bare "
              f"(goal <= {GOAL_RATIO_TIME}) | anchor RTF | CPU s per audio s streamasr / bare "
              "| chunk p50/p99 ms streamasr | chunk p50/p99 ms bare |",
              "|---|---|---|---|---|---|---|---|---|"]
    for r in doc.get("speed", []):
        anchor = f(r["anchor_rtf"]) if r["anchor_rtf"] else "-"
        lines.append(
            f"| {r['precision']} | {r['threads']} | {f(r['rtf_streamasr'])} | "
            f"{f(r['rtf_bare'])} | {f(r['ratio_time'])} | {anchor} | "
            f"{f(r['cpu_rtf_streamasr'])} / {f(r['cpu_rtf_bare'])} | "
            f"{r['chunk_p50_ms_streamasr']:.1f} / {r['chunk_p99_ms_streamasr']:.1f} | "
            f"{r['chunk_p50_ms_bare']:.1f} / {r['chunk_p99_ms_bare']:.1f} |"
        )
    if "threads_batch" in doc:
        lines += ["", "## Threads for a batch (bare, interleaved)", "",
                  "| precision | threads | streams | throughput x | CPU s per audio s |",
                  "|---|---|---|---|---|"]
        for r in doc["threads_batch"]:
            lines.append(f"| {r['precision']} | {r['threads']} | {r['streams']} | "
                         f"{r['throughput_x']:.1f} | {r['cpu_s_per_audio_s']:.3f} |")
    lines += ["", "## Startup and memory (fresh process each, 1 thread)", "",
              f"| precision | first sample s streamasr (goal < {GOAL_FIRST_SAMPLE_S}) | "
              "bare | CPU s to first sample streamasr / bare | peak RSS MB streamasr | bare | "
              f"ratio (goal <= {GOAL_RATIO_RSS}) |",
              "|---|---|---|---|---|---|---|"]
    for r in doc.get("startup", []):
        lines.append(
            f"| {r['precision']} | {r['first_sample_s_streamasr']:.2f} | "
            f"{r['first_sample_s_bare']:.2f} | {r['first_sample_cpu_s_streamasr']:.2f} / "
            f"{r['first_sample_cpu_s_bare']:.2f} | {r['peak_rss_mb_streamasr']:.0f} | "
            f"{r['peak_rss_mb_bare']:.0f} | {f(r['ratio_rss'])} |"
        )
    lines += ["", f"## Capacity (int8, 1 thread per engine, bare; goal >= {GOAL_STREAMS} "
              "real-time streams)", "",
              "| streams per engine | engines (processes) | streams | step p50 ms | "
              "step p99 ms (< 320) | real time | throughput x | CPU s per audio s |",
              "|---|---|---|---|---|---|---|---|"]
    for r in doc.get("capacity", []):
        cpu = r.get("cpu_s_per_audio_s")  # records before this column have none
        lines.append(
            f"| {r['streams_per_engine']} | {r['workers']} | {r['streams']} | "
            f"{r['step_p50_ms']:.0f} | {r['step_p99_ms']:.0f} | "
            f"{'yes' if r['realtime'] else 'no'} | {r['throughput_x']:.1f} | "
            f"{'' if cpu is None else f'{cpu:.4f}'} |"
        )
    lines += ["", "## int8 batching (bare sherpa-onnx, stream 0's tokens and times)", "",
              "| precision | utterances | tokens per utterance | differ with 3 silent companions "
              "| differ in batches of 4 | of which tokens differ |", "|---|---|---|---|---|---|"]
    for r in doc.get("batch_leak", []):
        lines.append(
            f"| {r['precision']} | {r['utterances']} | {r.get('mean_tokens', 0):.1f} | "
            f"{r['differ_with_zero_companions']} | "
            f"{r['differ_in_batches_of_4']} | {r['tokens_differ_in_batches_of_4']} |"
        )
    w = doc.get("batch_wer")
    lines += [] if w is None else [
              "", f"WER on {w['utterances']} synthetic utterances, {w['model']} "
              f"({w['encoder']}): one stream {w['wer_one_stream']} %, batches of 4 "
              f"{w['wer_batches_of_4']} %; text differs for {w['text_differs']}, token times "
              f"for {w['token_times_differ']}; wall {w['wall_s_one_stream']:.1f} s vs "
              f"{w['wall_s_batches_of_4']:.1f} s.", ""]
    m = doc.get("flat")
    lines += [] if m is None else ["## Memory in audio length (streamasr file path, "
              f"{m['model']})", "",
              f"Peak RSS {m['peak_rss_mb_short']:.0f} MB for 1 minute, "
              f"{m['peak_rss_mb_long']:.0f} MB for {m['long_minutes']:.0f} minutes: ratio "
              f"{m['ratio']:.3f} (goal <= {GOAL_FLAT}).", ""]
    if "steps" in doc:
        lines += steps_markdown(doc["steps"])
    if "nemo" in doc:
        import perf_nemo  # noqa: E402  (scripts/ is on sys.path beside this file)

        lines += ["", *perf_nemo.markdown(doc["nemo"])]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "perf",
                        help="folder for results.json and results.md")
    parser.add_argument("--seconds", type=float, default=20.0,
                        help="audio per speed run (default 20)")
    parser.add_argument("--reps", type=int, default=3, help="interleaved repetitions")
    parser.add_argument("--streams", default="16,24,32",
                        help="streams per engine to try for capacity (default 16,24,32)")
    parser.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)),
                        help="engines run at once for capacity (default: one per core)")
    parser.add_argument("--long-minutes", type=float, default=120.0,
                        help="length of the long file for the memory check (default 120)")
    parser.add_argument("--step-minutes", type=float, default=5.5,
                        help="length of the one long utterance for the per-step cost "
                        "(default 5.5)")
    parser.add_argument("--only", help="comma-separated sections to run again (speed, startup, "
                        "capacity, threads_batch, batch_leak, batch_wer, flat, steps, nemo); "
                        "the rest is kept from the last results.json in --out")
    parser.add_argument("--nemo", action="store_true",
                        help="also run the NeMo section: full-size NeMo engine against a bare "
                        "NeMo loop (needs the gpu extra; builds a 460 MB model; ~15 minutes)")
    parser.add_argument("--nemo-seconds", type=float, default=30.0,
                        help="audio for the NeMo section (default 30)")
    parser.add_argument("--child-startup", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--child-capacity", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--child-long", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child_startup:
        child_startup(args.child_startup[0], args.child_startup[1], float(args.child_startup[2]))
        return
    if args.child_capacity:
        child_capacity(int(args.child_capacity[0]), float(args.child_capacity[1]))
        return
    if args.child_long:
        child_long(args.child_long)
        return

    from streamasr.bench.report import run_record

    sherpa_sections = not args.only or set(args.only.split(",")) - {"nemo"}
    if sherpa_sections and not (FULL_DIR / "tokens.txt").is_file():
        print("building the full-size exports (minutes) ...", file=sys.stderr)
        subprocess.run([sys.executable, str(ROOT / "scripts" / "make_test_models.py"),
                        "--size", "full"], check=True)
    started = time.perf_counter()
    doc: dict[str, Any] = {"run": run_record({
        "models": str(FULL_DIR.relative_to(ROOT)), "seconds": args.seconds, "reps": args.reps,
        "cores": len(os.sched_getaffinity(0)), "load_1min": os.getloadavg()[0],
    })}
    previous = args.out / "results.json"
    if args.only and previous.is_file():  # keep the other sections of the last full run
        old = json.loads(previous.read_text(encoding="utf-8"))
        doc = {**old, "run": {**doc["run"], "sections_rerun": args.only, "first_run": old["run"]}}
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        steps = {
            "speed": lambda: measure_speed(args.seconds, args.reps),
            "startup": lambda: measure_startup(30.0, 2),
            "capacity": lambda: measure_capacity(
                [int(n) for n in args.streams.split(",")], args.workers, 10.0),
            "threads_batch": lambda: measure_threads_batch(8, 10.0, 2),
            "batch_leak": lambda: measure_batch_leak(8, tmp),
            "batch_wer": lambda: measure_batch_wer(24, tmp),
            "flat": lambda: measure_flat(args.long_minutes, tmp),
            "steps": lambda: measure_steps(args.step_minutes, args.reps),
            "nemo": lambda: measure_nemo(args.nemo_seconds, args.reps),
        }
        for name, step in steps.items():
            if args.only and name not in args.only.split(","):
                continue
            if name == "nemo" and not (args.nemo or args.only):
                continue
            print(f"{name} ...", file=sys.stderr, flush=True)
            doc[name] = step()
    doc["run"]["load_1min_end"] = os.getloadavg()[0]
    doc["run"]["elapsed_s"] = round(time.perf_counter() - started, 1)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(doc, indent=2), encoding="utf-8")
    text = markdown(doc)
    (args.out / "results.md").write_text(text, encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
