"""What every speech detector shares: its settings and the speech it has found so far.

A detector is fed the same mono blocks as the recogniser, at the input's rate, and keeps a
`SpeechTrack`: where speech started and where it ended, in seconds of input audio. Each
detector works in fixed frames of its own (Silero: 32 ms windows; energy: 10 ms frames) and
buffers the rest, so what it finds does not depend on how the audio was cut into blocks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

DETECTORS = ("silero", "energy", "off")


@dataclass(frozen=True)
class VadOptions:
    """`--vad`, `--vad-end`, `--vad-gate`, `--vad-model` and the detector's settings.

    `min_silence_s` is the silence that ends speech: it is the VAD end rule's wait and the
    gate's hangover (audio that far past the last speech is still fed). `pre_roll_s` is the
    audio the gate feeds before a speech start, so the first sound of a word is not cut.
    """

    detector: str = "energy"
    model: str | None = None  # Silero model file; None: the bundled one
    threshold: float = 0.5  # Silero speech probability
    min_speech_s: float = 0.1  # speech shorter than this is not a start
    min_silence_s: float = 0.5
    end_rule: bool = False
    gate: bool = False
    pre_roll_s: float = 0.3

    @property
    def uses_front_end(self) -> bool:
        """False for the plain energy onset detector of old (no end rule, no gate)."""
        return self.detector == "silero" or (
            self.detector == "energy" and (self.end_rule or self.gate)
        )


@dataclass(frozen=True)
class SpeechEnd:
    """Speech stopped at `end_s`; the detector knew at `decided_s` (after its hangover)."""

    end_s: float
    decided_s: float


@dataclass
class SpeechTrack:
    """Speech found so far, in input seconds; `in_speech` while a start has no end yet."""

    starts: list[float] = field(default_factory=list)
    ends: list[SpeechEnd] = field(default_factory=list)
    in_speech: bool = False

    def start(self, at_s: float) -> None:
        self.starts.append(round(at_s, 6))
        self.in_speech = True

    def end(self, end_s: float, decided_s: float) -> None:
        self.ends.append(SpeechEnd(round(end_s, 6), round(decided_s, 6)))
        self.in_speech = False


class SpeechDetector(Protocol):
    """What the front end needs of a detector."""

    track: SpeechTrack
    #: the name FirstToken.onset_source carries for an onset from this detector
    onset_source: str

    @property
    def processed_s(self) -> float:
        """Input seconds classified so far."""
        ...

    @property
    def lag_s(self) -> float:
        """How far before `processed_s` a start may still be found (its confirmation)."""
        ...

    def feed(self, samples: np.ndarray) -> None:
        """Consume one block of mono float32 input."""
        ...
