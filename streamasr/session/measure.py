"""`latency --measure`'s pacing: when a loaded engine's encoder steps run, and what each costs.

The engine is stepped through the stepping core (`session/batch.py`: `engine_step`, one
stream in the batch) like every other caller; what is kept here is only the pacing: low
noise is fed `feed_ms` at a time, at the engine's own rate (so no resampler shifts when steps
run), and after each block the engine is stepped until it has no chunk ready. A step that
ran became possible at the audio fed so far, and its time is its compute (a step returns
only when its work is done). No session, no events: the bare engine stream is measured.
"""

from __future__ import annotations

import logging
import time

import numpy as np

from streamasr.analysis.latency import EngineTiming
from streamasr.backends.base import Recognizer
from streamasr.errors import ModelError, UsageError
from streamasr.session.batch import engine_step

log = logging.getLogger("streamasr")

NOISE_BLOCKS = 4096  # noise is drawn in bulk and handed over a block at a time


def measure_engine(
    recognizer: Recognizer,
    *,
    steps: int = 12,
    feed_ms: float = 0.5,
    max_audio_s: float = 60.0,
    seed: int = 0,
) -> EngineTiming:
    """Feed low noise `feed_ms` at a time; note the audio fed whenever a step runs, and the
    step's time, until `steps` steps ran (a ModelError if none ran in `max_audio_s`)."""
    if steps < 1:
        raise UsageError(f"measure at least one encoder step, not {steps}")
    sample_rate = recognizer.info.sample_rate_hz
    feed_samples = max(1, round(sample_rate * feed_ms / 1000))
    rng = np.random.default_rng(seed)
    stream = recognizer.create_stream()
    fed = 0
    limit = int(max_audio_s * sample_rate)
    step_audio: list[float] = []
    decode: list[float] = []
    noise = np.empty(0, dtype=np.float32)
    while len(step_audio) < steps and fed < limit:
        if noise.size < feed_samples:
            noise = (rng.standard_normal(NOISE_BLOCKS * feed_samples) * 1e-3).astype(np.float32)
        block, noise = noise[:feed_samples], noise[feed_samples:]
        stream.accept(sample_rate, block)
        fed += feed_samples
        while len(step_audio) < steps:
            stepped, elapsed_s = engine_step(recognizer, [stream], time.perf_counter)
            if not any(stepped):
                break
            step_audio.append(fed * 1000.0 / sample_rate)
            decode.append(elapsed_s * 1000.0)
    if not step_audio:
        raise ModelError(
            f"the engine ran no encoder step in {max_audio_s:g} s of audio; "
            "is this a streaming (online) model?"
        )
    log.debug("engine steps at %s ms of audio", step_audio)
    return EngineTiming(
        tuple(step_audio), tuple(decode), feed_samples * 1000.0 / sample_rate,
        fed * 1000.0 / sample_rate,
    )
