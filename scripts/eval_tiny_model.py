#!/usr/bin/env python3
"""Measure a bundled streaming transducer's WER through real sherpa-onnx.

Why: the figures in ``models/tiny-en/README.md`` must come from the engine the
product uses (sherpa-onnx, greedy search, the exported chunk size), not from the
PyTorch training code.

Reports WER (jiwer) on the held-out synthetic test set overall, for voices seen in
training, for held-out voices, per voice, and on the five LibriVox clips that Debian's
``pocketsphinx-testdata`` installs (real recorded speech, for honesty: the model has
never heard a human voice).

Usage::

    python scripts/eval_tiny_model.py --model-dir models/tiny-en --chunk 16 \\
        --test build/tts/test/manifest.jsonl --json build/train/eval-chunk16.json
"""

from __future__ import annotations

import argparse
import json
import re
from collections import defaultdict
from pathlib import Path

import jiwer
import numpy as np
import sherpa_onnx
import soundfile as sf

from streamasr.stream import DEFAULT_TAIL_PADDING_S

LIBRIVOX = Path("/usr/share/pocketsphinx/test/data/librivox")


def find(model_dir: Path, kind: str, chunk: int, int8: bool = True) -> Path:
    """The model file of one kind for a chunk size (int8 preferred unless int8=False)."""
    matches = sorted(model_dir.glob(f"{kind}-*chunk-{chunk}-left-*.onnx"))
    if not matches:
        raise SystemExit(f"no {kind} for chunk {chunk} in {model_dir}")
    quantised = [m for m in matches if ".int8." in m.name]
    plain = [m for m in matches if ".int8." not in m.name]
    return ((quantised or plain) if int8 else (plain or quantised))[0]


def recognizer(
    model_dir: Path, chunk: int, head: str = "transducer"
) -> sherpa_onnx.OnlineRecognizer:
    if head == "ctc":
        return sherpa_onnx.OnlineRecognizer.from_zipformer2_ctc(
            tokens=str(model_dir / "tokens.txt"),
            model=str(find(model_dir, "ctc", chunk, int8=False)),
            num_threads=1,
        )
    return sherpa_onnx.OnlineRecognizer.from_transducer(
        tokens=str(model_dir / "tokens.txt"),
        encoder=str(find(model_dir, "encoder", chunk)),
        decoder=str(find(model_dir, "decoder", chunk)),
        joiner=str(find(model_dir, "joiner", chunk)),
        num_threads=1,
        decoding_method="greedy_search",
    )


def transcribe(rec: sherpa_onnx.OnlineRecognizer, path: Path) -> str:
    """Stream one file in 0.1 s blocks, pad the tail as streamasr does, end the input.

    Without the padding the last partial chunk never reaches the encoder and the last
    word is often lost (more so at chunk 32), which would understate the model.
    """
    samples, rate = sf.read(str(path), dtype="float32", always_2d=True)
    samples = samples.mean(axis=1)
    stream = rec.create_stream()
    block = rate // 10
    for start in range(0, samples.size, block):
        stream.accept_waveform(rate, samples[start : start + block])
        while rec.is_ready(stream):
            rec.decode_stream(stream)
    stream.accept_waveform(rate, np.zeros(int(DEFAULT_TAIL_PADDING_S * rate), np.float32))
    stream.input_finished()
    while rec.is_ready(stream):
        rec.decode_stream(stream)
    return rec.get_result(stream).strip()


def normalise(text: str) -> str:
    """Upper case, letters/apostrophes/spaces only (LibriVox transcripts have <s> tags)."""
    text = re.sub(r"</?s>|\(.*?\)", " ", text).upper()
    text = re.sub(r"[^A-Z' ]+", " ", text)
    return " ".join(text.split())


def wer(refs: list[str], hyps: list[str]) -> float:
    return float(jiwer.wer(refs, hyps)) if refs else float("nan")


def evaluate_tts(rec: sherpa_onnx.OnlineRecognizer, manifest: Path) -> dict:
    rows = [json.loads(x) for x in manifest.read_text().splitlines() if x.strip()]
    groups: dict[str, tuple[list[str], list[str]]] = defaultdict(lambda: ([], []))
    examples = []
    for row in rows:
        ref = normalise(row["text"])
        hyp = normalise(transcribe(rec, manifest.parent / row["audio_filepath"]))
        seen = "seen" if row.get("seen_voice", True) else "heldout"
        for key in ("all", f"voices:{seen}", f"voice:{row.get('voice', '?')}"):
            groups[key][0].append(ref)
            groups[key][1].append(hyp)
        if len(examples) < 8:
            examples.append({"ref": ref, "hyp": hyp, "voice": row.get("voice")})
    return {
        "wer": {k: round(wer(*v), 4) for k, v in sorted(groups.items())},
        "utterances": {k: len(v[0]) for k, v in sorted(groups.items())},
        "examples": examples,
    }


def evaluate_librivox(rec: sherpa_onnx.OnlineRecognizer, folder: Path) -> dict:
    refs, hyps, examples = [], [], []
    for line in (folder / "transcription").read_text().splitlines():
        m = re.search(r"\(([^)]+)\)\s*$", line)
        if not m:
            continue
        ref = normalise(line)
        hyp = normalise(transcribe(rec, folder / f"{m.group(1)}.wav"))
        refs.append(ref)
        hyps.append(hyp)
        examples.append({"ref": ref, "hyp": hyp})
    return {"wer": round(wer(refs, hyps), 4), "examples": examples}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model-dir", type=Path, default=Path("models/tiny-en"))
    parser.add_argument("--chunk", type=int, default=16)
    parser.add_argument("--head", choices=("transducer", "ctc"), default="transducer")
    parser.add_argument("--test", type=Path, default=Path("build/tts/test/manifest.jsonl"))
    parser.add_argument("--librivox", type=Path, default=LIBRIVOX)
    parser.add_argument("--json", type=Path, default=None, help="also write the report here")
    args = parser.parse_args()
    np.set_printoptions(precision=3)
    rec = recognizer(args.model_dir, args.chunk, args.head)
    report: dict = {"model_dir": str(args.model_dir), "chunk": args.chunk, "head": args.head}
    report["tts_test"] = evaluate_tts(rec, args.test)
    if (args.librivox / "transcription").exists():
        report["librivox"] = evaluate_librivox(rec, args.librivox)
    text = json.dumps(report, indent=2)
    print(text)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
