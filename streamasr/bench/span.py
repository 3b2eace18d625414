"""Speech onset and end of an utterance when the dataset gives no alignments.

Onset: `streamasr.onset.OnsetDetector`, the same detector the live display uses (first 10 ms
frame at or above -40 dBFS followed by at least 30 ms of such frames within 50 ms).
End: the end of the last 10 ms frame at or above the same threshold. Both see exactly the
samples fed to the engine, so they need no second pass over the file.
"""

from __future__ import annotations

import numpy as np

from streamasr.onset import FRAME_S, OnsetDetector, OnsetOptions


class SpanDetector:
    """Tracks the first and last speech frame of a whole utterance as audio streams in."""

    def __init__(self, sample_rate: int, options: OnsetOptions | None = None) -> None:
        options = options or OnsetOptions()
        self._onset = OnsetDetector(sample_rate, options)
        self._threshold = options.threshold_dbfs
        self._frame = max(1, round(FRAME_S * sample_rate))
        self._pending = np.zeros(0, dtype=np.float32)
        self._frames = 0
        self._last_loud: int | None = None

    @property
    def onset_s(self) -> float | None:
        """Detected speech onset in audio seconds (None: no speech found)."""
        return self._onset.onset_s

    @property
    def end_s(self) -> float | None:
        """End of the last loud frame in audio seconds (None: no loud frame)."""
        if self._last_loud is None:
            return None
        return round((self._last_loud + 1) * FRAME_S, 3)

    def feed(self, samples: np.ndarray) -> None:
        """Consume the next block of mono float32 samples."""
        self._onset.feed(samples)
        data = np.concatenate([self._pending, samples]) if len(self._pending) else samples
        whole = len(data) // self._frame
        if whole:
            frames = data[: whole * self._frame].reshape(whole, self._frame)
            rms = np.sqrt(np.mean(np.square(frames, dtype=np.float64), axis=1))
            loud = np.flatnonzero(20 * np.log10(np.maximum(rms, 1e-10)) >= self._threshold)
            if loud.size:
                self._last_loud = self._frames + int(loud[-1])
            self._frames += whole
        self._pending = data[whole * self._frame :].copy()
