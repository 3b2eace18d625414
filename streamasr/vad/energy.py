"""The energy detector (streamasr.vad.onset, 10 dB over the measured floor) as a VAD.

Its starts are the onset detector's own, so `--vad energy` gives the onsets streamasr has
always reported. Speech ends when no frame was loud for `min_silence_s`; the detector is
then re-armed for the next start. Fed 10 ms frame by frame so every decision falls on a
frame boundary, whatever the block sizes.
"""

from __future__ import annotations

import numpy as np

from streamasr.vad.base import SpeechTrack, VadOptions
from streamasr.vad.onset import (
    CONFIRM_WINDOW_FRAMES,
    FRAME_S,
    WARMUP_S,
    OnsetDetector,
    OnsetOptions,
)

DEFAULT_ONSET = OnsetOptions()


class EnergyDetector:
    """Speech starts and ends from frame energy against the tracked noise floor."""

    onset_source = "detected"

    def __init__(
        self, sample_rate: int, options: VadOptions, onset: OnsetOptions = DEFAULT_ONSET
    ) -> None:
        self._onsets = OnsetDetector(sample_rate, onset)
        self._frame = max(1, round(FRAME_S * sample_rate))
        self._min_silence_s = options.min_silence_s
        self._pending = np.zeros(0, dtype=np.float32)
        self._frames = 0
        self.track = SpeechTrack()

    @property
    def processed_s(self) -> float:
        return round(self._frames * FRAME_S, 6)

    @property
    def lag_s(self) -> float:
        # the floor is first known after the warm-up, which is then classified at once
        return max(WARMUP_S, CONFIRM_WINDOW_FRAMES * FRAME_S)

    def feed(self, samples: np.ndarray) -> None:
        data = np.concatenate([self._pending, samples]) if len(self._pending) else samples
        whole = len(data) // self._frame
        for index in range(whole):
            self._onsets.feed(data[index * self._frame : (index + 1) * self._frame])
            self._frames += 1
            self._after_frame()
        self._pending = data[whole * self._frame :].astype(np.float32, copy=True)

    def _after_frame(self) -> None:
        onset = self._onsets.onset_s
        if not self.track.in_speech:
            if onset is not None:
                self.track.start(onset)
            return
        last = self._onsets.last_loud_end_s
        quiet_s = self.processed_s - (last if last is not None else 0.0)
        if quiet_s + 1e-9 >= self._min_silence_s:
            end = max(last or 0.0, self.track.starts[-1])
            self.track.end(end, self.processed_s)
            self._onsets.rearm(self.processed_s + 1e-9)
