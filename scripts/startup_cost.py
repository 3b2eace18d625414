"""The whole `streamasr file` process against a bare sherpa-onnx script: imports, model
resolution, load and decode, as a user waits for them.

(a) bare: a script that imports sherpa_onnx and soundfile, builds the recognizer from the
    same ONNX files streamasr picks, feeds the file in blocks and prints the text.
(b) streamasr: `python -m streamasr file WAV --model M`, the command a user types.
(c) help: `python -m streamasr --help`, the floor of any command.
(d) with --baseline DIR: (b) run from another source tree (e.g. `git archive REV streamasr |
    tar -x -C DIR`), to set a change against the code before it, in the same interleaving.
Each run is a fresh process; runs are interleaved a/b/c, a/b/c, ... Wall time is measured
around the process, CPU time (user + sys) from the children's rusage. Prints the medians and
the ratios b/a with the CPU model and the load average before and after.

    python scripts/startup_cost.py --model tiny-en --model build/full/full-random-en --runs 7
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

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # run from a checkout without installing it
WAV = REPO / "models" / "tiny-en" / "test_wavs" / "0.wav"

BARE = '''
import sys
import numpy as np
import sherpa_onnx
import soundfile as sf

tokens, encoder, decoder, joiner, wav = sys.argv[1:6]
engine = sherpa_onnx.OnlineRecognizer.from_transducer(
    tokens=tokens, encoder=encoder, decoder=decoder, joiner=joiner, num_threads=1,
    enable_endpoint_detection=True,
)
stream = engine.create_stream()
texts = []
with sf.SoundFile(wav) as audio:
    rate = audio.samplerate
    for block in audio.blocks(round(0.32 * rate), dtype="float32"):
        stream.accept_waveform(rate, block)
        while engine.is_ready(stream):
            engine.decode_stream(stream)
            if engine.is_endpoint(stream):
                texts.append(engine.get_result(stream))
                engine.reset(stream)
stream.accept_waveform(rate, np.zeros(int(0.66 * rate), np.float32))
stream.input_finished()
while engine.is_ready(stream):
    engine.decode_stream(stream)
texts.append(engine.get_result(stream))
print(" ".join(t for t in texts if t))
'''


def timed(command: list[str]) -> tuple[float, float]:
    """(wall s, CPU s) of one child process; its output is discarded, its failure is not.
    A command that starts with PYTHONPATH=DIR runs that source tree."""
    env, cwd = dict(os.environ), REPO
    if command[0].startswith("PYTHONPATH="):  # run from there: -m puts the cwd first
        cwd = Path(command[0].partition("=")[2])
        env["PYTHONPATH"] = str(cwd)
        env.setdefault("STREAMASR_MODELS", str(REPO / "models"))
        command = command[1:]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({done.returncode}): {done.stderr[-500:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def variants(model: str, bare_script: Path, baseline: Path | None) -> dict[str, list[str]]:
    from streamasr.backends.sherpa.modeldir import resolve_model

    if Path(model).exists():  # a folder: the same one whichever tree runs it
        model = str(Path(model).resolve())
    files = resolve_model(model)
    if files.kind != "transducer":
        raise SystemExit(f"{model}: the bare script here runs transducers only")
    python = sys.executable
    file_run = [python, "-m", "streamasr", "file", str(WAV), "--model", str(model)]
    commands = {
        "bare": [python, str(bare_script), str(files.tokens), str(files.encoder),
                 str(files.decoder), str(files.joiner), str(WAV)],
        "streamasr": file_run,
        "help": [python, "-m", "streamasr", "--help"],
    }
    if baseline is not None:
        commands["baseline"] = [f"PYTHONPATH={baseline.resolve()}", *file_run]
    return commands


def measure(model: str, runs: int, bare_script: Path, baseline: Path | None) -> dict[str, object]:
    commands = variants(model, bare_script, baseline)
    for command in commands.values():  # warm the page cache and any on-disk caches once
        timed(command)
    samples: dict[str, dict[str, list[float]]] = {
        name: {"wall_s": [], "cpu_s": []} for name in commands
    }
    for _ in range(runs):
        for name, command in commands.items():
            wall, cpu = timed(command)
            samples[name]["wall_s"].append(wall)
            samples[name]["cpu_s"].append(cpu)
    medians = {
        name: {key: round(statistics.median(values), 3) for key, values in figures.items()}
        for name, figures in samples.items()
    }
    ratios = {
        f"{name}_over_bare": {
            key: round(medians[name][key] / medians["bare"][key], 3) for key in ("wall_s", "cpu_s")
        }
        for name in commands if name != "bare"
    }
    return {"model": model, "runs": runs, "median": medians, "ratio": ratios}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", action="append",
                        help="bundled name or model folder (repeatable; default tiny-en)")
    parser.add_argument("--runs", type=int, default=7, help="interleaved runs per variant")
    parser.add_argument("--baseline", type=Path,
                        help="another source tree whose streamasr runs as a fourth variant")
    args = parser.parse_args()
    from streamasr.bench.report import cpu_model

    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as scratch:
        bare_script = Path(scratch) / "bare_sherpa.py"
        bare_script.write_text(BARE)
        results = []
        for model in args.model or ["tiny-en"]:
            results.append(measure(model, args.runs, bare_script, args.baseline))
            print(json.dumps(results[-1]), file=sys.stderr, flush=True)  # as each one ends
    record = {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "load_before": [round(v, 2) for v in load_before],
        "load_after": [round(v, 2) for v in os.getloadavg()],
        "audio": str(WAV.relative_to(REPO)),
        "results": results,
    }
    print(json.dumps(record, indent=2))


if __name__ == "__main__":
    main()
