#!/usr/bin/env python3
"""Build the tiny random-weight streaming Zipformer2 models used by the tests.

Why: tests must run the real engine (sherpa-onnx) on a real streaming Zipformer2
export, and released models cannot be downloaded here (and are 70+ MB). These
models use the real architecture, built and exported by the PyPI ``zipformer``
package's own code, with random weights from a fixed seed. Their text output is
meaningless but deterministic.

Produces (under --out-dir, default ``models/``)::

    tiny-random-transducer/  encoder/decoder/joiner for chunk 16 and chunk 32 (left 64),
                             the same weights exported twice; tokens.txt
    tiny-random-ctc/         one streaming CTC model, chunk 16 left 64; tokens.txt

Usage::

    pip install --no-deps zipformer==0.1.3 simple-sentencepiece onnxconverter_common
    pip install importlib_resources kaldifst
    python scripts/make_test_models.py            # writes models/tiny-random-*/
    python scripts/make_test_models.py --check    # and decodes a test wav with sherpa-onnx
    python scripts/make_test_models.py --size full   # full-size exports into build/full/

``--size full`` builds the released en-2023-06-26 architecture (the package's defaults,
~66 M parameters, 500 tokens) with random weights into ``build/full/full-random-en``:
chunk 16 at left 64 and 128 and chunk 32 at left 64, fp32 and int8, laid out like the
release. It is for measuring speed and memory at real size, takes minutes on 2 cores and
~1.3 GB of disk, and is not committed; it is reused if already there. The package builds
only Zipformer2, so the 20 M en-20M model (a first-generation Zipformer) is not built.
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import shutil
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import zf_compat  # noqa: E402

zf_compat.install()

from zipformer.bin import export as zf_export  # noqa: E402
from zipformer.bin.train import get_model  # noqa: E402
from zipformer.utils import AttributeDict  # noqa: E402

SEED = 20261130
LEFT_CONTEXT = 64
TRANSDUCER_CHUNKS = (16, 32)
TINY_NAMES = ("tiny-random-transducer", "tiny-random-ctc")
CTC_CHUNK = 16

# Character vocabulary. sherpa-onnx concatenates token strings and turns the
# SentencePiece word-boundary mark U+2581 into a space (and strips the leading
# one), so "▁" is the word separator of this char vocabulary.
WORD_BOUNDARY = "\u2581"
TOKENS: list[str] = (
    ["<blk>", WORD_BOUNDARY] + [chr(c) for c in range(ord("A"), ord("Z") + 1)] + ["'"]
)

# 6 stacks x 1 layer, 32-dim: the real Zipformer2 layout at a tiny size.
TINY_ARCH: dict[str, str | int] = {
    "num_encoder_layers": "1,1,1,1,1,1",
    "downsampling_factor": "1,2,4,8,4,2",
    "feedforward_dim": "64,64,64,64,64,64",
    "num_heads": "2,2,2,2,2,2",
    "encoder_dim": "32,32,32,32,32,32",
    "encoder_unmasked_dim": "32,32,32,32,32,32",
    "query_head_dim": "16",
    "value_head_dim": "8",
    "pos_head_dim": "4",
    "pos_dim": 16,
    "cnn_module_kernel": "31,31,15,15,15,31",
    "decoder_dim": 32,
    "joiner_dim": 32,
    "context_size": 2,
}


# The package's defaults: the architecture of the released en-2023-06-26 model.
FULL_ARCH: dict[str, str | int] = {
    "num_encoder_layers": "2,2,3,4,3,2",
    "downsampling_factor": "1,2,4,8,4,2",
    "feedforward_dim": "512,768,1024,1536,1024,768",
    "num_heads": "4,4,4,8,4,4",
    "encoder_dim": "192,256,384,512,384,256",
    "encoder_unmasked_dim": "192,192,256,256,256,192",
    "query_head_dim": "32",
    "value_head_dim": "12",
    "pos_head_dim": "4",
    "pos_dim": 48,
    "cnn_module_kernel": "31,31,15,15,15,31",
    "decoder_dim": 512,
    "joiner_dim": 512,
    "context_size": 2,
}
FULL_VOCAB_SIZE = 500  # the released model's BPE vocabulary size
FULL_EXPORTS = ((16, 64), (16, 128), (32, 64))  # (chunk, left), as the release ships them
FULL_NAME = "full-random-en"


def write_tokens(path: Path, tokens: list[str] = TOKENS) -> None:
    """Write tokens.txt in sherpa-onnx format: '<symbol> <id>' per line."""
    path.write_text("".join(f"{tok} {i}\n" for i, tok in enumerate(tokens)), encoding="utf-8")


def model_params(
    *,
    use_transducer: bool,
    use_ctc: bool,
    chunk: int,
    left: int,
    arch: dict[str, str | int] = TINY_ARCH,
    vocab_size: int = len(TOKENS),
) -> AttributeDict:
    """The parameter dict the package's get_model() and exporter expect."""
    params = AttributeDict(
        {
            "feature_dim": 80,
            "sample_rate": 16000,
            "causal": True,
            "chunk_size": str(chunk),
            "left_context_frames": str(left),
            "use_transducer": use_transducer,
            "use_ctc": use_ctc,
            "use_cr_ctc": False,
            "use_attention_decoder": False,
            "attention_decoder_dim": 32,
            "attention_decoder_num_layers": 1,
            "attention_decoder_attention_dim": 32,
            "attention_decoder_num_heads": 2,
            "attention_decoder_feedforward_dim": 64,
            "blank_id": 0,
            "sos_id": 0,
            "eos_id": 0,
            "ignore_id": -1,
            "label_smoothing": 0.1,
            "vocab_size": vocab_size,
            # exporter options
            "dynamic_batch": True,
            "use_external_data": False,
            "export_fp16": False,
            "enable_int8_quantization": False,
        }
    )
    params.update(arch)
    return params


