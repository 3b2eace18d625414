"""The whole `streamasr file` process against a bare sherpa-onnx script: imports, model
resolution, load and decode, as a user waits for them.

(a) bare: a script that imports sherpa_onnx and soundfile, builds the recognizer from the
    same ONNX files streamasr picks, feeds the file in blocks and prints the text.
(b) streamasr: `python -m streamasr file WAV --model M`, the command a user types.
(c) help: `python -m streamasr --help`, the floor of any command.
(d) no-cache: (b) with STREAMASR_GRAPH_CACHE=0, so the model load does the same work as the
    bare script's (graph optimisation on every load) and what remains is streamasr's own cost.
(e) with --baseline DIR: (b) run from another source tree (e.g. `git archive REV streamasr |
    tar -x -C DIR`), to set a change against the code before it, in the same interleaving.
Each run is a fresh process; runs are interleaved a/b/c/d, a/b/c/d, ... Wall time is measured
around the process, CPU time (user + sys) and peak RSS from the child's own rusage (wait4),
taken by a small launcher process (see LAUNCHER).
Prints the medians (RSS: the largest) and the ratios over the bare script, with the CPU model
and the load average before and after. --seconds N streams N seconds of the bundled clips one
after another instead of one 3.4 s clip (the loop's share grows with the audio); --fp32 runs
the fp32 files of an export that has both.

    python scripts/startup_cost.py --model tiny-en --model build/full/full-random-en --runs 7
    python scripts/startup_cost.py --model build/full/full-random-en --seconds 60 --runs 5 --fp32
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # run from a checkout without installing it
WAV = REPO / "models" / "tiny-en" / "test_wavs" / "0.wav"

BARE = '''
import sys
import numpy as np
import sherpa_onnx
import soundfile as sf

tokens, encoder, decoder, joiner, wav = sys.argv[1:6]
# "per-step": one utterance, no endpoints, the text read after every step (what a live
# display reads; `file --no-endpoint`); otherwise text at endpoints only
per_step = sys.argv[6:] == ["per-step"]
engine = sherpa_onnx.OnlineRecognizer.from_transducer(
    tokens=tokens, encoder=encoder, decoder=decoder, joiner=joiner, num_threads=1,
    enable_endpoint_detection=not per_step,
)
stream = engine.create_stream()
texts = []
with sf.SoundFile(wav) as audio:
    rate = audio.samplerate
    for block in audio.blocks(round(0.32 * rate), dtype="float32"):
        stream.accept_waveform(rate, block)
        while engine.is_ready(stream):
            engine.decode_stream(stream)
            if per_step:
                engine.get_result(stream)
            elif engine.is_endpoint(stream):
                texts.append(engine.get_result(stream))
                engine.reset(stream)
stream.accept_waveform(rate, np.zeros(int(0.66 * rate), np.float32))
stream.input_finished()
while engine.is_ready(stream):
    engine.decode_stream(stream)
texts.append(engine.get_result(stream))
print(" ".join(t for t in texts if t))
'''


# Runs one command and prints its wall, CPU and peak RSS. A small process of its own: a
# child's peak RSS on Linux starts from the memory of the process that spawned it (the
# image before exec counts), so spawning from this script, with numpy and the audio loaded,
# would raise small peaks to this script's size.
LAUNCHER = """
import json, os, subprocess, sys, time
started = time.perf_counter()
child = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL)
_, status, usage = os.wait4(child.pid, 0)
wall = time.perf_counter() - started
code = os.waitstatus_to_exitcode(status)
if code:
    sys.exit(code)
