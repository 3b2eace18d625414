#!/usr/bin/env python3
"""What one encoder step costs streamasr on top of the engine, along one long utterance.

One long utterance (the bundled clips one after another, no endpointing) goes through:

- bare: a bare sherpa-onnx loop (accept_waveform, decode_stream while ready, get_result);
- whole: streamasr's loop with the text assembled from the whole hypothesis at every step
  (the way it was done before incremental assembly), JSONL with full partials;
- full: streamasr's loop as it is, JSONL with full partials (`--partials full`);
- delta: the same with `--partials delta`.

The variants run interleaved in one process on one loaded model (so other work on the
machine hits them alike), each repetition in a fresh stream. Per step it records the loop-only
cost: the CPU time (this thread's, so a step that another process preempts is not counted as
slow) of everything after the engine's `decode_stream`, i.e. reading the hypothesis,
assembling text, events and JSONL. A flat curve (slope ~0 µs per 100 steps,
taken between the medians of the first and the last tenth of the steps) means a step costs the
same at the end of a long utterance as at its start. For streamasr's variants the step is
split in two: `engine_read`, sherpa-onnx handing out its result (`get_result_all`, the
conversion of its text, pieces and times into Python objects, and freeing the previous read:
the whole hypothesis every time, so it grows with the utterance in any caller), and `own`,
everything streamasr does with it.
Wall and CPU time ratios against the bare loop are printed side by side, with the machine's
load average.

    python scripts/step_cost.py --minutes 5.5 --reps 3 --out build/step-cost.json
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
RATE = 16000
VARIANTS = ("bare", "whole", "full", "delta")


class TimedEngine:
    """The engine, with the read of its result timed apart: `get_result_all` and the fields
    streamasr takes from it (text, pieces, times, start), converted by sherpa-onnx's Python
    binding into Python objects. That read is the engine API's cost: it hands out the whole
    hypothesis, so it grows with the utterance whatever the caller does with it. Freeing
    what a read handed out (its lists of fresh Python objects, one per token) is timed with the
    next read: the caller keeps only the pieces a step added."""

    def __init__(self, engine: Any) -> None:
        self._engine = engine
        self.read_s = 0.0
        self._held: Any = None

    def get_result_all(self, stream: Any) -> Any:
        from types import SimpleNamespace

        t0 = time.thread_time()
        # freeing the previous read (sherpa-onnx's C++ result and the fresh Python objects
        # made from it, one str and one float per token) is part of the hand-out's cost: it
        # happens here, timed, and so does the allocator's deferred work for those frees
        # (glibc consolidates freed chunks at the next larger allocation: done here by the
        # read's own text, not by whatever the caller allocates first)
        self._held = None
        result = self._engine.get_result_all(stream)
        plain = SimpleNamespace(
            text=result.text, tokens=result.tokens, timestamps=result.timestamps,
            start_time=result.start_time,
        )  # fmt: skip
        self._held = (result, plain)
        self.read_s += time.thread_time() - t0
        return plain

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)


class CountingSink:
    """A text stream that only counts the UTF-8 bytes written to it."""

    def __init__(self) -> None:
        self.bytes = 0

    def write(self, text: str) -> int:
        self.bytes += len(text.encode("utf-8"))
        return len(text)

    def flush(self) -> None:
        pass


def long_audio(minutes: float) -> np.ndarray:
    import soundfile as sf

    clips = [
        sf.read(path, dtype="float32")[0]
        for path in sorted((ROOT / "models" / "tiny-en" / "test_wavs").glob("*.wav"))
    ]
    one_round = np.concatenate(clips)
    rounds = max(1, round(minutes * 60 * RATE / len(one_round)))
    return np.concatenate([one_round] * rounds)


def whole_hypothesis(stream: Any) -> Any:
    """SherpaStream.hypothesis as it was: every step re-reads and re-spaces the whole text."""
    from streamasr.backends.base import Hypothesis
    from streamasr.text.tokens import assemble, tidy_spacing

    result = stream.engine.get_result_all(stream.stream)
    start = float(result.start_time)
    pieces = stream._pieces(result)
    if stream._from_pieces:
        text = assemble(pieces, final=False).text
    else:
        text = tidy_spacing(result.text)
    times = np.round(np.add(result.timestamps, start), 3).tolist()
    return Hypothesis(
        text=text, tokens=pieces, token_times_s=tuple(times[: len(pieces)]),
        segment_start_s=start,
    )  # fmt: skip


def run_bare(engine: Any, samples: np.ndarray, block: int) -> tuple[list[float], int]:
    stream = engine.create_stream()
    loop: list[float] = []
    for begin in range(0, len(samples), block):
        stream.accept_waveform(RATE, samples[begin : begin + block])
        while engine.is_ready(stream):
            engine.decode_stream(stream)
            t1 = time.thread_time()
            engine.get_result(stream)
            loop.append(time.thread_time() - t1)
    return loop, 0


def run_bare_untimed(engine: Any, samples: np.ndarray, block: int) -> None:
    """The bare loop with no clock read per step: its whole CPU time is the loop's."""
    stream = engine.create_stream()
    for begin in range(0, len(samples), block):
        stream.accept_waveform(RATE, samples[begin : begin + block])
        while engine.is_ready(stream):
            engine.decode_stream(stream)
            engine.get_result(stream)


