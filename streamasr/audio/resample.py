"""Resampling in the core, for backends whose engine wants one rate and does not convert.

A streaming resampler (libsoxr through `soxr`) carries its filter state from block to block,
so the samples a model sees do not depend on how the audio was cut into feed blocks.
"""

from __future__ import annotations

import numpy as np


class StreamResampler:
    """Converts one stream's mono float32 blocks from `from_hz` to `to_hz`."""

    def __init__(self, from_hz: int, to_hz: int) -> None:
        import soxr

        self.from_hz = from_hz
        self.to_hz = to_hz
        self._stream = soxr.ResampleStream(from_hz, to_hz, 1, dtype="float32", quality="HQ")

    def __call__(self, samples: np.ndarray) -> np.ndarray:
        """The resampled block (may be shorter or empty while the filter fills)."""
        return self._stream.resample_chunk(np.ascontiguousarray(samples, np.float32))

    def flush(self) -> np.ndarray:
        """What the filter still holds, at end of input."""
        return self._stream.resample_chunk(np.zeros(0, np.float32), last=True)
