"""OnsetDetector.feed makes the same decisions as the plain per-frame rule it replaced.

`feed` runs on every block of every live session, so it does the rule in one loop over
Python floats. `Reference` below is the earlier implementation, written one method per step
of the rule: both are fed the same audio in random block sizes (with re-arms at random
points) and must agree on every onset and last loud frame after every block; the floor
estimates, which are float sums, within a tolerance.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from streamasr.vad.onset import (
    CONFIRM_WINDOW_FRAMES,
    FLOOR_RISE_DB_PER_S,
    FRAME_S,
    WARMUP_S,
    OnsetDetector,
    OnsetOptions,
    frame_levels_dbfs,
)

WAVS = Path(__file__).resolve().parent.parent / "models" / "tiny-en" / "test_wavs"
RATE = 16000
FLOOR_TOLERANCE_DB = 1e-9  # float rounding, not a rule change (1e-7 in the RMS is 9e-7 dB)


class Reference:
    """The rule of streamasr/vad/onset.py, one 10 ms frame at a time."""

    def __init__(self, sample_rate: int, options: OnsetOptions) -> None:
        self.options = options
        self._frame = max(1, round(FRAME_S * sample_rate))
        self._pending = np.zeros(0, dtype=np.float32)
        self._frames_seen = 0
        self._warmup: list[float] = []
        self.floor_dbfs: float | None = None
        self._loud: list[int] = []
        self._armed_from_frame = 0
        self._last_loud: int | None = None
        self.onset_s: float | None = None

    @property
    def last_loud_end_s(self) -> float | None:
        return None if self._last_loud is None else round((self._last_loud + 1) * FRAME_S, 3)

    def rearm(self, from_s: float) -> None:
        self.onset_s = None
        self._loud = []
        self._armed_from_frame = int(from_s / FRAME_S)

    def feed(self, samples: np.ndarray) -> None:
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
        if self.floor_dbfs is None:
            self._warmup.append(level)
            if len(self._warmup) * FRAME_S < WARMUP_S - 1e-9:
                return
            held, self._warmup = self._warmup, []
            self.floor_dbfs = min(held)
            for old in held:
                self._relative(old, self.floor_dbfs)
            return
        self._relative(level, self.floor_dbfs)

    def _relative(self, level: float, floor: float) -> None:
        loud = level >= floor + self.options.margin_db and level >= self.options.min_level_dbfs
        self._classify(loud)
        rise = FLOOR_RISE_DB_PER_S * FRAME_S
        self.floor_dbfs = level if level < floor else floor + min(level - floor, rise)

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


def noise(seconds: float, level_dbfs: float, seed: int) -> np.ndarray:
    """Gaussian noise whose RMS is `level_dbfs`."""
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(int(seconds * RATE)) * 10 ** (level_dbfs / 20)).astype(np.float32)


def hum(seconds: float, level_dbfs: float) -> np.ndarray:
    """A steady 50 Hz tone (with harmonics) whose RMS is about `level_dbfs`."""
    t = np.arange(int(seconds * RATE)) / RATE
    wave = np.sin(2 * np.pi * 50 * t) + 0.3 * np.sin(2 * np.pi * 150 * t)
    return (wave / np.sqrt(np.mean(wave**2)) * 10 ** (level_dbfs / 20)).astype(np.float32)


def clip(name: str) -> np.ndarray:
    audio, rate = sf.read(WAVS / name, dtype="float32")
    assert rate == RATE and audio.ndim == 1
    return audio


def bursts() -> np.ndarray:
    """Short and long noise bursts over a quiet floor: some too short to confirm an onset."""
    audio = noise(3.0, -55.0, seed=1)
    for start_s, length_s, seed in ((0.4, 0.008, 2), (0.9, 0.018, 3), (1.3, 0.2, 4), (2.2, 0.6, 5)):
        start = int(start_s * RATE)
        audio[start : start + int(length_s * RATE)] += noise(length_s, -20.0, seed)
    return audio


def signals() -> dict[str, np.ndarray]:
    clips = {name: clip(name) for name in sorted(p.name for p in WAVS.glob("*.wav"))}
    assert len(clips) >= 5
    quiet = noise(1.0, -48.0, seed=6)
    return {
        **clips,
        "silence": np.zeros(2 * RATE, np.float32),
        "steady hum": hum(6.0, -30.0) + noise(6.0, -70.0, seed=7),
        "noise bursts": bursts(),
        "silence, then a clip": np.concatenate([np.zeros(RATE // 2, np.float32), clip("1.wav")]),
        "loud from the first sample": np.concatenate([clip("2.wav")[8000:], quiet]),
        "two clips in noise": np.concatenate([quiet, clip("3.wav"), quiet, clip("4.wav"), quiet]),
    }


SIGNALS = signals()
OPTIONS = {
    "relative": OnsetOptions(),
    "absolute -40 dBFS": OnsetOptions(threshold_dbfs=-40.0),
    "min speech 10 ms, margin 6 dB": OnsetOptions(margin_db=6.0, min_speech_s=0.01),
}


def same_state(new: OnsetDetector, old: Reference, where: str) -> None:
    assert (new.onset_s, new.last_loud_end_s) == (old.onset_s, old.last_loud_end_s), where
    if old.floor_dbfs is None:
        assert new.floor_dbfs is None, where
    else:
        assert new.floor_dbfs == pytest.approx(old.floor_dbfs, abs=FLOOR_TOLERANCE_DB), where


def feed_both(
    audio: np.ndarray, options: OnsetOptions, seed: int, rearm_every_s: float
) -> list[float]:
    """Same random blocks (and re-arms) into both; compares after every block.

    Returns the onsets found, so a caller can tell the signal did something.
    """
    rng = np.random.default_rng(seed)
    new, old = OnsetDetector(RATE, options), Reference(RATE, options)
    onsets, position, next_rearm_s = set(), 0, rearm_every_s
    while position < len(audio):
        size = int(rng.choice([1, 7, 160, 161, 512, 1600, 1601, 3200, int(rng.integers(1, 4000))]))
        block = audio[position : position + size]
        new.feed(block)
        old.feed(block)
        position += len(block)
        where = f"after {position} samples"
        same_state(new, old, where)
        if old.onset_s is not None:
            onsets.add(old.onset_s)
        if position / RATE >= next_rearm_s:
            # from the current time, or a moment before or after it, as a session might
            from_s = position / RATE + float(rng.choice([-0.05, 0.0, 0.033]))
            new.rearm(from_s)
            old.rearm(from_s)
            next_rearm_s += rearm_every_s
    return sorted(onsets)


@pytest.mark.parametrize("options", OPTIONS.values(), ids=OPTIONS.keys())
@pytest.mark.parametrize("name", SIGNALS.keys())
def test_random_blocks_give_the_reference_decisions(name: str, options: OnsetOptions) -> None:
    audio = SIGNALS[name]
    for seed in range(3):
        feed_both(audio, options, seed, rearm_every_s=float("inf"))
    feed_both(audio, options, seed=10, rearm_every_s=0.7)


def test_the_signals_exercise_the_rule() -> None:
    """The comparison above means something: onsets, re-arms and a hum that never triggers."""
    relative = OPTIONS["relative"]
    assert feed_both(SIGNALS["steady hum"], relative, seed=0, rearm_every_s=1.0) == []
    assert feed_both(SIGNALS["silence"], relative, seed=0, rearm_every_s=0.5) == []
    # the 8 and 18 ms bursts are too short to confirm; the 200 ms one at 1.3 s is the onset
    bursts = feed_both(SIGNALS["noise bursts"], relative, seed=0, rearm_every_s=float("inf"))
    assert len(bursts) == 1 and abs(bursts[0] - 1.3) <= 0.01, bursts
    # re-armed every 0.5 s, speech in both clips is found again and again
    assert len(feed_both(SIGNALS["two clips in noise"], relative, seed=0, rearm_every_s=0.5)) >= 4
    for name in ("0.wav", "1.wav", "2.wav", "3.wav", "4.wav"):
        found = feed_both(SIGNALS[name], relative, seed=0, rearm_every_s=float("inf"))
        assert len(found) == 1, name


def test_a_clip_after_a_rearm() -> None:
    """Speech, a quiet gap and a re-arm, then a clip: its onset and end as the reference's."""
    gap = noise(1.0, -70.0, seed=8)  # under min_level_dbfs: never loud
    first, second = clip("0.wav"), clip("3.wav")
    new, old = OnsetDetector(RATE), Reference(RATE, OnsetOptions())
    for detector in (new, old):
        detector.feed(first)
        detector.feed(gap[:4000])
        detector.rearm((len(first) + 4000) / RATE)
        detector.feed(gap[4000:])
        assert detector.onset_s is None
        for start in range(0, len(second), 1600):
            detector.feed(second[start : start + 1600])
    same_state(new, old, "after the second clip")
    assert new.onset_s is not None and new.onset_s >= (len(first) + len(gap)) / RATE


