"""Silero VAD through sherpa-onnx's `VadModel`: no torch and no new dependency at run time.

Why sherpa-onnx and not onnxruntime: sherpa-onnx is already what runs the recogniser, so the
VAD costs no extra package (onnxruntime is not a dependency of streamasr) and runs in the same
C++ runtime. Its `VadModel` answers per 32 ms window whether speech is on (a 0.15 band below
the threshold keeps speech going); this module turns those answers into start and end times.

The model wants 16 kHz: other rates go through the core's streaming resampler. Windows are
cut from a buffer, 512 new samples each (plus the 64 before them as context, Silero v5+), so
the same audio in any block sizes gives the same answer.

`VadModel` would also apply Silero's hysteresis itself, but it hides where a run of speech
began until the run is confirmed; run with none (min speech and silence 0), it gives each
window's verdict one window late, and the hysteresis is applied here, where the start of a
run that is not yet confirmed stays visible (a first token may come before confirmation).
"""

from __future__ import annotations

import hashlib
import math
import threading
import weakref
from pathlib import Path
from typing import Any

import numpy as np

from streamasr.audio.resample import StreamResampler
from streamasr.errors import ModelError
from streamasr.vad.base import SpeechTrack, VadOptions
from streamasr.whole_file import MIB, check_file, read_whole

VAD_RATE_HZ = 16000
WINDOW = 512  # new samples per window at 16 kHz (32 ms)
BUNDLED_MODEL = Path(__file__).parent / "data" / "silero_vad.onnx"
BUNDLED_SHA256 = "7ed98ddbad84ccac4cd0aeb3099049280713df825c610a8ed34543318f1b2c49"
EXPECTED_INPUTS = ("input", "state", "sr")
#: Silero VAD v5 is 2.2 MB; no version comes near this
MAX_MODEL_BYTES = 64 * MIB
FIX = "pass --vad-model a Silero VAD .onnx file (v5 or later)"


def model_path(options: VadOptions) -> Path:
    """The model file to load, checked first: sherpa-onnx ends the process on some bad files,
    and reads the whole file (so a device, a FIFO or a huge file is refused before it)."""
    if options.model is None:
        path = BUNDLED_MODEL
        data = read_whole(path, "the bundled VAD model", MAX_MODEL_BYTES, "reinstall streamasr",
                          ModelError)  # fmt: skip
        if hashlib.sha256(data).hexdigest() != BUNDLED_SHA256:
            raise ModelError(
                f"the bundled Silero VAD model {path} is damaged (sha256 differs); "
                "reinstall streamasr, or pass --vad-model FILE"
            )
        return path
    path = Path(options.model).expanduser()
    check_file(path, "VAD model", MAX_MODEL_BYTES, FIX, ModelError)
    _check_inputs(path)
    return path


def _check_inputs(path: Path) -> None:
    """Refuse a file that is not ONNX, or an ONNX graph that is not Silero v5+."""
    from streamasr.backends.sherpa.onnx_meta import read_onnx_header

    fix = FIX
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


#: Loaded models not in use, by (file, threshold): loading one costs tens of milliseconds,
#: which a bench of thousands of short utterances, or a server's connections, would pay each.
_IDLE: dict[tuple[str, float], list[Any]] = {}
_IDLE_LOCK = threading.Lock()
_MAX_IDLE = 16


def _acquire(options: VadOptions) -> tuple[tuple[str, float], Any]:
    """A model for one stream: an idle one, reset, or a new one."""
    key = (str(options.model or BUNDLED_MODEL), options.threshold)
    with _IDLE_LOCK:
        idle = _IDLE.get(key)
        model = idle.pop() if idle else None
    if model is not None:
        model.reset()
        return key, model
    return key, _load(options)


def _release(key: tuple[str, float], model: Any) -> None:
    with _IDLE_LOCK:
        idle = _IDLE.setdefault(key, [])
        if len(idle) < _MAX_IDLE:
            idle.append(model)


