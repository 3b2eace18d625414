"""Input level of live audio: dBFS, peak hold, clipping and "no signal" tracking.

A muted or wrong microphone looks exactly like a quiet room until a word fails to appear;
the meter makes the difference visible. Levels use the onset detector's convention:
20 * log10(RMS) of float samples, so a full-scale sine reads -3.01 dBFS and digital silence
reads -inf. Pure values only: the live display draws them.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

# The largest positive 16-bit sample as a float; a sample this loud or louder (either sign)
# is at full scale for every integer device of 16 bits or more.
FULL_SCALE = 32767 / 32768
DEFAULT_FLOOR_DBFS = -60.0  # below this a block counts as "no signal"
DEFAULT_NO_SIGNAL_S = 3.0  # warn after this long below the floor
DEFAULT_PEAK_HOLD_S = 1.5  # how long the peak marker stays at a maximum
DEFAULT_CLIP_HOLD_S = 2.0  # how long a clipping warning stays up after the last clipped block
# A block clips when a run of this many samples sits at full scale (the usual meter rule: one
# full-scale sample is a loud transient, a run is a flattened waveform) or when this share of
# its samples does; a single full-scale sample never raises the warning.
CLIP_RUN_SAMPLES = 3
CLIP_SHARE = 0.001


def dbfs(samples: np.ndarray) -> float:
    """RMS level in dBFS; -inf for digital silence or no samples."""
    if len(samples) == 0:
        return -math.inf
    rms = math.sqrt(float(np.mean(np.square(samples, dtype=np.float64))))
    return 20 * math.log10(rms) if rms > 0 else -math.inf


def peak_dbfs(samples: np.ndarray) -> float:
    """Peak sample level in dBFS; -inf for digital silence or no samples."""
    if len(samples) == 0:
        return -math.inf
    peak = float(np.max(np.abs(samples)))
    return 20 * math.log10(peak) if peak > 0 else -math.inf


def clipped_count(samples: np.ndarray) -> int:
    """How many samples are at full scale (either sign)."""
    return int(np.count_nonzero(np.abs(samples) >= FULL_SCALE))


def block_clips(samples: np.ndarray, clipped: int | None = None) -> bool:
    """A run of CLIP_RUN_SAMPLES full-scale samples, or CLIP_SHARE of the block (and at least
    CLIP_RUN_SAMPLES samples) at full scale. `clipped` is clipped_count(samples) if known."""
    count = clipped_count(samples) if clipped is None else clipped
    if count < CLIP_RUN_SAMPLES:
        return False
    if count >= CLIP_SHARE * len(samples):
        return True
    at_full = (np.abs(samples) >= FULL_SCALE).astype(np.int32)
    runs = np.convolve(at_full, np.ones(CLIP_RUN_SAMPLES, np.int32), mode="valid")
    return bool(runs.max() >= CLIP_RUN_SAMPLES)


@dataclass(frozen=True)
class LevelOptions:
    """Thresholds of the meter."""

    floor_dbfs: float = DEFAULT_FLOOR_DBFS
    no_signal_s: float = DEFAULT_NO_SIGNAL_S
    peak_hold_s: float = DEFAULT_PEAK_HOLD_S
    clip_hold_s: float = DEFAULT_CLIP_HOLD_S


@dataclass(frozen=True)
class LevelReading:
    """The meter after one block.

    `silent_for_s` counts from the last block at or above the floor (or from the start);
    `no_signal` is set once it reaches the option's `no_signal_s`. `clipping` stays set for
    `clip_hold_s` after the last block that clipped (block_clips: a run of full-scale samples
    or a share of them, never one alone).
    """

    level_dbfs: float
    peak_dbfs: float
    peak_hold_dbfs: float
    clipping: bool
    silent_for_s: float
    no_signal: bool


@dataclass(frozen=True)
class LevelTotals:
    """The whole capture: loudest block and peak, how much clipped."""

    blocks: int
    audio_s: float
    max_level_dbfs: float
    max_peak_dbfs: float
    clipped_samples: int  # full-scale samples in the blocks that clipped
    clipped_blocks: int
    floor_dbfs: float

    @property
    def silent(self) -> bool:
        """Every block stayed below the floor (a muted or wrong device, or an empty room)."""
        return self.blocks > 0 and self.max_level_dbfs < self.floor_dbfs

    @property
    def clipped(self) -> bool:
        """At least one block clipped (block_clips); a lone full-scale sample does not count."""
        return self.clipped_blocks > 0


class LevelMeter:
    """Follows the level block by block. The clock is injected so tests control time."""

    def __init__(
        self,
        sample_rate: int,
        options: LevelOptions = LevelOptions(),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.sample_rate = sample_rate
        self.options = options
        self.clock = clock
        self._start = clock()
        self._last_signal = self._start
        self._hold_dbfs = -math.inf
        self._hold_since = self._start
        self._last_clip: float | None = None
        self._blocks = 0
        self._samples = 0
        self._max_level = -math.inf
        self._max_peak = -math.inf
        self._clipped_samples = 0
        self._clipped_blocks = 0

    def update(self, samples: np.ndarray) -> LevelReading:
        """Measure one block (mono float) and return what the meter shows now."""
        now = self.clock()
        level = dbfs(samples)
        peak = peak_dbfs(samples)
        clipped = clipped_count(samples)
        self._blocks += 1
        self._samples += len(samples)
        self._max_level = max(self._max_level, level)
        self._max_peak = max(self._max_peak, peak)
        if block_clips(samples, clipped):
            self._clipped_samples += clipped
            self._clipped_blocks += 1
            self._last_clip = now
        if level >= self.options.floor_dbfs:
            self._last_signal = now
        if peak >= self._hold_dbfs or now - self._hold_since >= self.options.peak_hold_s:
            self._hold_dbfs = peak
            self._hold_since = now
        silent_for = now - self._last_signal
        return LevelReading(
            level_dbfs=level,
            peak_dbfs=peak,
            peak_hold_dbfs=self._hold_dbfs,
            clipping=self._last_clip is not None
            and now - self._last_clip < self.options.clip_hold_s,
            silent_for_s=silent_for,
            no_signal=silent_for >= self.options.no_signal_s,
        )

    def totals(self) -> LevelTotals:
        """What the whole capture looked like so far."""
        return LevelTotals(
            blocks=self._blocks,
            audio_s=self._samples / self.sample_rate,
            max_level_dbfs=self._max_level,
            max_peak_dbfs=self._max_peak,
            clipped_samples=self._clipped_samples,
            clipped_blocks=self._clipped_blocks,
            floor_dbfs=self.options.floor_dbfs,
        )