@pytest.mark.parametrize(
    ("options", "last_loud_end_s"),
    [
        # the floor rises 0.03 dB on the first loud frame: the next ones miss the margin
        (OnsetOptions(margin_db=20.0, min_speech_s=0.01), 0.21),
        (OnsetOptions(margin_db=0.0, min_level_dbfs=20.0, min_speech_s=0.01), 0.25),
        (OnsetOptions(threshold_dbfs=20.0, min_speech_s=0.01), 0.25),
    ],
    ids=["margin", "minimum level", "threshold"],
)
def test_a_level_exactly_at_a_limit_is_loud(options: OnsetOptions, last_loud_end_s: float) -> None:
    """Levels that land exactly on a limit: DC at 1.0 is 0 dBFS, at 10.0 is +20 dBFS.

    Not compared with `Reference`: its levels come from numpy's log10, which on some CPUs is
    numpy's own vector code and need not give exactly 1 for 10; `feed` uses math.log10.
    """
    audio = np.concatenate([np.ones(3200, np.float32), np.full(800, 10.0, np.float32)])
    rng = np.random.default_rng(5)
    detector, position = OnsetDetector(RATE, options), 0
    while position < len(audio):
        size = int(rng.integers(1, 700))
        detector.feed(audio[position : position + size])
        position += size
    assert detector.onset_s == 0.2 and detector.last_loud_end_s == last_loud_end_s


@pytest.mark.parametrize("dtype", [np.float64, np.int16])
def test_other_sample_types_give_the_reference_decisions(dtype: type) -> None:
    """Blocks that are not float32 (the pending remainder keeps their type) agree too."""
    audio = SIGNALS["two clips in noise"]
    if dtype is np.int16:
        audio = (audio * 32767).astype(np.int16)  # levels 90 dB up: still relative decisions
    else:
        audio = audio.astype(dtype)
    assert feed_both(audio, OPTIONS["relative"], seed=4, rearm_every_s=1.5)

