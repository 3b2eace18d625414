#!/usr/bin/env python3
"""CPU seconds per audio second of N batched streams: streamasr's loop against a bare one.

    python scripts/capacity_cpu.py --streams 16,32 --seconds 10 --reps 3

Why: `bench --capacity` gives the live count, which the machine's load moves a lot. This
gives what the count is made of, in CPU time, which load moves much less, and compares the
two loops at equal batch size on the same engine settings (full-size int8 chunk-16 export,
one thread), interleaved in one process: streamasr's (StreamSession + batch.step_all, what
`bench --capacity` and `serve` run) and a bare sherpa-onnx loop (accept_waveform, is_ready,
decode_streams, get_result, as sherpa-onnx's examples write it). Streams are fed one chunk
each per round, unpaced. `streams / (cores x CPU s per audio s)` is the most live streams the
cores could carry with nothing else running. Prints one JSON object (with the CPU model and
load averages).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from streamasr.backends.base import EngineOptions  # noqa: E402
from streamasr.backends.sherpa.engine import SherpaRecognizer  # noqa: E402
from streamasr.backends.sherpa.modeldir import resolve_model  # noqa: E402
from streamasr.bench.report import cpu_model  # noqa: E402
from streamasr.session.batch import step_all  # noqa: E402
from streamasr.session.stream import StreamSession  # noqa: E402

FULL = ROOT / "build" / "full" / "full-random-en"
RATE = 16000
CHUNK = int(0.32 * RATE)


def speechlike(seconds: float, seed: int) -> np.ndarray:
    """Noise under a syllable-rate envelope: costs the encoder what speech costs."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * RATE)) / RATE
    envelope = 0.5 + 0.5 * np.sin(2 * np.pi * 4.0 * t + rng.uniform(0, 6))
    return (rng.standard_normal(len(t)) * 0.1 * envelope).astype(np.float32)


def ours(recognizer: Any, clips: list[np.ndarray]) -> float:
    sessions = [StreamSession(recognizer, RATE, f"s{i}") for i in range(len(clips))]
    started = time.process_time()
    for start in range(0, len(clips[0]), CHUNK):
        for session, clip in zip(sessions, clips, strict=True):
            session.accept(clip[start:start + CHUNK])
        step_all(recognizer, sessions, time.perf_counter)
    return time.process_time() - started


def bare(engine: Any, clips: list[np.ndarray]) -> float:
    streams = [engine.create_stream() for _ in clips]
    started = time.process_time()
    for start in range(0, len(clips[0]), CHUNK):
        for stream, clip in zip(streams, clips, strict=True):
            stream.accept_waveform(RATE, clip[start:start + CHUNK])
        while True:
            ready = [s for s in streams if engine.is_ready(s)]
            if not ready:
                break
            engine.decode_streams(ready)
            for s in ready:
                engine.get_result(s)
    return time.process_time() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--streams", default="16,32")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    import sherpa_onnx

    files = resolve_model(str(FULL), 16, prefer_int8=True)
    recognizer = SherpaRecognizer(files, EngineOptions(threads=1))
    engine = sherpa_onnx.OnlineRecognizer.from_transducer(
        tokens=str(files.tokens), encoder=str(files.encoder), decoder=str(files.decoder),
        joiner=str(files.joiner), num_threads=1,
    )
    cores = len(os.sched_getaffinity(0))
    rows = []
    load_before = os.getloadavg()
    for n in (int(x) for x in args.streams.split(",")):
        clips = [speechlike(args.seconds, 100 + i) for i in range(n)]
        audio_s = n * args.seconds
        runs: dict[str, list[float]] = {"streamasr": [], "bare": []}
        ours(recognizer, clips[:1])  # first use of each engine outside the timing
        bare(engine, clips[:1])
        for _ in range(args.reps):  # interleaved
            runs["streamasr"].append(ours(recognizer, clips) / audio_s)
            runs["bare"].append(bare(engine, clips) / audio_s)
        med = {k: float(np.median(v)) for k, v in runs.items()}
        rows.append({
            "streams": n,
            "cpu_s_per_audio_s": {k: round(v, 4) for k, v in med.items()},
            "ratio_streamasr_over_bare": round(med["streamasr"] / med["bare"], 3),
            "streams_the_cores_carry": {k: int(cores / v) for k, v in med.items()},
        })
    print(json.dumps({
        "cpu": cpu_model(), "cores": cores, "seconds": args.seconds, "reps": args.reps,
        "loadavg_before": [round(x, 2) for x in load_before],
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        "rows": rows,
    }, indent=1))


if __name__ == "__main__":
    main()
