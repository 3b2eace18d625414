"""Speech-onset detection on the audio as it streams, for first-token latency.

Rule (documented in docs/file.md): audio is cut into 10 ms frames and each frame's RMS level
is taken in dBFS. A frame is *loud* when it is at least `margin_db` (10 dB) above the running
noise-floor estimate and at least `min_level_dbfs` (-60 dBFS). Speech starts at the first
loud frame followed by enough loud frames to cover `min_speech_s` (30 ms) within 50 ms.

The noise floor is measured, not assumed, so a steady hiss or hum is never taken for speech:
the first `WARMUP_S` of audio set it (their quietest frame), then it follows every quieter
frame at once and rises by at most `FLOOR_RISE_DB_PER_S` while the level stays above it. A
sound that is already steady when the audio begins therefore counts as the floor.

`threshold_dbfs` replaces all of this with a fixed absolute level (`--onset-dbfs`). It is
deliberately simple and deterministic; datasets that carry alignments override it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

FRAME_S = 0.01
WARMUP_S = 0.1
FLOOR_RISE_DB_PER_S = 3.0
CONFIRM_WINDOW_FRAMES = 5  # the 50 ms in which min_speech_s of loud frames must fall


@dataclass(frozen=True)
class OnsetOptions:
    """Settings of the energy detector; `threshold_dbfs` None means: relative to the floor."""

    threshold_dbfs: float | None = None
    margin_db: float = 10.0
    min_level_dbfs: float = -60.0
    min_speech_s: float = 0.03


def frame_levels_dbfs(frames: np.ndarray) -> np.ndarray:
    """RMS level in dBFS of each row of a (frames, samples) array (-200 for digital silence)."""
    rms = np.sqrt(np.mean(np.square(frames, dtype=np.float64), axis=1))
    return 20 * np.log10(np.maximum(rms, 1e-10))


class OnsetDetector:
    """Finds the first speech frame of each segment in streamed mono audio.

    Also remembers the last loud frame (`last_loud_end_s`), so one pass over the audio gives
    both ends of the speech.
    """

    def __init__(self, sample_rate: int, options: OnsetOptions = OnsetOptions()) -> None:
        self.sample_rate = sample_rate
        self.options = options
        self._frame = max(1, round(FRAME_S * sample_rate))
        self._pending = np.zeros(0, dtype=np.float32)
        self._frames_seen = 0  # frames classified so far
        self._warmup: list[float] = []  # levels held until the floor is first known
        self._floor_dbfs: float | None = None
        self._rise_db = FLOOR_RISE_DB_PER_S * FRAME_S
        self._loud: list[int] = []  # indices of recent loud frames not yet confirmed
        self._armed_from_frame = 0
        self._last_loud: int | None = None
        self.onset_s: float | None = None

    @property
    def floor_dbfs(self) -> float | None:
        """Current noise-floor estimate (None until the warm-up has been heard)."""
        return self._floor_dbfs

    @property
    def last_loud_end_s(self) -> float | None:
        """End of the last loud frame in audio seconds (None: no loud frame yet)."""
        if self._last_loud is None:
            return None
        return round((self._last_loud + 1) * FRAME_S, 3)

    def rearm(self, from_s: float) -> None:
        """Look for a new onset at or after `from_s` (a new segment began)."""
        self.onset_s = None
        self._loud = []
        self._armed_from_frame = int(from_s / FRAME_S)

    def feed(self, samples: np.ndarray) -> None:
        """Consume audio; sets `onset_s` once speech is confirmed."""
        data = np.concatenate([self._pending, samples]) if len(self._pending) else samples
        whole = len(data) // self._frame
        if whole:
            levels = frame_levels_dbfs(data[: whole * self._frame].reshape(whole, self._frame))
            for level in levels.tolist():
                self._level(level)
        self._pending = data[whole * self._frame :].copy()

    def _level(self, level: float) -> None:
        if self.options.threshold_dbfs is not None:
            self._classify(level >= self.options.threshold_dbfs)
            return
        if self._floor_dbfs is None:
            self._warmup.append(level)
            if len(self._warmup) * FRAME_S < WARMUP_S - 1e-9:
                return
            held, self._warmup = self._warmup, []
            self._floor_dbfs = min(held)
            for old in held:
                self._relative(old, self._floor_dbfs)
            return
        self._relative(level, self._floor_dbfs)

    def _relative(self, level: float, floor: float) -> None:
        loud = level >= floor + self.options.margin_db and level >= self.options.min_level_dbfs
        self._classify(loud)
        if level < floor:
            self._floor_dbfs = level
        else:
            self._floor_dbfs = floor + min(level - floor, self._rise_db)

    def _classify(self, loud: bool) -> None:
        index = self._frames_seen
        self._frames_seen += 1
        if loud:
            self._last_loud = index
        if self.onset_s is not None or index < self._armed_from_frame:
            return
        need = max(1, round(self.options.min_speech_s / FRAME_S))
        if loud:
            self._loud.append(index)
        self._loud = [i for i in self._loud if index - i < CONFIRM_WINDOW_FRAMES]
        if len(self._loud) >= need:
            self.onset_s = round(self._loud[0] * FRAME_S, 3)