def run_session_untimed(recognizer: Any, samples: np.ndarray, block: int, variant: str) -> None:
    """streamasr's loop as `file` runs it (JSONL to a counting sink), with no timing wrapper:
    the wrapper's own calls (a clock read per step, every engine call through __getattr__,
    every field of each result read) would count against streamasr in the whole-run ratio."""
    session, renderer, _ = session_and_renderer(recognizer, variant)
    decode_step = session.stream.decode_step
    for begin in range(0, len(samples), block):
        session.accept(samples[begin : begin + block])
        while decode_step():
            for event in session.after_step():
                renderer.event(event)
    for event in session.finish():
        renderer.event(event)


def session_and_renderer(recognizer: Any, variant: str) -> tuple[Any, Any, CountingSink]:
    """One utterance's StreamSession (no endpoints; `whole` re-reads the whole hypothesis)
    and its JSONL renderer, begun, writing to a counting sink."""
    from streamasr.backends.base import EndpointOptions
    from streamasr.output.render import JsonlRenderer
    from streamasr.session.stream import StreamOptions, StreamSession

    options = StreamOptions(endpoint=EndpointOptions(enabled=False))
    session = StreamSession(recognizer, RATE, "long.wav", options)
    if variant == "whole":
        stream = session.stream
        session.stream.hypothesis = lambda: whole_hypothesis(stream)  # type: ignore[method-assign]
    sink = CountingSink()
    renderer = JsonlRenderer(sink, "delta" if variant == "delta" else "full")  # type: ignore[arg-type]
    renderer.begin("long.wav")
    return session, renderer, sink


def run_session(recognizer: Any, samples: np.ndarray, block: int, variant: str) -> tuple[
    list[float], int, list[float]
]:
    session, renderer, sink = session_and_renderer(recognizer, variant)
    timed = TimedEngine(session.stream.engine)
    session.stream.engine = timed
    loop: list[float] = []
    reads: list[float] = []
    for begin in range(0, len(samples), block):
        session.accept(samples[begin : begin + block])
        while True:
            ready = session.stream.decode_step()
            if not ready:
                break
            timed.read_s = 0.0
            t1 = time.thread_time()
            for event in session.after_step():
                renderer.event(event)
            loop.append(time.thread_time() - t1)
            reads.append(timed.read_s)
    for event in session.finish():
        renderer.event(event)
    return loop, sink.bytes, reads