def _load(options: VadOptions) -> Any:
    import sherpa_onnx

    config = sherpa_onnx.VadModelConfig()
    config.silero_vad.model = str(model_path(options))
    config.silero_vad.threshold = options.threshold
    # no hysteresis in the engine: SileroDetector applies its own (module docstring)
    config.silero_vad.min_speech_duration = 0.0
    config.silero_vad.min_silence_duration = 0.0
    config.sample_rate = VAD_RATE_HZ
    config.num_threads = 1
    try:
        return sherpa_onnx.VadModel.create(config)
    except RuntimeError as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ModelError(
            f"the Silero VAD model could not be loaded ({first}); "
            "pass --vad-model a Silero VAD .onnx file (v5 or later)"
        ) from None


class SileroDetector:
    """Speech starts and ends from Silero VAD, fed blocks at any rate and size.

    The model runs with no hysteresis of its own (min speech and silence 0), so each window's
    verdict is known one window later (sherpa-onnx reports the first window of a run when
    the second arrives); `min_speech_s` and `min_silence_s` are applied here, on those
    verdicts. A run of speech not yet long enough to count is `pending_start_s`: the onset
    a first token may be timed from before the start is confirmed.
    """

    onset_source = "silero_vad"

    def __init__(self, sample_rate: int, options: VadOptions) -> None:
        key, self._model = _acquire(options)
        # back to the pool when this detector goes (its stream ended)
        weakref.finalize(self, _release, key, self._model)
        self._context = max(0, self._model.window_size() - WINDOW)
        self._min_speech = max(1, math.ceil(options.min_speech_s * VAD_RATE_HZ / WINDOW))
        self._min_silence = max(1, math.ceil(options.min_silence_s * VAD_RATE_HZ / WINDOW))
        self._resampler = (
            StreamResampler(sample_rate, VAD_RATE_HZ) if sample_rate != VAD_RATE_HZ else None
        )
        self._buffer = np.zeros(self._context, dtype=np.float32)
        self._windows = 0  # windows run through the model
        self._said = False  # the model's answer for the last window
        self._run_from: int | None = None  # first window of the current run of speech
        self._quiet_from: int | None = None  # first window of the silence inside speech
        self.track = SpeechTrack()

    @property
    def processed_s(self) -> float:
        """Input seconds whose verdict is known (one window behind the model)."""
        return max(0, self._windows - 1) * WINDOW / VAD_RATE_HZ

    @property
    def lag_s(self) -> float:
        return (self._min_speech + 1) * WINDOW / VAD_RATE_HZ

    @property
    def pending_start_s(self) -> float | None:
        """Start of a run of speech too short so far to be confirmed (None: no such run)."""
        if self.track.in_speech or self._run_from is None:
            return None
        return self._seconds(self._run_from)

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
        said = bool(self._model.is_speech(window))
        index = self._windows
        self._windows += 1
        if index > 0:
            # the previous window was speech if the model said so, or if it says so now for
            # the first time (a run's first window is only reported with its second)
            self._verdict(index - 1, self._said or (said and not self._said))
        self._said = said

    def _verdict(self, index: int, speech: bool) -> None:
        if not self.track.in_speech:
            if not speech:
                self._run_from = None
                return
            if self._run_from is None:
                self._run_from = index
            if index - self._run_from + 1 >= self._min_speech:
                self.track.start(self._seconds(self._run_from))
                self._run_from = None
                self._quiet_from = None
            return
        if speech:
            self._quiet_from = None
            return
        if self._quiet_from is None:
            self._quiet_from = index
        if index - self._quiet_from + 1 >= self._min_silence:
            self.track.end(self._seconds(self._quiet_from), self._seconds(index + 1))
            self._quiet_from = None

    @staticmethod
    def _seconds(window: int) -> float:
        return window * WINDOW / VAD_RATE_HZ
