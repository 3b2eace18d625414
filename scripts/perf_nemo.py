#!/usr/bin/env python3
"""The NeMo engine against a bare NeMo cache-aware loop: same model, audio and look-ahead.

Why: streamasr's NeMo path (incremental features, its own chunk plan, greedy RNNT per frame)
must cost what NeMo's own streaming costs, or users pay for the wrapper. The bare loop here
is NeMo's published way to stream: ``CacheAwareStreamingAudioBuffer`` frames the whole
file's mel features into chunks with the pre-encode cache, and ``conformer_stream_step``
runs the encoder with its three caches and NeMo's greedy RNNT decoding. The other side is
the whole ``python -m streamasr file --backend nemo`` process. Each figure is one fresh
process (imports, model load and decoding all counted), the two kinds alternate, and each
figure's ratio is taken against its neighbour, so load on the machine moves both alike.

Per look-ahead: CPU seconds (user + system of the process), wall seconds, peak RSS,
time to the first encoder step, and whether the decoded pieces are the same. They can part
only at the very end: when the file's last chunk is shorter than what the pre-encoder needs
for one output frame, NeMo's buffer drops it, while streamasr decodes it as the offline pass
does (the tiny model, 3 s at [70,1]: 380 pieces bare, 390 streamasr and offline).

    python scripts/perf_nemo.py                          # full size, ~10 min on 2 cores
    python scripts/perf_nemo.py --tiny --seconds 5 --reps 1   # the bundled tiny model

`scripts/perf_report.py --nemo` runs `measure` and adds its section to results.json/.md.
The full-size model is built by scripts/make_full_nemo_model.py when it is missing.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
FULL_MODEL = ROOT / "build" / "full" / "full-random-nemo" / "full-random-nemo.nemo"
TINY_MODEL = ROOT / "models" / "tiny-nemo-streaming" / "tiny-nemo-streaming.nemo"
RATE = 16000
GOAL_RATIO_CPU = 1.05
KINDS = ("bare", "streamasr")


def peak_rss_mb() -> float:
    """This process's own peak RSS (VmHWM; ru_maxrss would carry the parent's over exec)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def cpu_s() -> float:
    """User + system CPU seconds of this process so far, imports included."""
    t = os.times()
    return t.user + t.system


# --- the two children: each prints one JSON line -------------------------------------------


def child_bare(model_path: str, lookahead: list[int], wav: str, threads: int) -> dict[str, Any]:
    """NeMo's own streaming: whole-file features framed by its buffer, conformer_stream_step."""
    import logging

    import soundfile as sf
    import torch

    torch.set_num_threads(threads)
    logging.getLogger("nemo_logger").setLevel(logging.ERROR)
    from nemo.collections.asr.models import ASRModel
    from nemo.collections.asr.parts.utils.streaming_utils import CacheAwareStreamingAudioBuffer

    model = ASRModel.restore_from(model_path, map_location="cpu").eval()
    model.encoder.set_default_att_context_size(lookahead)
    samples, rate = sf.read(wav, dtype="float32")
    if rate != RATE:
        raise SystemExit(f"{wav}: {rate} Hz; the bare loop takes 16 kHz")
    first = None
    with torch.inference_mode():
        buffer = CacheAwareStreamingAudioBuffer(model=model)
        buffer.append_audio(samples)
        c_channel, c_time, c_len = model.encoder.get_initial_cache_state(batch_size=1)
        hyps, pred_out = None, None
        drop = model.encoder.streaming_cfg.drop_extra_pre_encoded
        for step, (chunk, lengths) in enumerate(buffer):
            pred_out, _, c_channel, c_time, c_len, hyps = model.conformer_stream_step(
                processed_signal=chunk,
                processed_signal_length=lengths,
                cache_last_channel=c_channel,
                cache_last_time=c_time,
                cache_last_channel_len=c_len,
                keep_all_outputs=buffer.is_buffer_empty(),
                previous_hypotheses=hyps,
                previous_pred_out=pred_out,
                drop_extra_pre_encoded=0 if step == 0 else drop,
                return_transcription=True,
            )
            first = first or time.time()
    ids = [int(i) for i in hyps[0].y_sequence] if hyps else []
    return {"first_step_epoch": first, "pieces": model.tokenizer.ids_to_tokens(ids)}


