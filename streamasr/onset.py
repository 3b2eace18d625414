"""Speech-onset detection on the audio as it streams, for first-token latency.

Rule (documented in the README): audio is cut into 10 ms frames; speech starts at the first
frame whose RMS level is at least `threshold_dbfs` (default -40 dBFS) and that is followed by
enough loud frames to cover `min_speech_s` (default 30 ms) within the next 50 ms. It is
deliberately simple and deterministic; datasets that carry alignments override it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

FRAME_S = 0.01


@dataclass(frozen=True)
class OnsetOptions:
    """Threshold of the energy detector."""

    threshold_dbfs: float = -40.0
    min_speech_s: float = 0.03


class OnsetDetector:
    """Finds the first speech frame of each segment in streamed mono audio."""

    def __init__(self, sample_rate: int, options: OnsetOptions = OnsetOptions()) -> None:
        self.sample_rate = sample_rate
        self.options = options
        self._frame = max(1, round(FRAME_S * sample_rate))
        self._pending = np.zeros(0, dtype=np.float32)
        self._frames_seen = 0
        self._loud: list[int] = []  # indices of recent loud frames not yet confirmed
        self._armed_from_frame = 0
        self.onset_s: float | None = None

    def rearm(self, from_s: float) -> None:
        """Look for a new onset at or after `from_s` (a new segment began)."""
        self.onset_s = None
        self._loud = []
        self._armed_from_frame = int(from_s / FRAME_S)

    def feed(self, samples: np.ndarray) -> None:
        """Consume audio; sets `onset_s` once speech is confirmed."""
        data = np.concatenate([self._pending, samples]) if len(self._pending) else samples
        whole = len(data) // self._frame
        if whole and self.onset_s is not None:  # found: only count frames until a rearm
            self._frames_seen += whole
        elif whole:
            frames = data[: whole * self._frame].reshape(whole, self._frame)
            rms = np.sqrt(np.mean(np.square(frames, dtype=np.float64), axis=1))
            level = 20 * np.log10(np.maximum(rms, 1e-10))
            for offset, loud in enumerate(level >= self.options.threshold_dbfs):
                self._step(self._frames_seen + offset, bool(loud))
            self._frames_seen += whole
        self._pending = data[whole * self._frame :].copy()

    def _step(self, index: int, loud: bool) -> None:
        if self.onset_s is not None or index < self._armed_from_frame:
            return
        window = 5
        need = max(1, round(self.options.min_speech_s / FRAME_S))
        if loud:
            self._loud.append(index)
        self._loud = [i for i in self._loud if index - i < window]
        if len(self._loud) >= need:
            self.onset_s = round(self._loud[0] * FRAME_S, 3)
