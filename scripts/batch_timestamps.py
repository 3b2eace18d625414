"""Does batched decoding in sherpa-onnx stamp tokens differently? Bare sherpa-onnx, no streamasr.

Each WAV is decoded twice by the same recognizer: one stream at a time (`decode_stream`),
then all of them together (`decode_streams` over every ready stream), each with 0.66 s of
tail padding and `input_finished()`. The script prints, per file, whether `text`, `tokens`
and `timestamps` of `get_result_all()` agree, and the differing timestamps when they do not.
As a control it also batches copies of the first file with itself: identical inputs give
identical per-batch quantisation scales.

    python scripts/batch_timestamps.py models/tiny-en 32 a.wav b.wav c.wav d.wav

Why: int8 exports use DynamicQuantizeLinear, which picks one activation scale for the whole
tensor, batch dimension included, so the other streams in a batch shift a stream's numbers
slightly. The count of such nodes in the encoder is printed too; fp32 exports have none and
batch exactly.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import soundfile as sf

TAIL_PADDING_S = 0.66


def find(model: Path, kind: str, chunk: int) -> Path:
    """The encoder/decoder/joiner file of that chunk, int8 preferred."""
    found = sorted(model.glob(f"{kind}-*chunk-{chunk}-*.onnx"))
    if not found:
        sys.exit(f"{model}: no {kind} file for chunk {chunk}")
    int8 = [p for p in found if p.name.endswith(".int8.onnx")]
    return (int8 or found)[0]


def quantise_nodes(path: Path) -> int:
    """DynamicQuantizeLinear nodes in an ONNX graph."""
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph
    return sum(1 for node in graph.node if node.op_type == "DynamicQuantizeLinear")


def decode(recognizer, audio: list[np.ndarray], batched: bool) -> list:
    """Results of all clips, decoded one by one or in batches of every ready stream."""
    pad = np.zeros(int(TAIL_PADDING_S * 16000), dtype=np.float32)
    streams = [recognizer.create_stream() for _ in audio]
    for stream, samples in zip(streams, audio, strict=True):
        stream.accept_waveform(16000, np.concatenate([samples, pad]))
        stream.input_finished()
    if batched:
        while ready := [s for s in streams if recognizer.is_ready(s)]:
            recognizer.decode_streams(ready)
    else:
        for stream in streams:
            while recognizer.is_ready(stream):
                recognizer.decode_stream(stream)
    return [recognizer.get_result_all(s) for s in streams]


def compare(names: list[str], alone: list, together: list) -> int:
    """Print one line per clip; return how many differ in any field."""
    differ = 0
    for name, a, b in zip(names, alone, together, strict=True):
        fields = [
            field
            for field in ("text", "tokens", "timestamps")
            if list(np.atleast_1d(getattr(a, field))) != list(np.atleast_1d(getattr(b, field)))
        ]
        print(f"{name}: {'differs in ' + ', '.join(fields) if fields else 'identical'}")
        if "timestamps" in fields:
            pairs = zip(a.timestamps, b.timestamps, strict=False)  # lengths differ with tokens
            for index, (x, y) in enumerate(pairs):
                if x != y:
                    token = a.tokens[index]
                    print(f"  token {index} {token!r}: alone {x:.2f} s, batched {y:.2f} s")
        differ += bool(fields)
    return differ


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("model", type=Path, help="sherpa-onnx streaming transducer folder")
    parser.add_argument("chunk", type=int, help="chunk in 50 Hz frames (16, 32)")
    parser.add_argument("wavs", nargs="+", help="16 kHz mono WAV files")
    args = parser.parse_args()
    import sherpa_onnx

    encoder = find(args.model, "encoder", args.chunk)
    recognizer = sherpa_onnx.OnlineRecognizer.from_transducer(
        encoder=str(encoder),
        decoder=str(find(args.model, "decoder", args.chunk)),
        joiner=str(find(args.model, "joiner", args.chunk)),
        tokens=str(args.model / "tokens.txt"),
        num_threads=1,
        enable_endpoint_detection=True,
    )
    print(f"{encoder.name}: {quantise_nodes(encoder)} DynamicQuantizeLinear nodes")
    audio = []
    for wav in args.wavs:
        samples, rate = sf.read(wav, dtype="float32")
        if rate != 16000 or samples.ndim != 1:
            sys.exit(f"{wav}: give 16 kHz mono audio")
        audio.append(samples)
    names = [Path(w).name for w in args.wavs]
    print("one stream at a time vs. all streams batched:")
    differ = compare(names, decode(recognizer, audio, False), decode(recognizer, audio, True))
    print("control, the first clip batched with copies of itself:")
    copies = [audio[0]] * len(audio)
    alone, together = decode(recognizer, copies, False), decode(recognizer, copies, True)
    compare([names[0]] * len(audio), alone, together)
    print(f"{differ} of {len(audio)} clips differ when batched")


if __name__ == "__main__":
    main()