def summarise(loops: list[list[float]], bins: int = 10) -> dict[str, Any]:
    """Median over repetitions of the per-step cost: at the start, at the end, the slope, and
    the curve (median µs in `bins` equal runs of steps, first to last)."""
    steps = min(len(loop) for loop in loops)
    per_step = np.median(np.array([loop[:steps] for loop in loops]), axis=0)
    tenth = max(1, steps // 10)
    first = float(np.median(per_step[:tenth]) * 1e6)
    last = float(np.median(per_step[-tenth:]) * 1e6)
    # between the middles of the first and the last tenth; robust to preempted steps
    slope = (last - first) / max(1, steps - tenth) * 100
    return {
        "steps": steps,
        "loop_us_first_tenth": round(first, 2),
        "loop_us_last_tenth": round(last, 2),
        "slope_us_per_100_steps": round(slope, 2),
        "curve_us": [round(float(np.median(part) * 1e6), 1)
                     for part in np.array_split(per_step, bins) if len(part)],
    }


def released_engine(model: str) -> Any:
    """The engine as a bare script builds it: sherpa-onnx's loader on the model folder's own
    files (no graph cache, so no graph rewrite, and no model_type given)."""
    import sherpa_onnx

    from streamasr.backends.sherpa.modeldir import resolve_model

    files = resolve_model(model)
    return sherpa_onnx.OnlineRecognizer.from_transducer(
        tokens=str(files.tokens), encoder=str(files.encoder), decoder=str(files.decoder),
        joiner=str(files.joiner), num_threads=1,
    )  # fmt: skip


def measure(
    model: str, minutes: float, reps: int, block_ms: float = 320.0, released: bool = False
) -> dict[str, Any]:
    """All variants, interleaved; the result record (see the module docstring). `released`:
    the bare loop runs on the engine a bare script loads, streamasr on the one it loads."""
    from streamasr.backends.base import EngineOptions
    from streamasr.backends.plan import LoadPlan

    recognizer = LoadPlan(model, engine=EngineOptions(threads=1)).load()
    engine = recognizer.engine  # type: ignore[attr-defined]
    if released:
        engine = released_engine(model)
    samples = long_audio(minutes)
    block = round(block_ms / 1000 * RATE)
    load_before = os.getloadavg()
    wall: dict[str, list[float]] = {v: [] for v in VARIANTS}
    cpu: dict[str, list[float]] = {v: [] for v in VARIANTS}
    loops: dict[str, list[list[float]]] = {v: [] for v in VARIANTS}
    own: dict[str, list[list[float]]] = {v: [] for v in VARIANTS if v != "bare"}
    reads: dict[str, list[list[float]]] = {v: [] for v in VARIANTS if v != "bare"}
    jsonl_bytes: dict[str, int] = {}
    for rep in range(reps):
        order = VARIANTS if rep % 2 == 0 else tuple(reversed(VARIANTS))
        for variant in order:
            # untimed first: the whole-run CPU and wall ratios, with nothing measuring steps
            w0, c0 = time.perf_counter(), time.process_time()
            if variant == "bare":
                run_bare_untimed(engine, samples, block)
            else:
                run_session_untimed(recognizer, samples, block, variant)
            wall[variant].append(time.perf_counter() - w0)
            cpu[variant].append(time.process_time() - c0)
            # then timed: the per-step curves
            if variant == "bare":
                loop, size = run_bare(engine, samples, block)
            else:
                loop, size, read = run_session(recognizer, samples, block, variant)
                reads[variant].append(read)
                own[variant].append([a - b for a, b in zip(loop, read, strict=True)])
            loops[variant].append(loop)
            jsonl_bytes[variant] = size
            print(f"rep {rep} {variant}: {wall[variant][-1]:.2f} s wall", file=sys.stderr)
    result: dict[str, Any] = {
        "model": model,
        "audio_s": len(samples) / RATE,
        "block_ms": block_ms,
        "reps": reps,
        "bare_engine": "released files" if released else "streamasr's, shared",
        "load_avg_1min_before_after": [load_before[0], os.getloadavg()[0]],
        "cpus": len(os.sched_getaffinity(0)),
        "variants": {},
    }
    bare_wall, bare_cpu = statistics.median(wall["bare"]), statistics.median(cpu["bare"])
    for variant in VARIANTS:
        w, c = statistics.median(wall[variant]), statistics.median(cpu[variant])
        result["variants"][variant] = {
            "wall_s": round(w, 3),
            "cpu_s": round(c, 3),
            "wall_ratio_to_bare": round(w / bare_wall, 3),
            "cpu_ratio_to_bare": round(c / bare_cpu, 3),
            "jsonl_bytes": jsonl_bytes[variant],
            **summarise(loops[variant]),
        }
        if variant != "bare":  # the loop split: the engine's result read, and the rest
            result["variants"][variant]["engine_read"] = summarise(reads[variant])
            result["variants"][variant]["own"] = summarise(own[variant])
    return result


def engine_reads(model: str, minutes: float, calls: int = 200) -> dict[str, Any]:
    """µs per call of each way to read the hypothesis, at the end of one long utterance.

    sherpa-onnx's Python API returns the whole result (there is no call for the pieces added
    since a step), so each read is proportional to the utterance; this says by how much.
    """
    import timeit

    from streamasr.backends.base import EngineOptions
    from streamasr.backends.plan import LoadPlan

    recognizer = LoadPlan(model, engine=EngineOptions(threads=1)).load()
    engine = recognizer.engine  # type: ignore[attr-defined]
    stream: Any = recognizer.create_stream()
    samples = long_audio(minutes)
    stream.accept(RATE, samples)
    while stream.decode_step():
        stream.hypothesis()  # the incremental state follows the utterance, step by step
    result = engine.get_result_all(stream.stream)
    reads = {
        "get_result (text)": lambda: engine.get_result(stream.stream),
        "get_result_all": lambda: engine.get_result_all(stream.stream),
        "get_result_all + .text": lambda: engine.get_result_all(stream.stream).text,
        "get_result_all + .tokens": lambda: engine.get_result_all(stream.stream).tokens,
        "get_result_all + .timestamps": lambda: engine.get_result_all(stream.stream).timestamps,
        "hypothesis(), incremental": stream.hypothesis,
        "hypothesis(), whole (before)": lambda: whole_hypothesis(stream),
    }
    return {
        "model": model,
        "tokens": len(result.tokens),
        "text_chars": len(result.text),
        "load_avg_1min": os.getloadavg()[0],
        "us_per_call": {
            name: round(min(timeit.repeat(read, number=calls // 10, repeat=10)) / (calls // 10)
                        * 1e6, 1)
            for name, read in reads.items()
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="tiny-en")
    parser.add_argument("--minutes", type=float, default=5.5)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--block-ms", type=float, default=320.0)
    parser.add_argument("--out", type=Path, help="write the results as JSON here too")
    parser.add_argument("--engine-reads", action="store_true",
                        help="instead: µs per call of each way to read the hypothesis at the "
                        "end of the utterance")
    parser.add_argument("--released", action="store_true",
                        help="the bare loop on the engine a bare script loads (the model's own "
                        "files), streamasr's on the one streamasr loads (its graph cache): what "
                        "each costs as it is run, not the loop alone on one engine")
    args = parser.parse_args()
    if args.engine_reads:
        print(json.dumps(engine_reads(args.model, args.minutes), indent=2))
        return

    result = measure(args.model, args.minutes, args.reps, args.block_ms, args.released)
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