def set_streaming_config(model: torch.nn.Module, chunk: int, left: int) -> None:
    """Fix the chunk/left context the exporter bakes into the ONNX graph."""
    model.encoder.chunk_size = (chunk,)
    model.encoder.left_context_frames = (left,)


def export_streaming(
    model: torch.nn.Module,
    params: AttributeDict,
    out_dir: Path,
    chunk: int,
    left: int,
    head: str = "transducer",
    epoch: int = 0,
) -> list[Path]:
    """Export one chunk/left setting with the package exporter into out_dir.

    head "transducer" writes encoder/decoder/joiner, "ctc" one model file; names follow
    sherpa-onnx's `<role>-epoch-E-avg-1-chunk-C-left-L.onnx`. Returns the files written.
    """
    exporter = (
        zf_export.export_onnx_streaming_transducer
        if head == "transducer"
        else zf_export.export_onnx_streaming_ctc
    )
    set_streaming_config(model, chunk, left)
    written = []
    with tempfile.TemporaryDirectory() as tmp:
        params.exp_dir = Path(tmp)
        params.suffix = f"epoch-{epoch}-avg-1-chunk-{chunk}-left-{left}"
        with torch.no_grad():
            exporter(params, model)
        for f in sorted(Path(tmp).glob("*.onnx")):
            target = out_dir / f.name
            shutil.move(str(f), target)
            written.append(target)
    return written


def build_random(params: AttributeDict, seed: int) -> torch.nn.Module:
    """Build the model with the package's get_model() from a fixed seed."""
    zf_compat.fix_random_seed(seed)
    model = get_model(params)
    model.eval()
    return model


def perturb_every_parameter(model: torch.nn.Module, seed: int, scale: float = 0.05) -> None:
    """Give every layer its own weights.

    The package builds each encoder stack by deep-copying one layer, so freshly built
    layers of a stack are identical; the ONNX exporter then stores each shared tensor once
    (a 86 MB instead of 261 MB encoder) and int8 quantisation skips those MatMuls. Adding
    independent noise to every parameter makes the export the size of a trained model.
    """
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in model.parameters():
            noise = torch.randn(param.shape, generator=gen, dtype=param.dtype)
            param.add_(noise * scale * (param.abs().mean() + 1e-3))


def make_full(out_dir: Path, seed: int) -> list[Path]:
    """Full-size random exports laid out like the release; skipped when already complete."""
    out_dir.mkdir(parents=True, exist_ok=True)
    wanted = [
        out_dir / f"{role}-epoch-0-avg-1-chunk-{chunk}-left-{left}{prec}.onnx"
        for chunk, left in FULL_EXPORTS
        for role, prec in (
            ("encoder", ""), ("encoder", ".int8"), ("decoder", ""),
            ("joiner", ""), ("joiner", ".int8"),
        )
    ]
    if all(p.is_file() for p in wanted) and (out_dir / "tokens.txt").is_file():
        print(f"reusing {out_dir}")
        check_full_sizes(out_dir)
        return wanted
    params = model_params(
        use_transducer=True, use_ctc=False, chunk=FULL_EXPORTS[0][0], left=FULL_EXPORTS[0][1],
        arch=FULL_ARCH, vocab_size=FULL_VOCAB_SIZE,
    )
    params.enable_int8_quantization = True
    model = build_random(params, seed)
    perturb_every_parameter(model, seed + 2)
    for chunk, left in FULL_EXPORTS:
        print(f"exporting chunk {chunk} left {left} ...", flush=True)
        export_streaming(model, params, out_dir, chunk, left)
    # Tokens in sherpa-onnx format; a random model's text is meaningless anyway.
    full_tokens = TOKENS + [f"{WORD_BOUNDARY}W{i}" for i in range(FULL_VOCAB_SIZE - len(TOKENS))]
    write_tokens(out_dir / "tokens.txt", full_tokens)
    check_full_sizes(out_dir)
    return wanted


