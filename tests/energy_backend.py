"""A pure-Python backend for tests: one token per burst of energy.

It exists to show that an engine is one module: it is loaded by name through the registry
(`--backend energy_backend:BACKEND` with this folder on PYTHONPATH) and goes through `file`,
`bench --streams`, `mic` and `latency --measure` without any of those knowing it. It works at
8 kHz (so the core must resample for it), steps in 160 ms chunks and emits at 20 ms frames,
unlike either real engine.

It declares an option of its own, `frame_ms` (the frame length), to show that an engine's
settings are its own too: the commands offer `--frame-ms` because this entry declares it
(installed as a plugin; `-O frame_ms=N` with `--backend energy_backend:BACKEND`), check its
range here, sweep it in bench and show it in latency, and no module of streamasr names it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from streamasr.backends.base import BackendEntry, BackendInfo, EngineOptions, Hypothesis
from streamasr.backends.options import EngineOption, whole_number

SAMPLE_RATE = 8000
FRAME_S = 0.02
FRAMES_PER_CHUNK = 8
CHUNK_S = FRAME_S * FRAMES_PER_CHUNK
LOOKAHEAD_FRAMES = 2  # a frame's decision waits for two frames after it
THRESHOLD_DBFS = -35.0
NAME = "energy"
FRAME_MS_RANGE = (5, 100)

FRAME_OPTION = EngineOption(
    "frame_ms",
    "Frame length of the energy detector in ms (a token per burst is placed on this grid).",
    whole_number("--frame-ms", *FRAME_MS_RANGE, "ms"),
    default=round(FRAME_S * 1000),
    sweep=",",
    label="frame",
    kind="frame",
    about="sets the energy test engine's frame length",
    metavar="MS",
)


class EnergyStream:
    """Counts bursts: a token at each frame where the level crosses the threshold upwards."""

    def __init__(self, frame_s: float = FRAME_S) -> None:
        self.frame_s = frame_s
        self._buffer = np.zeros(0, np.float32)
        self._frames_done = 0  # output frames decoded since the stream opened
        self._segment_start_frame = 0
        self._tokens: list[str] = []
        self._times: list[float] = []
        self._loud = False
        self._finished = False

    def accept(self, sample_rate: int, samples: np.ndarray) -> None:
        if sample_rate != SAMPLE_RATE:
            raise ValueError(f"energy backend takes {SAMPLE_RATE} Hz, got {sample_rate}")
        self._buffer = np.concatenate([self._buffer, samples.astype(np.float32)])

    def ready(self) -> bool:
        frame = round(self.frame_s * SAMPLE_RATE)
        need = (FRAMES_PER_CHUNK + (0 if self._finished else LOOKAHEAD_FRAMES)) * frame
        return len(self._buffer) >= need or (self._finished and len(self._buffer) > 0)

    def decode_step(self) -> bool:
        if not self.ready():
            return False
        frame = round(self.frame_s * SAMPLE_RATE)
        chunk = self._buffer[: FRAMES_PER_CHUNK * frame]
        self._buffer = self._buffer[FRAMES_PER_CHUNK * frame :]
        chunk = np.pad(chunk, (0, FRAMES_PER_CHUNK * frame - len(chunk)))
        for index in range(FRAMES_PER_CHUNK):
            piece = chunk[index * frame : (index + 1) * frame]
            level = 10 * np.log10(float(np.mean(piece**2)) + 1e-12)
            loud = level >= THRESHOLD_DBFS
            if loud and not self._loud:
                self._tokens.append(f"B{len(self._tokens) + 1}")
                self._times.append(round((self._frames_done + index) * self.frame_s, 3))
            self._loud = loud
        self._frames_done += FRAMES_PER_CHUNK
        return True

    def text(self) -> str:
        return " ".join(self._tokens)

    def hypothesis(self) -> Hypothesis:
        return Hypothesis(
            text=self.text(),
            tokens=tuple(self._tokens),
            token_times_s=tuple(self._times),
            segment_start_s=round(self._segment_start_frame * self.frame_s, 3),
        )

    def reset(self) -> None:
        self._tokens, self._times = [], []
        self._segment_start_frame = self._frames_done

    def input_finished(self) -> None:
        self._finished = True


class EnergyRecognizer:
    """The loaded 'model': nothing to load, a threshold and a frame size."""

    def __init__(self, options: EngineOptions) -> None:
        self.options = options
        frame_ms = int(options.own.get("frame_ms", FRAME_OPTION.default))
        self.frame_s = frame_ms / 1000
        settings: dict[str, object] = {"threshold_dbfs": THRESHOLD_DBFS}
        if "frame_ms" in options.own:  # reported when asked for (bench names the setting)
            settings["frame_ms"] = frame_ms
        self.info = BackendInfo(
            backend=NAME,
            model_name="energy-bursts",
            device="cpu",
            sample_rate_hz=SAMPLE_RATE,
            resamples_input=False,
            output_frame_s=self.frame_s,
            chunk_s=self.chunk_s,
            lookahead_s=LOOKAHEAD_FRAMES * self.frame_s,
            token_type="word",
            model_files=(Path(__file__),),
            settings=settings,
        )

    @property
    def description(self) -> str:
        return (
            f"energy bursts ({self.chunk_s * 1000:.0f} ms chunk, "
            f"{self.frame_s * 1000:.0f} ms frames)"
        )

    @property
    def chunk_s(self) -> float:
        return round(self.frame_s * FRAMES_PER_CHUNK, 6)

    def create_stream(self) -> EnergyStream:
        return EnergyStream(self.frame_s)

    def decode_batch(self, streams: Sequence[EnergyStream]) -> list[bool]:
        return [stream.decode_step() for stream in streams]


def _recognises(model: str | None) -> bool:
    return model == "energy-bursts"


def _load(model: str | None, options: EngineOptions) -> EnergyRecognizer:
    return EnergyRecognizer(options)


BACKEND = BackendEntry(
    name=NAME,
    summary="test backend: one token per burst of energy",
    recognises=_recognises,
    load=_load,
    options=(FRAME_OPTION,),
)
