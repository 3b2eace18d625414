#!/usr/bin/env python3
"""The engine's own stream ceiling: CPU seconds per audio second of N streams stepped together.

    python scripts/capacity_cpu.py                      # bundled tiny-en, batches 1..64
    python scripts/capacity_cpu.py --model build/full/full-random-en --chunk 16 \
        --threads 1 --seconds 10 --reps 3 --out build/ceiling.json

Why: `bench --capacity` gives the live count, which the machine's load moves a lot. This
gives what the count is made of, in CPU time, which load moves much less: N fresh streams
(StreamSession + batch.step_all, the stepping core of `bench --capacity` and `serve`) fed
one chunk each per round, unpaced, all stepped in one batch, at batch sizes 1, 2, 4, ..., 64.
Nothing waits and nothing is paced, so this is the best any schedule can do with this
engine: `ceiling = cores / (CPU s per audio s)` streams, at the cheapest batch size, is the
most live streams the cores could carry with nothing else running (`bench --capacity
--ceiling FILE` gives its result as a fraction of it). `--bare` also times a bare sherpa-onnx
loop on the same engine (accept_waveform, is_ready, decode_streams, get_result, as
sherpa-onnx's examples write it): the price of streamasr's loop over the engine's.

Every stream reads the bundled clips (models/tiny-en/test_wavs, looped) from its own offset.
Repetitions are interleaved over the batch sizes (and their order reversed every other
repetition), so load on the machine hits every size alike; each size is run once first,
untimed (the engine's first steps at a new batch size allocate). The medians are reported.
Prints a table to stderr and one JSON object to stdout (and to --out): per batch size, CPU
and wall seconds per audio second, the implied ceiling; the CPU model, cores, load averages
before and after, versions.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from streamasr.backends.base import Recognizer  # noqa: E402
from streamasr.backends.registry import choose_backend, engine_options  # noqa: E402
from streamasr.bench.capacity import CLIP_STAGGER_S  # noqa: E402
from streamasr.bench.capacity_search import Clip, read_clip  # noqa: E402
from streamasr.bench.datasets import load_dataset  # noqa: E402
from streamasr.bench.report import run_record  # noqa: E402
from streamasr.bench.workers import available_cores  # noqa: E402
from streamasr.session.batch import step_all  # noqa: E402
from streamasr.session.stream import StreamSession  # noqa: E402

CLIPS = ROOT / "models" / "tiny-en" / "test_wavs"
BATCHES = "1,2,4,8,16,32,64"
WARMUP_S = 1.0  # audio per stream of the untimed first run at each batch size


def stream_audio(clip: Clip, streams: int, seconds: float) -> list[np.ndarray]:
    """`seconds` of the clip for each stream, each from its own offset (looped as needed)."""
    need = round(seconds * clip.sample_rate)
    stagger = round(CLIP_STAGGER_S * clip.sample_rate)
    return [np.resize(clip.samples, need + stagger * i)[stagger * i:] for i in range(streams)]


def ours(recognizer: Recognizer, audio: list[np.ndarray], rate: int) -> tuple[float, float]:
    """CPU and wall seconds of streamasr's loop over the streams, one block each per round."""
    sessions = [StreamSession(recognizer, rate, f"s{i}") for i in range(len(audio))]
    block = max(1, round(sessions[0].block_s * rate))
    cpu0, wall0 = time.process_time(), time.perf_counter()
    for start in range(0, len(audio[0]), block):
        for session, samples in zip(sessions, audio, strict=True):
            session.accept(samples[start:start + block])
        step_all(recognizer, sessions, time.perf_counter)
    return time.process_time() - cpu0, time.perf_counter() - wall0


def bare(recognizer: Recognizer, audio: list[np.ndarray], rate: int) -> tuple[float, float]:
    """The same through sherpa-onnx's own calls on the same engine (no session, no events)."""
    engine: Any = recognizer.engine  # type: ignore[attr-defined]
    streams = [engine.create_stream() for _ in audio]
    block = max(1, round(recognizer.chunk_s * rate))
    cpu0, wall0 = time.process_time(), time.perf_counter()
    for start in range(0, len(audio[0]), block):
        for stream, samples in zip(streams, audio, strict=True):
            stream.accept_waveform(rate, samples[start:start + block])
        while True:
            ready = [s for s in streams if engine.is_ready(s)]
            if not ready:
                break
            engine.decode_streams(ready)
            for s in ready:
                engine.get_result(s)
    return time.process_time() - cpu0, time.perf_counter() - wall0


