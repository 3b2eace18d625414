#!/usr/bin/env python3
"""NeMo backend on a device: tokens against the CPU, then step time and memory per stream.

Why: the parity tests run on CPU in CI; a GPU must give the same tokens, and the figures a
user needs to size a GPU deployment (how many streams one step serves in how long, and how
much device memory a stream holds) can only be measured there.

    python scripts/nemo_throughput.py --device cuda --out build/gpu_check.json
    python scripts/nemo_throughput.py --device cpu --streams 1,2 --seconds 4   # CPU fallback

Report (JSON): the machine, `parity` (per look-ahead and decoder: tokens on the device ==
tokens on the CPU, and the largest encoder-frame difference), and `throughput` (per number
of streams x look-ahead: p50/p99 of one batched encoder step in ms, the real-time factor
of the whole run, device memory per stream in MiB on CUDA), and `held` (per look-ahead: the
most streams whose batched step p99 fits in one chunk, and the most whose whole loop,
features included, keeps up with real time on the one Python thread). `--stop-past-chunk`
ends a look-ahead's ladder at the first count whose step p99 exceeds the chunk; running out
of device memory ends it too, recorded as that count's row. Audio is espeak-ng speech when
espeak-ng and sox are installed, else seeded noise (the models are random-weight: speed
and memory do not depend on what is said).
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from streamasr.backends.nemo.engine import NemoRecognizer  # noqa: E402

MODEL = REPO / "models" / "tiny-nemo-streaming" / "tiny-nemo-streaming.nemo"
TEXT = "early see create show life and then mother walk seven nine"


def test_audio(seconds: float) -> tuple[np.ndarray, str]:
    """`seconds` of 16 kHz audio: repeated espeak-ng speech if available, else noise."""
    n = int(seconds * 16000)
    espeak, sox = shutil.which("espeak-ng"), shutil.which("sox")
    if espeak and sox:
        import soundfile as sf

        with tempfile.TemporaryDirectory() as tmp:
            raw, wav = Path(tmp) / "raw.wav", Path(tmp) / "speech.wav"
            subprocess.run([espeak, "-v", "en-us", "-w", str(raw), TEXT], check=True)
            subprocess.run([sox, str(raw), "-r", "16000", "-b", "16", str(wav)], check=True)
            speech, _ = sf.read(wav, dtype="float32")
        return np.resize(speech, n).astype(np.float32), "espeak-ng speech"
    return np.random.default_rng(7).normal(0, 0.1, n).astype(np.float32), "seeded noise"


def run_stream(rec: NemoRecognizer, audio: np.ndarray) -> tuple[tuple[int, ...], np.ndarray]:
    """One stream, one chunk per feed block; token ids and encoder frames."""
    stream = rec.create_stream(keep_encoder_output=True)
    block = int(round(rec.chunk_s * 16000))
    for i in range(0, len(audio), block):
        stream.accept(16000, audio[i : i + block])
        while stream.decode_step():
            pass
    stream.input_finished()
    while stream.decode_step():
        pass
    return stream.token_ids(), np.concatenate(stream.encoder_output)


def parity(model: Path, device: str, lookaheads, audio: np.ndarray) -> list[dict]:
    """Tokens on `device` against the CPU for every look-ahead and head."""
    rows = []
    for la in lookaheads:
        for decoder in ("ctc", "rnnt"):
            clip = audio if decoder == "ctc" else audio[:32000]
            cpu_ids, cpu_frames = run_stream(NemoRecognizer(model, "cpu", la, decoder), clip)
            dev_ids, dev_frames = run_stream(NemoRecognizer(model, device, la, decoder), clip)
            rows.append(
                {
                    "att_context_size": list(la),
                    "decoder": decoder,
                    "tokens": len(cpu_ids),
                    "tokens_identical": cpu_ids == dev_ids,
                    "max_frame_diff": float(np.abs(cpu_frames - dev_frames).max()),
                }
            )
            print(json.dumps(rows[-1]), file=sys.stderr)
    return rows


def throughput(
    model: Path, device: str, lookaheads, streams_list, audio, decoder, stop_past_chunk=False
) -> list[dict]:
    """Batched steps over N streams fed in real time order, one chunk per feed block."""
    import torch

    rows = []
    for la in lookaheads:
        rec = NemoRecognizer(model, device, la, decoder)
        block = int(round(rec.chunk_s * 16000))
        for n in streams_list:
            if device.startswith("cuda"):
                torch.cuda.synchronize()
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats()
                base = torch.cuda.memory_allocated()
            step_s: list[float] = []
            try:
                streams = [rec.create_stream() for _ in range(n)]
                started = time.perf_counter()
                for i in range(0, len(audio), block):
                    for s in streams:
                        s.accept(16000, audio[i : i + block])
                    while True:
                        t0 = time.perf_counter()
                        stepped = any(rec.decode_batch(streams))  # synchronised on CUDA
                        if not stepped:
                            break
                        step_s.append(time.perf_counter() - t0)
            except torch.cuda.OutOfMemoryError:
                streams = []
                rows.append({"att_context_size": list(la), "decoder": decoder, "streams": n,
                             "error": "out of device memory"})
                print(json.dumps(rows[-1]), file=sys.stderr)
                break
            wall = time.perf_counter() - started
            row = {
                "att_context_size": list(la),
                "decoder": decoder,
                "streams": n,
                "steps": len(step_s),
                "step_ms_p50": round(float(np.percentile(step_s, 50)) * 1000, 3),
                "step_ms_p99": round(float(np.percentile(step_s, 99)) * 1000, 3),
                "rtf_per_stream": round(wall / (len(audio) / 16000) / n, 5),
                "chunk_ms": round(rec.chunk_s * 1000),
            }
            if device.startswith("cuda"):
                peak = torch.cuda.max_memory_allocated() - base
                row["gpu_mib_per_stream"] = round(peak / n / 2**20, 2)
            rows.append(row)
            print(json.dumps(row), file=sys.stderr)
            streams = []
            if stop_past_chunk and row["step_ms_p99"] > row["chunk_ms"]:
                break
    return rows


def held(rows: list[dict]) -> list[dict]:
    """Per look-ahead: the most streams whose step p99 fits in a chunk, and the most whose
    whole loop (features and steps, one thread) kept up with real time (0 if none)."""
    out: dict[tuple, dict] = {}
    for row in rows:
        if "error" in row:
            continue
        key = tuple(row["att_context_size"])
        best = out.setdefault(key, {"att_context_size": list(key), "chunk_ms": row["chunk_ms"],
                                    "step_fits_chunk": 0, "loop_keeps_up": 0})
        if row["step_ms_p99"] <= row["chunk_ms"]:
            best["step_fits_chunk"] = max(best["step_fits_chunk"], row["streams"])
        if row["rtf_per_stream"] * row["streams"] <= 1.0:
            best["loop_keeps_up"] = max(best["loop_keeps_up"], row["streams"])
    return list(out.values())


def nemo_version() -> str:
    """The installed nemo_toolkit's version."""
    from importlib.metadata import version

    return version("nemo_toolkit")


