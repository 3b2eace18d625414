"""Voice activity detection, engine-neutral: Silero VAD (through sherpa-onnx) or energy.

`VadOptions` says which detector and what it may do (onsets always; with `end_rule` end an
utterance; with `gate` keep silence from the recogniser). `VadFrontEnd` is what a streaming
session feeds; docs/vad.md has the measurements behind the defaults.
"""

from streamasr.vad.base import DETECTORS, SpeechEnd, SpeechTrack, VadOptions
from streamasr.vad.frontend import VadFrontEnd, open_detector, vad_options
from streamasr.vad.gate import Piece, SilenceGate

__all__ = [
    "DETECTORS",
    "Piece",
    "SilenceGate",
    "SpeechEnd",
    "SpeechTrack",
    "VadFrontEnd",
    "VadOptions",
    "open_detector",
    "vad_options",
]
