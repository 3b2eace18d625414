#!/usr/bin/env python3
"""Build the tiny random-weight NeMo FastConformer models that prove streaming == offline.

Why: the NeMo backend's central promise (a cache-aware encoder streamed chunk by chunk
computes exactly what it computes over the whole utterance) must be tested on a real NeMo
model in CI, and released models cannot be downloaded here (and are 100+ MB). These use
NeMo's own hybrid RNNT+CTC cache-aware FastConformer classes at a tiny size, random weights
from a fixed seed, and a small SentencePiece tokenizer trained on a few sentences.

Produces (under --out-dir, default ``models/``)::

    tiny-nemo-streaming/tiny-nemo-streaming.nemo   chunked_limited attention, causal convs,
                                                   look-aheads [70,13] [70,6] [70,1] [70,0]
    tiny-nemo-band/tiny-nemo-band.nemo             counter-example: regular (band)
                                                   attention [70,2], symmetric convolutions
    tiny-nemo-noncausal/tiny-nemo-noncausal.nemo   counter-example: chunked_limited attention
                                                   as above, but symmetric convolutions

Usage::

    pip install -c <(echo torch==2.13.0) '.[gpu]'
    python scripts/make_tiny_nemo_models.py            # writes models/tiny-nemo-*/
    python scripts/make_tiny_nemo_models.py --print-hash   # sha256 of every weight tensor

The architecture follows NeMo's
``fastconformer_hybrid_transducer_ctc_bpe_streaming.yaml`` (FastConformer, dw_striding 8x
causal subsampling, rel_pos attention, kernel 9, layer-norm convolutions, hybrid RNNT + CTC)
with d_model 96, 3 layers, 2 heads and prediction/joint width 64. Dither and SpecAugment
are off: the models are never trained, and features must be a pure function of the audio.
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import random
import tempfile
from pathlib import Path

SEED = 20261201
VOCAB_SIZE = 96
D_MODEL = 96
N_LAYERS = 3
LOOKAHEADS = [[70, 13], [70, 6], [70, 1], [70, 0]]
BAND_CONTEXT = [70, 2]
# (folder, band attention, causal convolutions)
MODELS = (
    ("tiny-nemo-streaming", False, True),
    ("tiny-nemo-band", True, False),
    ("tiny-nemo-noncausal", False, False),
)

# SentencePiece needs a little text to learn pieces from; any English will do.
TOKENIZER_TEXT = """\
early see create show life and then mother walk seven nine
the quick brown fox jumps over the lazy dog
streaming speech recognition shows words as they are spoken
a chunk of audio goes into the encoder and text comes out
look ahead is the future audio an output may depend on
she sells sea shells by the sea shore every summer morning
one two three four five six seven eight nine ten eleven twelve
how much wood would a woodchuck chuck if a woodchuck could chuck wood
captions for a live microphone need low latency and honest timing
the cache keeps what the next chunk needs and nothing else
"""


def model_config(tokenizer_dir: Path, band: bool, causal_conv: bool | None = None) -> dict:
    """The hybrid cache-aware FastConformer config, as NeMo's example yaml lays it out.

    `band`: regular band attention [70,2] (else chunked_limited at every LOOKAHEADS);
    `causal_conv`: causal convolutions (default: not for the band model).
    """
    if causal_conv is None:
        causal_conv = not band
    encoder = {
        "_target_": "nemo.collections.asr.modules.ConformerEncoder",
        "feat_in": 80,
        "feat_out": -1,
        "n_layers": N_LAYERS,
        "d_model": D_MODEL,
        "use_bias": True,
        "subsampling": "dw_striding",
        "subsampling_factor": 8,
        "subsampling_conv_channels": 32,
        "causal_downsampling": True,
        "ff_expansion_factor": 2,
        "self_attention_model": "rel_pos",
        "n_heads": 2,
        "att_context_size": [BAND_CONTEXT] if band else LOOKAHEADS,
        "att_context_style": "regular" if band else "chunked_limited",
        "att_context_probs": None,
        "xscaling": True,
        "pos_emb_max_len": 5000,
        "conv_kernel_size": 9,
        "conv_norm_type": "layer_norm",
        # a counter-example sees 4 future steps per layer through its convolutions
        "conv_context_size": "causal" if causal_conv else None,
        "dropout": 0.1,
        "dropout_pre_encoder": 0.1,
        "dropout_emb": 0.0,
        "dropout_att": 0.1,
    }
    return {
        "sample_rate": 16000,
        "compute_eval_loss": False,
        "log_prediction": False,
        "skip_nan_grad": False,
        "model_defaults": {"enc_hidden": D_MODEL, "pred_hidden": 64, "joint_hidden": 64},
        "train_ds": None,
        "validation_ds": None,
        "test_ds": None,
        "tokenizer": {"dir": str(tokenizer_dir), "type": "bpe"},
        "preprocessor": {
            "_target_": "nemo.collections.asr.modules.AudioToMelSpectrogramPreprocessor",
            "sample_rate": 16000,
            "normalize": "NA",
            "window_size": 0.025,
            "window_stride": 0.01,
            "window": "hann",
            "features": 80,
            "n_fft": 512,
            "frame_splicing": 1,
            "dither": 0.0,
            "pad_to": 0,
        },
        "spec_augment": None,
        "encoder": encoder,
        "decoder": {
            "_target_": "nemo.collections.asr.modules.RNNTDecoder",
            "normalization_mode": None,
            "random_state_sampling": False,
            "blank_as_pad": True,
            "prednet": {"pred_hidden": 64, "pred_rnn_layers": 1, "t_max": None, "dropout": 0.2},
        },
        "joint": {
            "_target_": "nemo.collections.asr.modules.RNNTJoint",
            "log_softmax": None,
            "preserve_memory": False,
            "fuse_loss_wer": False,
            "jointnet": {"joint_hidden": 64, "activation": "relu", "dropout": 0.2},
        },
        "decoding": {"strategy": "greedy_batch", "greedy": {"max_symbols": 10}},
        "aux_ctc": {
            "ctc_loss_weight": 0.3,
            "use_cer": False,
            "ctc_reduction": "mean_batch",
            "decoder": {
                "_target_": "nemo.collections.asr.modules.ConvASRDecoder",
                "feat_in": None,
                "num_classes": -1,
                "vocabulary": [],
            },
            "decoding": {"strategy": "greedy"},
        },
        "interctc": {"loss_weights": [], "apply_at_layers": []},
        "loss": {"loss_name": "default"},
        "optim": {"name": "adamw", "lr": 1e-3},
    }


def train_tokenizer(
    out_dir: Path,
    text: str = TOKENIZER_TEXT,
    vocab_size: int = VOCAB_SIZE,
    seed_sentencepiece_size: int | None = 1000,
) -> Path:
    """A SentencePiece BPE model over `text`, written as out_dir/tokenizer.model (and the
    vocab.txt NeMo's tokenizer setup registers beside it). `seed_sentencepiece_size` None:
    SentencePiece's own default."""
    import sentencepiece as spm

    corpus = out_dir / "text.txt"
    corpus.write_text(text)
    extra = {} if seed_sentencepiece_size is None else {
        "seed_sentencepiece_size": seed_sentencepiece_size
    }
    spm.SentencePieceTrainer.train(
        input=str(corpus),
        model_prefix=str(out_dir / "tokenizer"),
        vocab_size=vocab_size,
        model_type="bpe",
        character_coverage=1.0,
        num_threads=1,
        minloglevel=2,
        **extra,
    )
    model = spm.SentencePieceProcessor(model_file=str(out_dir / "tokenizer.model"))
    pieces = [model.id_to_piece(i) for i in range(model.get_piece_size())]
    (out_dir / "vocab.txt").write_text("\n".join(pieces) + "\n")
    return out_dir


def build(tokenizer_dir: Path, band: bool, causal_conv: bool | None = None):
    """A fresh model with weights drawn from SEED, in eval mode."""
    import numpy as np
    import torch
    from nemo.collections.asr.models import EncDecHybridRNNTCTCBPEModel
    from omegaconf import OmegaConf

    random.seed(SEED)
    np.random.seed(SEED)
    torch.manual_seed(SEED)
    cfg = OmegaConf.create(model_config(tokenizer_dir, band, causal_conv))
    model = EncDecHybridRNNTCTCBPEModel(cfg=cfg)
    return model.eval()


def weights_sha256(model) -> str:
    """One hash over every parameter and buffer, in name order."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    default_out = Path(__file__).resolve().parents[1] / "models"
    parser.add_argument("--out-dir", type=Path, default=default_out)
    parser.add_argument("--print-hash", action="store_true", help="print weight hashes only")
    args = parser.parse_args()
    logging.getLogger("nemo_logger").setLevel(logging.ERROR)

    with tempfile.TemporaryDirectory() as tmp:
        tokenizer_dir = train_tokenizer(Path(tmp))
        for name, band, causal_conv in MODELS:
            model = build(tokenizer_dir, band, causal_conv)
            params = sum(p.numel() for p in model.parameters())
            if args.print_hash:
                print(f"{name} {weights_sha256(model)}")
                continue
            out = args.out_dir / name / f"{name}.nemo"
            out.parent.mkdir(parents=True, exist_ok=True)
            model.save_to(str(out))
            size_mb = out.stat().st_size / 1e6
            print(f"{out}: {params} parameters, {size_mb:.1f} MB, weights {weights_sha256(model)}")


if __name__ == "__main__":
    main()