def driver_version() -> str | None:
    """The NVIDIA driver's version from nvidia-smi, or None without one."""
    if not shutil.which("nvidia-smi"):
        return None
    done = subprocess.run(
        ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
        capture_output=True, text=True, check=False,
    )
    return done.stdout.strip().splitlines()[0] if done.returncode == 0 and done.stdout else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, default=MODEL)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--lookaheads", default="70,13/70,6/70,1/70,0")
    parser.add_argument("--streams", default="1,4,16,64")
    parser.add_argument("--seconds", type=float, default=20.0, help="audio per stream")
    parser.add_argument("--decoder", default="ctc", choices=("ctc", "rnnt"))
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--stop-past-chunk", action="store_true",
                        help="end a look-ahead's ladder once the step p99 exceeds the chunk")
    parser.add_argument("--out", type=Path, default=REPO / "build" / "nemo_throughput.json")
    args = parser.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    lookaheads = [tuple(int(v) for v in la.split(",")) for la in args.lookaheads.split("/")]
    streams_list = [int(n) for n in args.streams.split(",")]
    audio, audio_kind = test_audio(args.seconds)
    parity_rows = parity(args.model, args.device, lookaheads, audio[: 16000 * 5])
    rows = throughput(args.model, args.device, lookaheads, streams_list, audio, args.decoder,
                      args.stop_past_chunk)
    model = NemoRecognizer(args.model, "cpu", lookaheads[0], args.decoder).model
    report = {
        "model": args.model.name,
        "model_params_m": round(sum(p.numel() for p in model.parameters()) / 1e6, 1),
        "device": args.device,
        "device_name": (
            torch.cuda.get_device_name(args.device) if args.device.startswith("cuda") else "cpu"
        ),
        "driver": driver_version() if args.device.startswith("cuda") else None,
        "torch": torch.__version__,
        "nemo": nemo_version(),
        "cpu_threads": args.threads,
        "python": platform.python_version(),
        "audio": f"{audio_kind}, {args.seconds} s per stream",
        "parity": parity_rows,
        "throughput": rows,
        "held": held(rows),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    ok = all(row["tokens_identical"] for row in report["parity"])
    print(f"{args.out}: parity {'ok' if ok else 'FAILED'}", file=sys.stderr)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
