"""Where a model load goes, and what the optimised-graph cache saves ("first sample").

The one command (run it on an idle machine; the JSON record goes to stdout, a table to
stderr):

    python scripts/load_profile.py --reps 5 --full

Models: the bundled models/tiny-en (int8 encoder); with --full also the full-size random
export build/full/full-random-en, int8 and fp32 (`python scripts/make_test_models.py --size
full` builds it, as for scripts/perf_report.py). Every figure comes from a fresh process;
variants are interleaved within each rep, figures are medians over the reps, ratios are
original / optimised. Figures, per model:

- `read_s`: reading the ONNX files' bytes (page cache warm: the reps read them already);
- `session_<role>_<variant>_s`: one ONNX Runtime session on one thread through sherpa-onnx's
  own ONNX Runtime (graph_build.OrtLibrary), at the level sherpa-onnx uses (ORT default,
  ENABLE_ALL) on the original and the optimised graph, and with optimisation off on the
  optimised graph (`..._noopt_s`: parsing plus kernel set-up, what no cache can remove);
- `build_s`: making the cache entries from nothing (graph_cache.optimised_paths, one child);
- `recognizer_<variant>_s`: `sherpa_onnx.OnlineRecognizer.from_transducer`, 1 thread, for
  `original` (the files as they are, no `model_type`: sherpa-onnx then opens one more
  encoder session only to read that metadata value), `named` (the files as they are, the
  encoder's `model_type` passed) and `optimised` (cached graphs, `model_type` passed: what
  streamasr does);
- `first_sample_<variant>_s`: from the start of the load to the first decoded chunk;
- `cli_<variant>_s` (tiny-en): `python -m streamasr file clip` wall time, the cache switched
  off (`original`: STREAMASR_GRAPH_CACHE=0; streamasr names `model_type` either way) vs a
  warm cache (`optimised`).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
TINY = ROOT / "models" / "tiny-en"
FULL = ROOT / "build" / "full" / "full-random-en"
CLIP = TINY / "test_wavs" / "0.wav"
ORT_DEFAULT_LEVEL = 99  # ORT_ENABLE_ALL: sherpa-onnx leaves the level at ONNX Runtime's default
ORT_NO_OPT = 0

from streamasr.backends.sherpa.onnx_meta import read_encoder_metadata  # noqa: E402


def model_sets(full: bool) -> dict[str, dict[str, Path]]:
    """name -> {encoder, decoder, joiner, tokens} for every model to profile."""
    tiny = "epoch-99-avg-1-chunk-16-left-64"
    sets = {
        "tiny-en int8": {
            "encoder": TINY / f"encoder-{tiny}.int8.onnx",
            "decoder": TINY / f"decoder-{tiny}.onnx",
            "joiner": TINY / f"joiner-{tiny}.int8.onnx",
            "tokens": TINY / "tokens.txt",
        }
    }
    if full:
        big = "epoch-0-avg-1-chunk-16-left-128"
        for precision, suffix in (("int8", ".int8"), ("fp32", "")):
            sets[f"full-random-en {precision}"] = {
                "encoder": FULL / f"encoder-{big}{suffix}.onnx",
                "decoder": FULL / f"decoder-{big}.onnx",
                "joiner": FULL / f"joiner-{big}{suffix}.onnx",
                "tokens": FULL / "tokens.txt",
            }
    for name, files in sets.items():
        missing = [str(p) for p in files.values() if not p.is_file()]
        if missing:
            sys.exit(f"{name}: missing {', '.join(missing)}; build it with "
                     "`python scripts/make_test_models.py --size full`")
    return sets


# ---- children: each prints one JSON object ----

def child_read(paths: list[str]) -> dict:
    t0 = time.perf_counter()
    total = sum(len(Path(p).read_bytes()) for p in paths)
    return {"seconds": time.perf_counter() - t0, "bytes": total}


def child_session(path: str, level: int) -> dict:
    from streamasr.backends.sherpa.graph_build import OrtLibrary
    from streamasr.backends.sherpa.graph_cache import ort_library

    ort = OrtLibrary(str(ort_library()))
    t0 = time.perf_counter()
    ort.open_session(path, level)
    return {"seconds": time.perf_counter() - t0}


def child_build(paths: list[str], folder: str) -> dict:
    os.environ["STREAMASR_GRAPH_CACHE_DIR"] = folder
    from streamasr.backends.sherpa.graph_cache import optimised_paths

    t0 = time.perf_counter()
    out = optimised_paths([Path(p) for p in paths])
    return {"seconds": time.perf_counter() - t0, "paths": [str(p) for p in out]}


def child_recognizer(encoder: str, decoder: str, joiner: str, tokens: str, kind: str) -> dict:
    import numpy as np
    import soundfile as sf

    t0 = time.perf_counter()
    import sherpa_onnx

    t1 = time.perf_counter()
    engine = sherpa_onnx.OnlineRecognizer.from_transducer(
        encoder=encoder, decoder=decoder, joiner=joiner, tokens=tokens, num_threads=1,
        model_type="" if kind == "-" else kind,
    )
    t2 = time.perf_counter()
    audio, rate = sf.read(CLIP, dtype="float32")
    stream = engine.create_stream()
    block = rate // 10
    for start in range(0, len(audio), block):
        stream.accept_waveform(rate, np.ascontiguousarray(audio[start:start + block]))
        if engine.is_ready(stream):
            engine.decode_stream(stream)
            break
    t3 = time.perf_counter()
    return {"import_s": t1 - t0, "seconds": t2 - t1, "first_sample_s": t3 - t1}


def child(argv: list[str]) -> None:
    kind, args = argv[0], argv[1:]
    if kind == "read":
        out = child_read(args)
    elif kind == "session":
        out = child_session(args[0], int(args[1]))
    elif kind == "build":
        out = child_build(args[:-1], args[-1])
    else:
        out = child_recognizer(*args)
    print(json.dumps(out))


# ---- parent ----

def spawn(*args: str, env: dict | None = None) -> dict:
    done = subprocess.run(
        [sys.executable, __file__, "--child", *args],
        capture_output=True, text=True, env=env, check=False,
    )
    if done.returncode:
        sys.exit(f"child {args[:2]} failed: {done.stderr.strip()[-500:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def cli_seconds(cache_on: bool, folder: str) -> float:
    env = {**os.environ, "STREAMASR_GRAPH_CACHE_DIR": folder,
           "STREAMASR_GRAPH_CACHE": "1" if cache_on else "0"}
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "streamasr", "file", str(CLIP)],
                   capture_output=True, env=env, check=True)
    return time.perf_counter() - t0


def profile(name: str, files: dict[str, Path], reps: int, cache: str) -> dict:
    roles = ["encoder", "decoder", "joiner"]
    sources = [str(files[r]) for r in roles]
    optimised = spawn("build", *sources, cache)["paths"]
    model_type = read_encoder_metadata(files["encoder"]).model_type
    if optimised == sources:
        sys.exit(f"{name}: the graph cache made no entries (see STREAMASR_GRAPH_CACHE)")
    runs: dict[str, list[float]] = {}

    def add(key: str, value: float) -> None:
        runs.setdefault(key, []).append(value)

    for rep in range(reps):
        print(f"{name}: rep {rep + 1}/{reps}", file=sys.stderr)
        add("read_s", spawn("read", *sources)["seconds"])
        with tempfile.TemporaryDirectory() as empty:
            add("build_s", spawn("build", *sources, empty)["seconds"])
        for role, source, graph in zip(roles, sources, optimised, strict=True):
            for variant, path, level in (
                ("original", source, ORT_DEFAULT_LEVEL),
                ("optimised", graph, ORT_DEFAULT_LEVEL),
                ("noopt", graph, ORT_NO_OPT),
            ):
                add(f"session_{role}_{variant}_s", spawn("session", path, str(level))["seconds"])
        for variant, graphs, kind in (
            ("original", sources, "-"),
            ("named", sources, model_type),
            ("optimised", optimised, model_type),
        ):
            got = spawn("recognizer", *graphs, str(files["tokens"]), kind)
            add(f"recognizer_{variant}_s", got["seconds"])
            add(f"first_sample_{variant}_s", got["first_sample_s"])
            add("import_sherpa_onnx_s", got["import_s"])
        if name.startswith("tiny-en"):
            add("cli_original_s", cli_seconds(False, cache))
            add("cli_optimised_s", cli_seconds(True, cache))
    medians = {k: round(statistics.median(v), 4) for k, v in runs.items()}
    ratios = {
        f"{what} {a}/{b}": round(medians[f"{what}_{a}_s"] / medians[f"{what}_{b}_s"], 2)
        for what in ("recognizer", "first_sample", "cli")
        for a, b in (("original", "optimised"), ("original", "named"), ("named", "optimised"))
        if f"{what}_{a}_s" in medians and f"{what}_{b}_s" in medians
    }
    return {"files": {k: str(v.relative_to(ROOT)) for k, v in files.items()},
            "bytes": {r: files[r].stat().st_size for r in roles},
            "median": medians, "ratios": ratios, "runs": runs}


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2:])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--full", action="store_true", help="also the full-size random export")
    args = parser.parse_args()
    import sherpa_onnx

    from streamasr.backends.sherpa.graph_cache import cpu_signature, ort_version
    from streamasr.bench.report import cpu_model

    record: dict = {
        "command": f"python scripts/load_profile.py --reps {args.reps}" + " --full" * args.full,
        "cpu_model": cpu_model(), "cpu_count": os.cpu_count(), "cpu_signature": cpu_signature(),
        "loadavg_before": os.getloadavg(), "sherpa_onnx": sherpa_onnx.__version__,
        "sherpa_onnx_ort": ort_version(), "python": sys.version.split()[0], "models": {},
    }
    with tempfile.TemporaryDirectory() as cache:
        for name, files in model_sets(args.full).items():
            record["models"][name] = profile(name, files, args.reps, cache)
    record["loadavg_after"] = os.getloadavg()
    print(json.dumps(record, indent=1))
    for name, got in record["models"].items():
        m = got["median"]
        print(f"{name}: recognizer {m['recognizer_original_s']:.2f} s -> "
              f"{m['recognizer_optimised_s']:.2f} s, first sample "
              f"{m['first_sample_original_s']:.2f} s -> {m['first_sample_optimised_s']:.2f} s, "
              f"build once {m['build_s']:.2f} s; ratios {got['ratios']}",
              file=sys.stderr)


if __name__ == "__main__":
    main()