def measure(recognizer: Recognizer, clip: Clip, batches: list[int], seconds: float, reps: int,
            loops: list[str]) -> list[dict[str, Any]]:
    """Per batch size and loop: median CPU and wall seconds per audio second, and the ceiling."""
    run = {"streamasr": ours, "bare": bare}
    cores = available_cores()
    audio = {n: stream_audio(clip, n, seconds) for n in batches}
    for n in batches:  # untimed: the first steps at each batch size
        for name in loops:
            run[name](recognizer, [a[:round(WARMUP_S * clip.sample_rate)] for a in audio[n]],
                      clip.sample_rate)
    cpu: dict[tuple[int, str], list[float]] = {(n, k): [] for n in batches for k in loops}
    wall: dict[tuple[int, str], list[float]] = {(n, k): [] for n in batches for k in loops}
    for rep in range(reps):
        order = batches if rep % 2 == 0 else batches[::-1]
        for n in order:
            for name in loops if rep % 2 == 0 else loops[::-1]:
                c, w = run[name](recognizer, audio[n], clip.sample_rate)
                cpu[n, name].append(c / (n * seconds))
                wall[n, name].append(w / (n * seconds))
        print(f"rep {rep + 1}/{reps} done", file=sys.stderr)
    rows = []
    for n in batches:
        row: dict[str, Any] = {"batch": n}
        for name in loops:
            c, w = statistics.median(cpu[n, name]), statistics.median(wall[n, name])
            row[name] = {
                "cpu_s_per_audio_s": round(c, 5),
                "wall_s_per_audio_s": round(w, 5),
                "cpu_s_per_audio_s_reps": [round(x, 5) for x in cpu[n, name]],
                "ceiling_streams": round(cores / c, 1) if c > 0 else None,
            }
        if "bare" in loops:
            row["cpu_ratio_streamasr_over_bare"] = round(
                row["streamasr"]["cpu_s_per_audio_s"] / row["bare"]["cpu_s_per_audio_s"], 3)
        rows.append(row)
    return rows


def table(rows: list[dict[str, Any]], loops: list[str]) -> str:
    """The rows as a plain-text table."""
    head = ["batch"] + [f"{k} {c}" for k in loops
                        for c in ("CPU s/audio s", "wall s/audio s", "ceiling")]
    lines = ["  ".join(f"{h:>16}" for h in head)]
    for row in rows:
        cells = [str(row["batch"])]
        for k in loops:
            r = row[k]
            cells += [f"{r['cpu_s_per_audio_s']:.4f}", f"{r['wall_s_per_audio_s']:.4f}",
                      f"{r['ceiling_streams']}"]
        lines.append("  ".join(f"{c:>16}" for c in cells))
    return "\n".join(lines)


def parse_batches(text: str) -> list[int]:
    try:
        values = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise SystemExit(f"--batches {text!r}: give whole numbers, e.g. {BATCHES}") from None
    if not values or values[0] < 1:
        raise SystemExit(f"--batches {text!r}: give whole numbers of at least 1")
    return values


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="tiny-en", help="a model name or folder")
    parser.add_argument("--chunk", type=int, default=None, help="the export's chunk (frames)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--batches", "--streams", default=BATCHES,
                        help=f"batch sizes, comma-separated (default {BATCHES})")
    parser.add_argument("--seconds", type=float, default=10.0, help="audio per stream")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--bare", action="store_true",
                        help="also time a bare sherpa-onnx loop on the same engine")
    parser.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    args = parser.parse_args()
    if args.seconds <= 0 or args.reps < 1:
        raise SystemExit("--seconds must be positive and --reps at least 1")
    batches = parse_batches(args.batches)
    loops = ["streamasr", "bare"] if args.bare else ["streamasr"]
    entry = choose_backend(args.model, None)
    options = engine_options(entry, {"chunk": args.chunk}, threads=args.threads)
    load_before = os.getloadavg()
    recognizer = entry.load(args.model, options)
    if args.bare and not hasattr(recognizer, "engine"):
        raise SystemExit("--bare times sherpa-onnx's own loop: give a sherpa-onnx model")
    clip = read_clip(load_dataset(CLIPS).utterances)
    rows = measure(recognizer, clip, batches, args.seconds, args.reps, loops)
    best = min(rows, key=lambda r: r["streamasr"]["cpu_s_per_audio_s"])
    doc = run_record({
        "model": recognizer.info.model_name,
        "model_files": [str(p) for p in recognizer.info.model_files],
        "chunk_ms": round(recognizer.chunk_s * 1000, 3),
        "threads": args.threads,
        "seconds_per_stream": args.seconds,
        "reps": args.reps,
        "cores": available_cores(),
        "cpu_count": os.cpu_count(),
        "loadavg_before": [round(x, 2) for x in load_before],
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        # the headline: streams the cores carry at the cheapest batch size, streamasr's loop
        "ceiling_streams": best["streamasr"]["ceiling_streams"],
        "ceiling_at_batch": best["batch"],
        "rows": rows,
    })
    print(table(rows, loops), file=sys.stderr)
    print(f"ceiling: {doc['ceiling_streams']} streams on {doc['cores']} core(s) "
          f"({doc['cpu']}), at batch {doc['ceiling_at_batch']}; load average "
          f"{doc['loadavg_before'][0]} before, {doc['loadavg_after'][0]} after", file=sys.stderr)
    text = json.dumps(doc, indent=1)
    print(text)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
