"""The VAD as the streaming session sees it: one object fed the recogniser's blocks.

It answers three questions, each from the detector's `SpeechTrack`:
- where did the speech of the open utterance start (`onset_after`, for first-token latency);
- has the detector decided that speech ended by a given audio time (`end_due`, the VAD end
  rule, asked after each encoder step with the audio that step has decoded, so the answer
  does not depend on the feed block size);
- which input reaches the recogniser (`accept` returns the gate's pieces; without
  `--vad-gate` one piece, kept).
"""

from __future__ import annotations

import numpy as np

from streamasr.errors import UsageError
from streamasr.vad.base import DETECTORS, SpeechDetector, VadOptions
from streamasr.vad.gate import Piece, SilenceGate
from streamasr.vad.onset import OnsetOptions

DEFAULT_ONSET = OnsetOptions()


def open_detector(
    options: VadOptions, sample_rate: int, onset: OnsetOptions = DEFAULT_ONSET
) -> SpeechDetector:
    """The detector `options.detector` names (a UsageError lists the names otherwise)."""
    if options.detector == "silero":
        from streamasr.vad.silero import SileroDetector

        return SileroDetector(sample_rate, options)
    if options.detector == "energy":
        from streamasr.vad.energy import EnergyDetector

        return EnergyDetector(sample_rate, options, onset)
    raise UsageError(
        f"--vad {options.detector!r} has no detector; use one of {', '.join(DETECTORS)}"
    )


class VadFrontEnd:
    """Detector, gate and end rule for one stream."""

    def __init__(
        self, options: VadOptions, sample_rate: int, onset: OnsetOptions = DEFAULT_ONSET
    ) -> None:
        self.options = options
        self.sample_rate = sample_rate
        self.detector = open_detector(options, sample_rate, onset)
        self.gate: SilenceGate | None = None
        if options.gate:
            self.gate = SilenceGate(sample_rate, self.detector, options.pre_roll_s)
        self._samples = 0
        self._ends_used = 0

    @property
    def onset_source(self) -> str:
        return self.detector.onset_source

    @property
    def skipped_s(self) -> float:
        """Input seconds the gate kept from the recogniser so far."""
        return self.gate.skipped_samples / self.sample_rate if self.gate else 0.0

    def accept(self, samples: np.ndarray) -> list[Piece]:
        """Feed the detector; what the recogniser may have now (all of it without the gate)."""
        self.detector.feed(samples)
        start = self._samples
        self._samples += len(samples)
        if self.gate is None:
            return [Piece(samples, start, True)]
        return self.gate.push(samples)

    def finish(self) -> list[Piece]:
        """End of input: what the gate still holds."""
        return self.gate.flush() if self.gate is not None else []

    def onset_after(self, from_s: float, audio_s: float) -> float | None:
        """The first speech start at or after `from_s` known by `audio_s` (None: none yet);
        a detector's start still waiting for confirmation counts."""
        for start in self.detector.track.starts:
            if from_s - 1e-9 <= start <= audio_s:
                return start
        pending = getattr(self.detector, "pending_start_s", None)
        if pending is not None and from_s - 1e-9 <= pending <= audio_s:
            return float(pending)  # a run of speech not yet long enough to be confirmed
        return None

    def end_due(self, decoded_to_s: float) -> bool:
        """True once per speech end the detector decided by `decoded_to_s` (if the rule is on)."""
        ends = self.detector.track.ends
        due = False
        while (
            self._ends_used < len(ends)
            and ends[self._ends_used].decided_s <= decoded_to_s + 1e-9
        ):
            self._ends_used += 1
            due = True
        return due and self.options.end_rule


def vad_options(detector: str, end_rule: bool, gate: bool, model: str | None) -> VadOptions:
    """`--vad`, `--vad-end`, `--vad-gate`, `--vad-model` checked: a wrong name or combination
    is a UsageError; a Silero model file that is missing or damaged is a ModelError, said
    before any recogniser loads."""
    if detector not in DETECTORS:
        raise UsageError(f"--vad {detector!r}: use one of {', '.join(DETECTORS)}")
    if detector == "off" and (end_rule or gate):
        used = "--vad-gate" if gate else "--vad-end"
        raise UsageError(f"{used} needs a detector: add --vad silero (or --vad energy)")
    if model is not None and detector != "silero":
        raise UsageError("--vad-model is a Silero VAD file: add --vad silero")
    options = VadOptions(detector=detector, model=model, end_rule=end_rule, gate=gate)
    if detector == "silero":
        from streamasr.vad.silero import model_path

        model_path(options)
    return options
