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
from math import log10, sqrt

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


_NO_SAMPLES = np.zeros(0, dtype=np.float32)
_NO_SAMPLES.flags.writeable = False


class OnsetDetector:
    """Finds the first speech frame of each segment in streamed mono audio.

    Also remembers the last loud frame (`last_loud_end_s`), so one pass over the audio gives
    both ends of the speech.

    It runs on every block of every live session, so `feed` does the per-frame rule in one
    plain loop over Python floats: numpy's per-call overhead dominates on 10-frame blocks. The
    levels are `frame_levels_dbfs`'s, the same float64 operations per frame, with libm's log10
    (numpy's own vector log10 on AVX-512 CPUs may differ from it in the last bit).
    """

    def __init__(self, sample_rate: int, options: OnsetOptions = OnsetOptions()) -> None:
        self.sample_rate = sample_rate
        self.options = options
        self._frame = max(1, round(FRAME_S * sample_rate))
        self._pending = _NO_SAMPLES
        self._frames_seen = 0  # frames classified so far
        self._warmup: list[float] = []  # levels held until the floor is first known
        self._floor_dbfs: float | None = None
        self._rise_db = FLOOR_RISE_DB_PER_S * FRAME_S
        # recent loud frames that may still confirm an onset; pruned to the confirm window
        # only when a loud frame is added (pruning is monotonic, so doing it later is the same)
        self._loud: list[int] = []
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
        pending = self._pending
        data = np.concatenate([pending, samples]) if len(pending) else samples
        frame = self._frame
        whole = len(data) // frame
        used = whole * frame
        if whole:
            frames = (data if used == len(data) else data[:used]).reshape(whole, frame)
            sums = np.add.reduce(np.square(frames, dtype=np.float64), axis=1).tolist()
            # as frame_levels_dbfs: 20 * log10(max(sqrt(mean square), 1e-10)), NaN kept
            levels = []
            for total in sums:
                rms = sqrt(total / frame)
                levels.append(20 * log10(1e-10 if rms < 1e-10 else rms))
            self._levels(levels)
        self._pending = data[used:].copy() if used < len(data) else _NO_SAMPLES

    def _levels(self, levels: list[float]) -> None:
        """Classify consecutive frame levels and track the floor (the rule in the docstring)."""
        options = self.options
        relative = options.threshold_dbfs is None
        threshold = 0.0 if options.threshold_dbfs is None else options.threshold_dbfs
        floor = 0.0 if self._floor_dbfs is None else self._floor_dbfs  # read when relative
        if relative and self._floor_dbfs is None:
            held = self._warmup
            taken = 0
            while True:
                if taken == len(levels):
                    return  # still warming up
                held.append(levels[taken])
                taken += 1
                if len(held) * FRAME_S >= WARMUP_S - 1e-9:
                    break
            self._warmup = []
            floor = min(held)
            levels = held + levels[taken:]
        margin = options.margin_db
        min_level = options.min_level_dbfs
        rise = self._rise_db
        need = max(1, round(options.min_speech_s / FRAME_S))
        index = self._frames_seen
        last_loud = self._last_loud
        hunting = self.onset_s is None
        armed = self._armed_from_frame
        recent = self._loud
        for level in levels:
            if relative:
                loud = level >= floor + margin and level >= min_level
                if level < floor:
                    floor = level
                else:
                    step = level - floor
                    floor = floor + (rise if rise < step else step)
            else:
                loud = level >= threshold
            if loud:
                last_loud = index
                if hunting and index >= armed:
                    recent.append(index)
                    while index - recent[0] >= CONFIRM_WINDOW_FRAMES:
                        del recent[0]
                    if len(recent) >= need:
                        self.onset_s = round(recent[0] * FRAME_S, 3)
                        hunting = False
            index += 1
        self._frames_seen = index
        self._last_loud = last_loud
        self._loud = recent
        if relative:
            self._floor_dbfs = floor