print(json.dumps([wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss]))
"""


def timed(command: list[str]) -> tuple[float, float, float]:
    """(wall s, CPU s, peak RSS MB) of one child process; its output is discarded, its
    failure is not. Leading NAME=VALUE words are its environment; PYTHONPATH=DIR runs that
    source tree."""
    env, cwd = dict(os.environ), REPO
    while "=" in command[0] and not command[0].startswith("/"):
        name, _, value = command[0].partition("=")
        env[name] = value
        if name == "PYTHONPATH":  # run from there: -m puts the cwd first
            cwd = Path(value)
            env.setdefault("STREAMASR_MODELS", str(REPO / "models"))
        command = command[1:]
    with tempfile.TemporaryFile() as err:
        done = subprocess.run(
            [sys.executable, "-S", "-c", LAUNCHER, *command], cwd=cwd, env=env,
            stdout=subprocess.PIPE, stderr=err, check=False,
        )
        if done.returncode != 0:
            err.seek(0)
            tail = err.read()[-500:].decode(errors="replace")
            raise SystemExit(f"{' '.join(command)} failed ({done.returncode}): {tail}")
    wall, cpu, rss_kb = json.loads(done.stdout)
    return wall, cpu, rss_kb / 1024


def long_wav(seconds: float, scratch: Path) -> Path:
    """The bundled clips one after another, repeated to `seconds` of audio."""
    import numpy as np
    import soundfile as sf

    clips = [sf.read(p, dtype="float32")[0] for p in sorted(WAV.parent.glob("*.wav"))]
    rate = sf.info(WAV).samplerate
    joined: list = []
    total = 0
    while total < seconds * rate:
        for clip in clips:
            joined.append(clip)
            total += len(clip)
    path = scratch / f"long-{seconds:g}s.wav"
    sf.write(path, np.concatenate(joined)[: int(seconds * rate)], rate)
    return path


def variants(
    model: str, bare_script: Path, baseline: Path | None, wav: Path, fp32: bool,
    no_endpoint: bool = False,
) -> dict[str, list[str]]:
    from streamasr.backends.sherpa.modeldir import resolve_model

    if Path(model).exists():  # a folder: the same one whichever tree runs it
        model = str(Path(model).resolve())
    files = resolve_model(model, prefer_int8=not fp32)
    if files.kind != "transducer":
        raise SystemExit(f"{model}: the bare script here runs transducers only")
    python = sys.executable
    file_run = [python, "-m", "streamasr", "file", str(wav), "--model", str(model),
                *(["--fp32"] if fp32 else []), *(["--no-endpoint"] if no_endpoint else [])]
    commands = {
        "bare": [python, str(bare_script), str(files.tokens), str(files.encoder),
                 str(files.decoder), str(files.joiner), str(wav),
                 *(["per-step"] if no_endpoint else [])],
        "streamasr": file_run,
        "no-cache": ["STREAMASR_GRAPH_CACHE=0", *file_run],
        "help": [python, "-m", "streamasr", "--help"],
    }
    if baseline is not None:
        commands["baseline"] = [f"PYTHONPATH={baseline.resolve()}", *file_run]
    return commands


def measure(
    model: str, runs: int, bare_script: Path, baseline: Path | None, wav: Path, fp32: bool,
    no_endpoint: bool = False,
) -> dict[str, object]:
    commands = variants(model, bare_script, baseline, wav, fp32, no_endpoint)
    for command in commands.values():  # warm the page cache and any on-disk caches once
        timed(command)
    samples: dict[str, dict[str, list[float]]] = {
        name: {"wall_s": [], "cpu_s": [], "peak_rss_mb": []} for name in commands
    }
    for _ in range(runs):
        for name, command in commands.items():
            for key, value in zip(("wall_s", "cpu_s", "peak_rss_mb"), timed(command), strict=True):
                samples[name][key].append(value)
    medians = {
        name: {
            key: round(max(values) if key == "peak_rss_mb" else statistics.median(values), 3)
            for key, values in figures.items()
        }
        for name, figures in samples.items()
    }
    ratios = {
        f"{name}_over_bare": {
            key: round(medians[name][key] / medians["bare"][key], 3)
            for key in ("wall_s", "cpu_s", "peak_rss_mb")
        }
        for name in commands if name != "bare"
    }
    return {"model": model, "precision": "fp32" if fp32 else "int8 where present",
            "endpoints": "none" if no_endpoint else "on",
            "runs": runs, "median": medians, "ratio": ratios}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", action="append",
                        help="bundled name or model folder (repeatable; default tiny-en)")
    parser.add_argument("--runs", type=int, default=7, help="interleaved runs per variant")
    parser.add_argument("--baseline", type=Path,
                        help="another source tree whose streamasr runs as a further variant")
    parser.add_argument("--seconds", type=float,
                        help="stream this much audio (the bundled clips repeated), not one clip")
    parser.add_argument("--fp32", action="store_true", help="the fp32 files of the export")
    parser.add_argument("--no-endpoint", action="store_true",
                        help="one utterance: `file --no-endpoint` against a bare loop that "
                        "reads the text after every step")
    args = parser.parse_args()
    from streamasr.bench.report import cpu_model

    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as scratch:
        bare_script = Path(scratch) / "bare_sherpa.py"
        bare_script.write_text(BARE)
        wav = long_wav(args.seconds, Path(scratch)) if args.seconds else WAV
        results = []
        for model in args.model or ["tiny-en"]:
            results.append(measure(model, args.runs, bare_script, args.baseline, wav, args.fp32,
                                   args.no_endpoint))
            print(json.dumps(results[-1]), file=sys.stderr, flush=True)  # as each one ends
    record = {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "load_before": [round(v, 2) for v in load_before],
        "load_after": [round(v, 2) for v in os.getloadavg()],
        "audio": f"{args.seconds:g} s of the bundled clips" if args.seconds
        else str(WAV.relative_to(REPO)),
        "results": results,
    }
    print(json.dumps(record, indent=2))


if __name__ == "__main__":
    main()
