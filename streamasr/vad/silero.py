"""Silero VAD through sherpa-onnx's `VadModel`: no torch and no new dependency at run time.

Why sherpa-onnx and not onnxruntime: sherpa-onnx is already what runs the recogniser, so the
VAD costs no extra package, and its `VadModel` applies Silero's own hysteresis (a start needs
`min_speech_s` of speech; an end needs `min_silence_s` of silence; a 0.15 band below the
threshold keeps speech going). It answers per 32 ms window whether speech is on; this module
turns the moments it switches into start and end times.

The model wants 16 kHz: other rates go through the core's streaming resampler. Windows are
cut from a buffer, 512 new samples each (plus the 64 before them as context, Silero v5+), so
the same audio in any block sizes gives the same answer.
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

import numpy as np

from streamasr.errors import ModelError
from streamasr.resample import StreamResampler
from streamasr.vad.base import SpeechTrack, VadOptions

VAD_RATE_HZ = 16000
WINDOW = 512  # new samples per window at 16 kHz (32 ms)
BUNDLED_MODEL = Path(__file__).parent / "data" / "silero_vad.onnx"
BUNDLED_SHA256 = "7ed98ddbad84ccac4cd0aeb3099049280713df825c610a8ed34543318f1b2c49"
EXPECTED_INPUTS = ("input", "state", "sr")


def model_path(options: VadOptions) -> Path:
    """The model file to load, checked first: sherpa-onnx ends the process on some bad files."""
    if options.model is None:
        path = BUNDLED_MODEL
        data = _read(path, "reinstall streamasr")
        if hashlib.sha256(data).hexdigest() != BUNDLED_SHA256:
            raise ModelError(
                f"the bundled Silero VAD model {path} is damaged (sha256 differs); "
                "reinstall streamasr, or pass --vad-model FILE"
            )
        return path
    path = Path(options.model).expanduser()
    _read(path, "pass --vad-model a Silero VAD .onnx file (v5 or later)")
    _check_inputs(path)
    return path


def _read(path: Path, fix: str) -> bytes:
    try:
        return path.read_bytes()
    except IsADirectoryError:
        raise ModelError(f"VAD model {path} is a folder, not a file; {fix}") from None
    except FileNotFoundError:
        raise ModelError(f"VAD model {path} does not exist; {fix}") from None
    except OSError as exc:
        raise ModelError(f"VAD model {path} cannot be read ({exc.strerror}); {fix}") from None


def _check_inputs(path: Path) -> None:
    """Refuse a file that is not ONNX, or an ONNX graph that is not Silero v5+."""
    from streamasr.backends.sherpa.onnx_meta import read_onnx_header

    fix = "pass --vad-model a Silero VAD .onnx file (v5 or later)"
    try:
        header = read_onnx_header(path)
    except ModelError:
        raise ModelError(f"VAD model {path} is not a readable ONNX file; {fix}") from None
    names = tuple(item.name for item in header.inputs)
    if names != EXPECTED_INPUTS:
        shown = ", ".join(names) or "none"
        raise ModelError(
            f"VAD model {path} has inputs ({shown}), not Silero's ({', '.join(EXPECTED_INPUTS)}); "
            f"{fix}"
        )


class SileroDetector:
    """Speech starts and ends from Silero VAD, fed blocks at any rate and size."""

    onset_source = "silero_vad"

    def __init__(self, sample_rate: int, options: VadOptions) -> None:
        import sherpa_onnx

        config = sherpa_onnx.VadModelConfig()
        config.silero_vad.model = str(model_path(options))
        config.silero_vad.threshold = options.threshold
        config.silero_vad.min_speech_duration = options.min_speech_s
        config.silero_vad.min_silence_duration = options.min_silence_s
        config.sample_rate = VAD_RATE_HZ
        config.num_threads = 1
        try:
            self._model = sherpa_onnx.VadModel.create(config)
        except RuntimeError as exc:
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise ModelError(
                f"the Silero VAD model could not be loaded ({first}); "
                "pass --vad-model a Silero VAD .onnx file (v5 or later)"
            ) from None
        self._context = max(0, self._model.window_size() - WINDOW)
        self._start_lag = max(1, math.ceil(self._model.min_speech_duration_samples() / WINDOW))
        self._end_lag = math.ceil(self._model.min_silence_duration_samples() / WINDOW)
        self._resampler = (
            StreamResampler(sample_rate, VAD_RATE_HZ) if sample_rate != VAD_RATE_HZ else None
        )
        self._buffer = np.zeros(self._context, dtype=np.float32)
        self._windows = 0
        self._speaking = False
        self.track = SpeechTrack()

    @property
    def processed_s(self) -> float:
        return self._windows * WINDOW / VAD_RATE_HZ

    @property
    def lag_s(self) -> float:
        return (self._start_lag + 1) * WINDOW / VAD_RATE_HZ

    def feed(self, samples: np.ndarray) -> None:
        if self._resampler is not None:
            samples = self._resampler(samples)
        self._buffer = np.concatenate([self._buffer, samples.astype(np.float32, copy=False)])
        size = self._context + WINDOW
        used = 0
        while len(self._buffer) - used >= size:
            self._window(self._buffer[used : used + size])
            used += WINDOW
        if used:
            self._buffer = self._buffer[used:].copy()

    def _window(self, window: np.ndarray) -> None:
        index = self._windows
        self._windows += 1
        speaking = bool(self._model.is_speech(window))
        if speaking and not self._speaking:
            # the model switched on at window `index` after `start_lag` windows of speech
            self.track.start(max(0, index - self._start_lag) * WINDOW / VAD_RATE_HZ)
        elif self._speaking and not speaking:
            # ... and off once `end_lag` windows of silence followed the last speech
            end = max(0, index - self._end_lag) * WINDOW / VAD_RATE_HZ
            self.track.end(max(end, self.track.starts[-1]), self.processed_s)
        self._speaking = speaking
