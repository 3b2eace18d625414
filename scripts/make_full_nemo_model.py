#!/usr/bin/env python3
"""Build a full-size random-weight NeMo FastConformer hybrid, the released streaming model's shape.

Why: the NeMo engine's cost at real size (what `scripts/perf_nemo.py` compares against a bare
NeMo loop) depends on the architecture, not on what the weights learned, and the released
``stt_en_fastconformer_hybrid_large_streaming_multi`` cannot be downloaded here. This builds
its architecture from NeMo's ``fastconformer_hybrid_transducer_ctc_bpe_streaming.yaml`` at the
released size: 17 layers, d_model 512, 8 heads, feed-forward x4, 256 subsampling channels,
kernel 9, prediction and joint width 640, a 1024-piece SentencePiece BPE tokenizer, look-aheads
[70,13] [70,6] [70,1] [70,0]; about 114.8 M parameters. Weights are drawn from a fixed seed,
so the file is the same on every run.

The weights are the random init, as in the tiny models. Its RNNT joint is degenerate: on any
audio it emits the same few pieces, the maximum symbols per frame (10) on every frame, so
greedy decoding weighs more in a step than in a trained model (which emits a few pieces per
second). A shift of the blank logit does not help: emission flips from every frame to none.

    pip install -c <(echo torch==2.13.0) '.[gpu]'
    python scripts/make_full_nemo_model.py      # build/full/full-random-nemo/full-random-nemo.nemo

Not committed (about 460 MB); `scripts/perf_nemo.py` builds it when it is missing.
"""

from __future__ import annotations

import argparse
import logging
import random
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import make_tiny_nemo_models as tiny_models  # noqa: E402
from make_tiny_nemo_models import LOOKAHEADS, SEED, model_config, weights_sha256  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "build" / "full" / "full-random-nemo" / "full-random-nemo.nemo"
VOCAB_SIZE = 1024
D_MODEL = 512
N_LAYERS = 17
N_HEADS = 8
PRED_HIDDEN = 640

SYLLABLES = (
    "a e i o u ba be bi bo bu ca ce ci co cu da de di do du fa fe fi fo fu ga ge gi go gu "
    "ha he hi ho hu ka ke ki ko ku la le li lo lu ma me mi mo mu na ne ni no nu pa pe pi po "
    "pu ra re ri ro ru sa se si so su ta te ti to tu va ve vi vo vu wa we wi wo wu ya ye yo "
    "za ze zi zo zu th sh ch st tr pr str ing ed er an en in on un"
).split()


def tokenizer_text(seed: int, lines: int = 4000) -> str:
    """Seeded pseudo-words: enough distinct text for SentencePiece to learn 1024 BPE pieces."""
    rng = random.Random(seed)
    words = ["".join(rng.choices(SYLLABLES, k=rng.randint(1, 4))) for _ in range(6000)]
    return "\n".join(" ".join(rng.choices(words, k=12)) for _ in range(lines)) + "\n"


def train_tokenizer(out_dir: Path) -> Path:
    """A VOCAB_SIZE-piece SentencePiece BPE model (and NeMo's vocab.txt) in out_dir."""
    return tiny_models.train_tokenizer(
        out_dir, tokenizer_text(SEED), VOCAB_SIZE, seed_sentencepiece_size=None
    )


def full_config(tokenizer_dir: Path) -> dict:
    """The tiny script's config at the released model's size."""
    cfg = model_config(tokenizer_dir, band=False, causal_conv=True)
    cfg["encoder"].update({
        "n_layers": N_LAYERS, "d_model": D_MODEL, "n_heads": N_HEADS,
        "subsampling_conv_channels": 256, "ff_expansion_factor": 4,
        "att_context_size": LOOKAHEADS,
    })
    cfg["model_defaults"] = {
        "enc_hidden": D_MODEL, "pred_hidden": PRED_HIDDEN, "joint_hidden": PRED_HIDDEN,
    }
    cfg["decoder"]["prednet"]["pred_hidden"] = PRED_HIDDEN
    cfg["joint"]["jointnet"]["joint_hidden"] = PRED_HIDDEN
    return cfg


def build(tokenizer_dir: Path):
    """The model with weights drawn from SEED, in eval mode."""
    import numpy as np
    import torch
    from nemo.collections.asr.models import EncDecHybridRNNTCTCBPEModel
    from omegaconf import OmegaConf

    random.seed(SEED)
    np.random.seed(SEED)
    torch.manual_seed(SEED)
    model = EncDecHybridRNNTCTCBPEModel(cfg=OmegaConf.create(full_config(tokenizer_dir)))
    return model.eval()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="the .nemo to write")
    args = parser.parse_args()
    logging.getLogger("nemo_logger").setLevel(logging.ERROR)
    with tempfile.TemporaryDirectory() as tmp:
        model = build(train_tokenizer(Path(tmp)))
        params = sum(p.numel() for p in model.parameters())
        args.out.parent.mkdir(parents=True, exist_ok=True)
        model.save_to(str(args.out))
    size_mb = args.out.stat().st_size / 1e6
    print(f"{args.out}: {params / 1e6:.1f} M parameters, {size_mb:.0f} MB, "
          f"weights {weights_sha256(model)}")


if __name__ == "__main__":
    main()
