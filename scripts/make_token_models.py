#!/usr/bin/env python3
"""Build tiny random-weight transducers, one per tokens.txt style released models use.

Why: Chinese, bilingual and byte-level models break text assembly in ways an English
character model never shows (half characters, spacing at a Chinese/English boundary,
hotwords that cannot be encoded). These models have the same tiny architecture as
``tiny-random-transducer`` (built and exported by ``make_test_models.py``'s own functions),
chunk 16 / left 64 only, and differ in their vocabulary:

    tiny-random-cjkchar/      Chinese characters, one per token (like the zh releases)
    tiny-random-cjkchar-bpe/  Chinese characters plus upper-case English BPE pieces, like the
                              bilingual zh-en release; bpe.vocab for hotwords
    tiny-random-bpe/          ``▁``-prefixed English BPE pieces; bpe.vocab for hotwords
    tiny-random-byte/         byte-fallback pieces ``<0x00>``..``<0xFF>`` (rotated) plus a few
                              BPE pieces

The encoder is built first from the same seed as tiny-random-transducer, so its weights
and export are identical in all of them (git stores the file once).

Usage (same packages as make_test_models.py)::

    python scripts/make_token_models.py              # writes models/tiny-random-{...}/
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_test_models as mtm  # noqa: E402

CHUNK = 16
B = mtm.WORD_BOUNDARY

# Characters of the Mandarin test sentences and hotwords, plus common ones.
CJK_CHARS = list(
    "你好世界今天气很我们是的了不在有人这中大来上个国到说时要就出会可也和对生能而子那得于着下"
    "自之年过发后作里用道行所然家种事成方多经么去法学如都同现当没动面起看定天分还进好小部其些主样"
    "理心她本前开但因只从想实日军者意无力它与长把机十民第公此已工使情明性知全三又关点正业外将两高间"
)
# Upper-case pieces like the bilingual model's BPE half.
EN_PIECES = [
    f"{B}THE",
    f"{B}HELLO",
    f"{B}WORLD",
    f"{B}A",
    f"{B}I",
    f"{B}YOU",
    f"{B}SPEECH",
    f"{B}RE",
    f"{B}CO",
    f"{B}S",
    f"{B}T",
    f"{B}W",
    f"{B}HE",
    "ING",
    "ED",
    "ER",
    "LLO",
    "S",
    "T",
    "A",
    "E",
    "O",
    "N",
    "R",
    "L",
    "D",
    "G",
    "NITION",
]
CJK_VOCAB = ["<blk>", "<unk>", *dict.fromkeys(CJK_CHARS)]
MIXED_VOCAB = ["<blk>", "<unk>", *dict.fromkeys(CJK_CHARS[:60]), *EN_PIECES]
BPE_VOCAB = ["<blk>", "<unk>", *EN_PIECES, f"{B}", *(chr(c) for c in range(ord("B"), ord("Z") + 1))]
BPE_VOCAB = list(dict.fromkeys(BPE_VOCAB))
# The byte pieces are listed rotated, so that the token this random model emits most is a
# UTF-8 lead byte (0xE4, as in most Chinese characters): its output is then mostly bytes
# that never complete, the harshest case for text assembly.
BYTE_ROTATION = 0xC5
BYTE_VOCAB = [
    "<blk>",
    "<unk>",
    *(f"<0x{(b + BYTE_ROTATION) % 256:02X}>" for b in range(256)),
    f"{B}THE",
    f"{B}A",
    "ING",
    f"{B}",
]

MODELS: dict[str, list[str]] = {
    "tiny-random-cjkchar": CJK_VOCAB,
    "tiny-random-cjkchar-bpe": MIXED_VOCAB,
    "tiny-random-bpe": BPE_VOCAB,
    "tiny-random-byte": BYTE_VOCAB,
}
WITH_BPE_VOCAB = ("tiny-random-cjkchar-bpe", "tiny-random-bpe")


def write_bpe_vocab(path: Path, tokens: list[str]) -> None:
    """sentencepiece-style ``piece<TAB>score``: longer pieces score higher, like BPE merges."""
    pieces = [t for t in tokens if not (t.startswith("<") and t.endswith(">"))]
    pieces = [p for p in pieces if all(ord(c) < 0x2E80 for c in p)]  # English pieces only
    path.write_text(
        "".join(f"{p}\t{-1.0 / max(len(p), 1):.4f}\n" for p in pieces), encoding="utf-8"
    )


def make(out_dir: Path, name: str, tokens: list[str], seed: int) -> list[Path]:
    """Export one chunk-16 transducer with the vocabulary `tokens` into out_dir/name."""
    target = out_dir / name
    target.mkdir(parents=True, exist_ok=True)
    params = mtm.model_params(
        use_transducer=True,
        use_ctc=False,
        chunk=CHUNK,
        left=mtm.LEFT_CONTEXT,
        vocab_size=len(tokens),
    )
    model = mtm.build_random(params, seed)
    written = mtm.export_streaming(model, params, target, CHUNK, mtm.LEFT_CONTEXT)
    mtm.write_tokens(target / "tokens.txt", tokens)
    written.append(target / "tokens.txt")
    if name in WITH_BPE_VOCAB:
        write_bpe_vocab(target / "bpe.vocab", tokens)
        written.append(target / "bpe.vocab")
    return written


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out-dir", type=Path, default=Path("models"), help="parent folder")
    parser.add_argument("--seed", type=int, default=mtm.SEED, help="weights seed")
    parser.add_argument(
        "--only", action="append", choices=sorted(MODELS), default=None, metavar="NAME",
        help="make only this model (repeatable; default: all); the test suite checks one",
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    torch.set_num_threads(1)
    for name, tokens in MODELS.items():
        if args.only and name not in args.only:
            continue
        for path in sorted(make(args.out_dir, name, tokens, args.seed)):
            print(f"{mtm.sha256(path)}  {name}/{path.name}  ({path.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
