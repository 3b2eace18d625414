"""What streamasr's loop costs on top of a bare sherpa-onnx loop, on the same model and audio.

(a) bare: read the file in blocks, accept_waveform, decode_stream while ready, get_result.
(b) streamasr: the `file` command's path (FileSource -> StreamSession -> text renderer).
Each run is a fresh subprocess (so peak RSS is per variant), runs are interleaved a/b/a/b,
and the model load is excluded from the timed part. Prints the median ratio b/a.

    python scripts/bench_overhead.py --model tiny-random-transducer --seconds 60 --runs 5
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import soundfile as sf


def bare(model: str, path: str, block_s: float, threads: int) -> dict[str, float]:
    """The loop sherpa-onnx's own examples write, nothing else."""
    import sherpa_onnx

    from streamasr.backends.sherpa.modeldir import resolve_model

    files = resolve_model(model)
    if files.kind == "transducer":
        engine = sherpa_onnx.OnlineRecognizer.from_transducer(
            tokens=str(files.tokens), encoder=str(files.encoder), decoder=str(files.decoder),
            joiner=str(files.joiner), num_threads=threads, enable_endpoint_detection=True,
        )
    else:
        engine = sherpa_onnx.OnlineRecognizer.from_zipformer2_ctc(
            tokens=str(files.tokens), model=str(files.encoder), num_threads=threads,
            enable_endpoint_detection=True,
        )
    started = time.perf_counter()
    stream = engine.create_stream()
    texts = []
    with sf.SoundFile(path) as audio:
        size = round(block_s * audio.samplerate)
        for block in audio.blocks(size, dtype="float32"):
            stream.accept_waveform(audio.samplerate, block)
            while engine.is_ready(stream):
                engine.decode_stream(stream)
                engine.get_result(stream)
                if engine.is_endpoint(stream):
                    texts.append(engine.get_result(stream))
                    engine.reset(stream)
        stream.accept_waveform(audio.samplerate, np.zeros(int(0.66 * audio.samplerate), np.float32))
        stream.input_finished()
        while engine.is_ready(stream):
            engine.decode_stream(stream)
        texts.append(engine.get_result(stream))
    return {"loop_s": time.perf_counter() - started}


def streamasr_file(model: str, path: str, block_s: float, threads: int) -> dict[str, float]:
    """The same audio through `streamasr file`'s code path, text output to /dev/null."""
    import os

    from rich.console import Console

    from streamasr.backends.base import EngineOptions
    from streamasr.backends.sherpa.engine import SherpaRecognizer
    from streamasr.backends.sherpa.modeldir import resolve_model
    from streamasr.output.render import TextRenderer
    from streamasr.session.file_stream import stream_file
    from streamasr.session.stream import StreamOptions

    recognizer = SherpaRecognizer(resolve_model(model), EngineOptions(threads=threads))
    with open(os.devnull, "w") as sink:
        renderer = TextRenderer(sink, Console(file=sink), realtime=False)
        started = time.perf_counter()
        stream_file(path, recognizer, renderer, StreamOptions(block_s=block_s), realtime=False)
    return {"loop_s": time.perf_counter() - started}


VARIANTS = {"bare": bare, "streamasr": streamasr_file}


def peak_rss_mb() -> float:
    """This process's own peak RSS (VmHWM). ru_maxrss is carried over exec from the parent on
    Linux, so a child started by a big process would report the parent's peak."""
    status = Path("/proc/self/status")
    if status.is_file():
        for line in status.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def child(variant: str, model: str, path: str, block_s: float, threads: int) -> None:
    result = VARIANTS[variant](model, path, block_s, threads)
    result["peak_rss_mb"] = peak_rss_mb()
    print(json.dumps(result))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny-random-transducer")
    parser.add_argument("--audio", help="wav to stream (default: generated speech)")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--block-ms", type=float, default=320.0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--child", nargs=2, metavar=("VARIANT", "PATH"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    block_s = args.block_ms / 1000
    if args.child:
        child(args.child[0], args.model, args.child[1], block_s, args.threads)
        return
    with tempfile.TemporaryDirectory() as tmp:
        path = args.audio or make_audio(Path(tmp), args.seconds)
        times: dict[str, list[float]] = {name: [] for name in VARIANTS}
        rss: dict[str, list[float]] = {name: [] for name in VARIANTS}
        for _ in range(args.runs):
            for name in VARIANTS:  # interleaved: a, b, a, b, ...
                out = subprocess.run(
                    [sys.executable, __file__, "--model", args.model, "--block-ms",
                     str(args.block_ms), "--threads", str(args.threads), "--child", name, path],
                    check=True, capture_output=True, text=True,
                ).stdout
                record = json.loads(out.strip().splitlines()[-1])
                times[name].append(record["loop_s"])
                rss[name].append(record["peak_rss_mb"])
        duration = sf.info(path).duration
    ratios = [b / a for a, b in zip(times["bare"], times["streamasr"], strict=True)]
    print(f"model {args.model}, {duration:.1f} s audio, block {args.block_ms:.0f} ms, "
          f"{args.threads} thread(s), {args.runs} interleaved runs")
    for name in VARIANTS:
        print(f"  {name:10s} median {statistics.median(times[name]):.3f} s "
              f"(RTF {statistics.median(times[name]) / duration:.4f}), "
              f"peak RSS {max(rss[name]):.0f} MB")
    print(f"  ratio streamasr/bare: median {statistics.median(ratios):.3f} "
          f"(per run: {', '.join(f'{r:.3f}' for r in ratios)})")


def make_audio(directory: Path, seconds: float) -> str:
    """Speech from espeak-ng, repeated to the requested length, 16 kHz mono."""
    raw = directory / "speech.wav"
    text = "the quick brown fox jumps over the lazy dog while streaming speech is recognised"
    subprocess.run(["espeak-ng", "-w", str(raw), text], check=True)
    audio, rate = sf.read(raw, dtype="float32")
    reps = int(np.ceil(seconds * rate / len(audio)))
    path = directory / "long.wav"
    sf.write(path, np.tile(audio, reps)[: int(seconds * rate)], rate)
    return str(path)


if __name__ == "__main__":
    main()