def child_streamasr(model_path: str, lookahead: list[int], wav: str, threads: int,
                    jsonl: str) -> dict[str, Any]:
    """`streamasr file --backend nemo` in this process, its JSONL to a file; the first
    encoder step is timed by wrapping the engine's step (nothing else is changed)."""
    sys.path.insert(0, str(ROOT))
    from streamasr.backends.nemo import engine

    first: list[float] = []
    step = engine.NemoRecognizer._step

    def timed_step(self: Any, *args: Any, **kwargs: Any) -> None:
        step(self, *args, **kwargs)
        if not first:
            first.append(time.time())

    engine.NemoRecognizer._step = timed_step  # type: ignore[method-assign]
    from streamasr.cli import main

    sys.argv = ["streamasr", "file", wav, "--backend", "nemo", "--model", model_path,
                "--att-context-size", f"{lookahead[0]},{lookahead[1]}", "--no-endpoint",
                "--tail-padding", "0", "--threads", str(threads), "--no-realtime",
                "-f", "jsonl", "-q"]
    with open(jsonl, "w", encoding="utf-8") as out:
        stdout, sys.stdout = sys.stdout, out
        try:
            main()
        except SystemExit as exc:
            if exc.code not in (0, None):
                raise
        finally:
            sys.stdout = stdout
    pieces: list[str] = []
    for line in Path(jsonl).read_text(encoding="utf-8").splitlines():
        event = json.loads(line)
        if event["type"] == "final":
            pieces.extend(event["tokens"])
    return {"first_step_epoch": first[0] if first else None, "pieces": pieces}


def run_child(kind: str, model: Path, lookahead: list[int], wav: Path, threads: int,
              tmp: Path) -> dict[str, Any]:
    """One fresh process; wall from spawn to exit, first step from spawn."""
    spawned = time.time()
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, __file__, "--child", kind, str(model), f"{lookahead[0]},{lookahead[1]}",
         str(wav), str(threads), str(tmp / "out.jsonl")],
        check=True, capture_output=True, text=True,
    )
    wall = time.perf_counter() - t0
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    got["wall_s"] = wall
    first = got.pop("first_step_epoch")
    got["first_step_s"] = first - spawned if first else None
    return got


def write_wav(path: Path, seconds: float) -> None:
    """perf_report's speech-like synthetic audio as a 16-bit wav (random weights: speed and
    memory do not depend on what is said)."""
    import soundfile as sf

    sys.path.insert(0, str(ROOT / "scripts"))
    import perf_report

    sf.write(path, perf_report.audio(seconds, seed=24), RATE, subtype="PCM_16")


def first_difference(a: list[str], b: list[str]) -> int | None:
    """Index of the first piece where the two decodings part, None when they are equal."""
    if a == b:
        return None
    pairs = zip(a, b, strict=False)
    return next((i for i, (x, y) in enumerate(pairs) if x != y), min(len(a), len(b)))


def measure(model: Path | None = None, seconds: float = 30.0, reps: int = 2,
            lookaheads: tuple[tuple[int, int], ...] = ((70, 13), (70, 1)),
            threads: int = 1) -> dict[str, Any]:
    """Both kinds per look-ahead, alternating, `reps` times each; medians and ratios."""
    from streamasr.bench.report import cpu_model

    model = model or FULL_MODEL
    if model == FULL_MODEL and not model.is_file():
        print("building the full-size NeMo model (minutes) ...", file=sys.stderr)
        subprocess.run([sys.executable, str(ROOT / "scripts" / "make_full_nemo_model.py")],
                       check=True)
    load_before = os.getloadavg()[0]
    rows = []
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        wav = tmp / "audio.wav"
        write_wav(wav, seconds)
        for lookahead in lookaheads:
            got: dict[str, list[dict[str, Any]]] = {k: [] for k in KINDS}
            for rep in range(reps):
                order = KINDS if rep % 2 == 0 else KINDS[::-1]
                for kind in order:
                    print(f"nemo {lookahead} {kind} {rep + 1}/{reps} ...", file=sys.stderr,
                          flush=True)
                    got[kind].append(run_child(kind, model, list(lookahead), wav, threads, tmp))
            row: dict[str, Any] = {"att_context_size": list(lookahead)}
            for kind in KINDS:
                for key in ("cpu_s", "wall_s", "first_step_s"):
                    row[f"{key}_{kind}"] = statistics.median(g[key] for g in got[kind])
                row[f"peak_rss_mb_{kind}"] = max(g["peak_rss_mb"] for g in got[kind])
            pairs = list(zip(got["streamasr"], got["bare"], strict=True))
            row["ratio_cpu"] = statistics.median(s["cpu_s"] / b["cpu_s"] for s, b in pairs)
            row["ratio_wall"] = statistics.median(s["wall_s"] / b["wall_s"] for s, b in pairs)
            row["ratio_rss"] = row["peak_rss_mb_streamasr"] / row["peak_rss_mb_bare"]
            bare_pieces, ours_pieces = got["bare"][0]["pieces"], got["streamasr"][0]["pieces"]
            row["pieces"] = len(bare_pieces)
            row["pieces_equal"] = bare_pieces == ours_pieces
            row["pieces_first_difference"] = first_difference(bare_pieces, ours_pieces)
            rows.append(row)
    return {
        "model": str(model.relative_to(ROOT)) if model.is_relative_to(ROOT) else model.name,
        "audio_s": seconds, "reps": reps, "threads": threads, "cpu": cpu_model(),
        "platform": platform.platform(), "cores": len(os.sched_getaffinity(0)),
        "load_1min_before_after": [load_before, os.getloadavg()[0]],
        "goal_ratio_cpu": GOAL_RATIO_CPU, "rows": rows,
    }


