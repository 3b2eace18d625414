"""Fbank features exactly as sherpa-onnx computes them for a streaming Zipformer.

Why: a model only works at inference if it was trained on the features the engine
computes. sherpa-onnx 2.0.1's ``OnlineRecognizer`` (see ``FeatureExtractorConfig``)
uses kaldi-native-fbank's ``OnlineFbank`` with: 16 kHz, 80 mel bins, dither 0,
``snip_edges=False``, ``low_freq=20``, ``high_freq=-400``, 25 ms/10 ms frames, povey
window; ``normalize_samples=True``, i.e. the float waveform in [-1, 1] is used as is
(it is *not* multiplied by 32768). We use the same library and options here.
"""

from __future__ import annotations

import kaldi_native_fbank as knf
import numpy as np

SAMPLE_RATE = 16000
NUM_BINS = 80


def fbank_options() -> knf.FbankOptions:
    """The options sherpa-onnx sets for zipformer models (FeatureExtractorConfig defaults)."""
    opts = knf.FbankOptions()
    opts.frame_opts.samp_freq = SAMPLE_RATE
    opts.frame_opts.dither = 0.0
    opts.frame_opts.snip_edges = False
    opts.frame_opts.frame_shift_ms = 10.0
    opts.frame_opts.frame_length_ms = 25.0
    opts.frame_opts.window_type = "povey"
    opts.frame_opts.remove_dc_offset = True
    opts.mel_opts.num_bins = NUM_BINS
    opts.mel_opts.low_freq = 20.0
    opts.mel_opts.high_freq = -400.0
    return opts


def compute_fbank(samples: np.ndarray, sample_rate: int = SAMPLE_RATE) -> np.ndarray:
    """(num_frames, 80) float32 log-mel features of mono float samples in [-1, 1]."""
    if sample_rate != SAMPLE_RATE:
        raise ValueError(f"expected {SAMPLE_RATE} Hz audio, got {sample_rate} Hz")
    fbank = knf.OnlineFbank(fbank_options())
    fbank.accept_waveform(SAMPLE_RATE, np.asarray(samples, dtype=np.float32).tolist())
    fbank.input_finished()
    n = fbank.num_frames_ready
    if n == 0:
        return np.zeros((0, NUM_BINS), dtype=np.float32)
    return np.stack([np.asarray(fbank.get_frame(i), dtype=np.float32) for i in range(n)])