def check_full_sizes(out_dir: Path) -> None:
    """Shared (deduplicated) layer weights show as a small fp32 encoder and an int8 one that
    is not smaller: refuse such an export rather than measure the wrong model."""
    for fp32 in sorted(p for p in out_dir.glob("encoder-*.onnx") if ".int8." not in p.name):
        int8 = fp32.with_name(fp32.name.replace(".onnx", ".int8.onnx"))
        fp32_mb, int8_mb = fp32.stat().st_size / 1e6, int8.stat().st_size / 1e6
        if fp32_mb < 200 or int8_mb >= fp32_mb / 2:
            raise SystemExit(
                f"{fp32.name}: {fp32_mb:.0f} MB fp32 / {int8_mb:.0f} MB int8; expected ~261 / "
                "~70 MB. Layers share weights; perturb_every_parameter() did not run?"
            )


def make_transducer(out_dir: Path, seed: int) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    params = model_params(
        use_transducer=True, use_ctc=False, chunk=TRANSDUCER_CHUNKS[0], left=LEFT_CONTEXT
    )
    model = build_random(params, seed)
    for chunk in TRANSDUCER_CHUNKS:
        export_streaming(model, params, out_dir, chunk, LEFT_CONTEXT)
    write_tokens(out_dir / "tokens.txt")


def make_ctc(out_dir: Path, seed: int) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    params = model_params(use_transducer=False, use_ctc=True, chunk=CTC_CHUNK, left=LEFT_CONTEXT)
    model = build_random(params, seed + 1)
    export_streaming(model, params, out_dir, CTC_CHUNK, LEFT_CONTEXT, head="ctc")
    write_tokens(out_dir / "tokens.txt")


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def check(models_dir: Path, wav: Path) -> None:
    """Stream a wav through real sherpa-onnx with each export and print the text."""
    import sherpa_onnx
    import soundfile as sf

    samples, rate = sf.read(str(wav), dtype="float32", always_2d=True)
    samples = samples.mean(axis=1)
    tdir = models_dir / "tiny-random-transducer"
    recognizers = {}
    for chunk in TRANSDUCER_CHUNKS:
        suffix = f"epoch-0-avg-1-chunk-{chunk}-left-{LEFT_CONTEXT}"
        recognizers[f"transducer chunk {chunk}"] = sherpa_onnx.OnlineRecognizer.from_transducer(
            tokens=str(tdir / "tokens.txt"),
            encoder=str(tdir / f"encoder-{suffix}.onnx"),
            decoder=str(tdir / f"decoder-{suffix}.onnx"),
            joiner=str(tdir / f"joiner-{suffix}.onnx"),
            num_threads=1,
        )
    cdir = models_dir / "tiny-random-ctc"
    recognizers[f"ctc chunk {CTC_CHUNK}"] = sherpa_onnx.OnlineRecognizer.from_zipformer2_ctc(
        tokens=str(cdir / "tokens.txt"),
        model=str(cdir / f"ctc-epoch-0-avg-1-chunk-{CTC_CHUNK}-left-{LEFT_CONTEXT}.onnx"),
        num_threads=1,
    )
    for name, rec in recognizers.items():
        stream = rec.create_stream()
        stream.accept_waveform(rate, samples)
        stream.input_finished()
        while rec.is_ready(stream):
            rec.decode_stream(stream)
        result = rec.get_result_all(stream)
        print(f"{name}: text={result.text!r} tokens={len(result.tokens)}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--out-dir", type=Path, default=None,
        help="where to write (default: models/, or build/full/ with --size full)",
    )
    parser.add_argument(
        "--size", choices=("tiny", "full"), default="tiny",
        help="tiny: the committed test models; full: the released architecture, not committed",
    )
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument(
        "--only", action="append", choices=TINY_NAMES, default=None, metavar="NAME",
        help="make only this tiny model (repeatable; default: both); the test suite checks one",
    )
    parser.add_argument(
        "--check",
        type=Path,
        default=None,
        metavar="WAV",
        help="decode WAV with each model afterwards",
    )
    args = parser.parse_args()
    if args.only and args.check is not None:
        parser.error("--check decodes with both tiny models; leave out --only")
    logging.basicConfig(level=logging.WARNING)
    torch.set_num_threads(1)
    if args.size == "full":
        out = (args.out_dir or Path("build") / "full") / FULL_NAME
        for f in make_full(out, args.seed):
            print(f"{f.stat().st_size:>11} bytes  {f}")
        return
    args.out_dir = args.out_dir or Path("models")

    wanted = args.only or list(TINY_NAMES)
    if "tiny-random-transducer" in wanted:
        make_transducer(args.out_dir / "tiny-random-transducer", args.seed)
    if "tiny-random-ctc" in wanted:
        make_ctc(args.out_dir / "tiny-random-ctc", args.seed)
    for sub in wanted:
        for f in sorted((args.out_dir / sub).iterdir()):
            print(f"{sha256(f)}  {sub}/{f.name}  ({f.stat().st_size} bytes)")
    if args.check is not None:
        check(args.out_dir, args.check)


if __name__ == "__main__":
    main()