def markdown(doc: dict[str, Any]) -> list[str]:
    """The section perf_report.py puts in results.md."""
    load = doc["load_1min_before_after"]
    lines = [f"## NeMo against a bare NeMo loop ({doc['model']}, {doc['audio_s']:.0f} s of "
             f"audio, {doc['threads']} thread, fresh process per figure)", "",
             f"{doc['cpu']}, {doc['cores']} cores, load average {load[0]:.1f} before, "
             f"{load[1]:.1f} after; medians of {doc['reps']} alternating runs. Whole processes: "
             "imports, model load and decoding.", "",
             "| look-ahead | CPU s streamasr / bare | ratio (goal <= "
             f"{doc['goal_ratio_cpu']}) | wall s streamasr / bare | ratio | peak RSS MB "
             "streamasr / bare | ratio | first step s streamasr / bare | pieces | same |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in doc["rows"]:
        left, right = r["att_context_size"]
        lines.append(
            f"| [{left},{right}] | {r['cpu_s_streamasr']:.1f} / {r['cpu_s_bare']:.1f} | "
            f"{r['ratio_cpu']:.3f} | {r['wall_s_streamasr']:.1f} / {r['wall_s_bare']:.1f} | "
            f"{r['ratio_wall']:.3f} | {r['peak_rss_mb_streamasr']:.0f} / "
            f"{r['peak_rss_mb_bare']:.0f} | {r['ratio_rss']:.3f} | "
            f"{r['first_step_s_streamasr']:.1f} / {r['first_step_s_bare']:.1f} | {r['pieces']} | "
            f"{'yes' if r['pieces_equal'] else 'no, from ' + str(r['pieces_first_difference'])} |"
        )
    return lines + [""]


def parse_lookahead(text: str) -> tuple[int, int]:
    left, right = (int(v) for v in text.split(","))
    return left, right


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", type=Path, help="a cache-aware hybrid .nemo "
                        "(default: the full-size random model, built when missing)")
    parser.add_argument("--tiny", action="store_true", help="use the bundled tiny model")
    parser.add_argument("--seconds", type=float, default=30.0, help="audio length (default 30)")
    parser.add_argument("--reps", type=int, default=2, help="runs per kind (default 2)")
    parser.add_argument("--lookaheads", default="70,13;70,1",
                        help="att_context_size values, ';'-separated (default 70,13;70,1)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "perf",
                        help="folder for nemo.json and nemo.md")
    parser.add_argument("--child", nargs=6, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kind, model, lookahead, wav, threads, jsonl = args.child
        la = list(parse_lookahead(lookahead))
        if kind == "bare":
            got = child_bare(model, la, wav, int(threads))
        else:
            got = child_streamasr(model, la, wav, int(threads), jsonl)
        got.update(cpu_s=cpu_s(), peak_rss_mb=peak_rss_mb())
        print(json.dumps(got))
        return
    sys.path.insert(0, str(ROOT))
    model = TINY_MODEL if args.tiny else args.model
    lookaheads = tuple(parse_lookahead(v) for v in args.lookaheads.split(";"))
    doc = measure(model, args.seconds, args.reps, lookaheads, args.threads)
    doc["command"] = ["python", "scripts/perf_nemo.py", *sys.argv[1:]]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "nemo.json").write_text(json.dumps(doc, indent=2), encoding="utf-8")
    text = "\n".join(markdown(doc))
    (args.out / "nemo.md").write_text(text, encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
