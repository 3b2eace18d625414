"""The silence gate: input the detector calls silence is not fed to the recogniser.

A sample is kept when it lies in speech, up to where the detector decided the speech had
ended (its hangover, `min_silence_s`), or within `pre_roll_s` before a speech start. Since a
start is only known after it is confirmed, input is held back until the detector can no
longer find a start that would keep it (`lag_s + pre_roll_s` behind what it processed): a
gated stream is that much behind the input, and exactly as deterministic as the detector.

The gate cuts the input into `Piece`s that say where they lie in the input (so event times
stay true to it) and whether the recogniser gets them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from streamasr.vad.base import SpeechDetector


@dataclass(frozen=True)
class Piece:
    """Input samples from `start_sample` on; `keep` False: silence the recogniser skips."""

    samples: np.ndarray
    start_sample: int
    keep: bool


class SilenceGate:
    """Holds input until it is settled, then hands it over as kept or skipped pieces."""

    def __init__(self, sample_rate: int, detector: SpeechDetector, pre_roll_s: float) -> None:
        self.sample_rate = sample_rate
        self.detector = detector
        self.pre_roll_s = pre_roll_s
        self._held = np.zeros(0, dtype=np.float32)
        self._held_from = 0  # input sample index of _held[0]
        self.skipped_samples = 0

    def push(self, samples: np.ndarray) -> list[Piece]:
        """Input one block (the detector has already been fed it); what is settled comes out."""
        self._held = np.concatenate([self._held, samples.astype(np.float32, copy=False)])
        settled_s = self.detector.processed_s - self.detector.lag_s - self.pre_roll_s
        settled = max(0, math.floor(settled_s * self.sample_rate))
        upto = min(self._held_from + len(self._held), settled)
        return self._release(upto)

    def flush(self) -> list[Piece]:
        """End of input: everything held, judged by what the detector found."""
        return self._release(self._held_from + len(self._held))

    def _release(self, upto: int) -> list[Piece]:
        count = upto - self._held_from
        if count <= 0:
            return []
        keep = self._keep_mask(self._held_from, count)
        pieces: list[Piece] = []
        edges = np.flatnonzero(np.diff(keep.astype(np.int8))) + 1
        bounds = [0, *edges.tolist(), count]
        for a, b in zip(bounds[:-1], bounds[1:], strict=True):
            kept = bool(keep[a])
            pieces.append(Piece(self._held[a:b].copy(), self._held_from + a, kept))
            if not kept:
                self.skipped_samples += b - a
        self._held = self._held[count:].copy()
        self._held_from = upto
        return pieces

    def _keep_mask(self, first: int, count: int) -> np.ndarray:
        rate = self.sample_rate
        track = self.detector.track
        keep = np.zeros(count, dtype=bool)
        ends = [end.decided_s for end in track.ends]
        for index, start in enumerate(track.starts):
            a = math.floor((start - self.pre_roll_s) * rate) - first
            b = count if index >= len(ends) else math.ceil(ends[index] * rate) - first
            keep[max(0, a) : max(0, min(count, b))] = True
        return keep
