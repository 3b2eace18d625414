"""Test backends that return what no backend may: the energy backend with one fault each.

`--backend faulty_backend:NAN_TIME` (and DECREASING_TIMES, BYTES_TOKEN, BYTES_TEXT,
NONE_HYPOTHESIS) with this folder on PYTHONPATH; the fault appears from the second token of a
segment on, so the first partial is good and reaches the output before the core refuses the
bad one. NAN_CHUNK, NAN_FRAME and ZERO_RATE report sizes no engine can have in their
BackendInfo, refused when the model loads.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

from energy_backend import BACKEND, EnergyRecognizer, EnergyStream

from streamasr.backends.base import BackendEntry, EngineOptions, Hypothesis

Fault = Callable[[Hypothesis], Hypothesis]


def _nan_time(hyp: Hypothesis) -> Hypothesis:
    return dataclasses.replace(hyp, token_times_s=(*hyp.token_times_s[:-1], float("nan")))


def _decreasing_times(hyp: Hypothesis) -> Hypothesis:
    times = hyp.token_times_s
    return dataclasses.replace(hyp, token_times_s=(*times[:-1], times[0] - 0.1))


def _bytes_token(hyp: Hypothesis) -> Hypothesis:
    return dataclasses.replace(hyp, tokens=(*hyp.tokens[:-1], hyp.tokens[-1].encode()))


def _bytes_text(hyp: Hypothesis) -> Hypothesis:
    return dataclasses.replace(hyp, text=hyp.text.encode())


def _none(hyp: Hypothesis) -> Any:
    return None


class FaultyStream(EnergyStream):
    def __init__(self, fault: Fault) -> None:
        super().__init__()
        self._fault = fault

    def hypothesis(self) -> Hypothesis:
        hyp = super().hypothesis()
        return self._fault(hyp) if len(hyp.tokens) >= 2 else hyp


class FaultyRecognizer(EnergyRecognizer):
    def __init__(
        self, options: EngineOptions, name: str, fault: Fault, **info: Any
    ) -> None:
        super().__init__(options)
        self.info = dataclasses.replace(self.info, backend=name, **info)
        self._fault = fault

    def create_stream(self) -> FaultyStream:
        return FaultyStream(self._fault)


def _entry(name: str, fault: Fault = lambda hyp: hyp, **info: Any) -> BackendEntry:
    return dataclasses.replace(
        BACKEND,
        name=name,
        summary=f"test backend with a fault: {name}",
        load=lambda model, options: FaultyRecognizer(options, name, fault, **info),
    )


NAN_TIME = _entry("faulty-nan-time", _nan_time)
DECREASING_TIMES = _entry("faulty-decreasing-times", _decreasing_times)
BYTES_TOKEN = _entry("faulty-bytes-token", _bytes_token)
BYTES_TEXT = _entry("faulty-bytes-text", _bytes_text)
NONE_HYPOTHESIS = _entry("faulty-none-hypothesis", _none)
NAN_CHUNK = _entry("faulty-nan-chunk", chunk_s=math.nan)
NAN_FRAME = _entry("faulty-nan-frame", output_frame_s=math.nan)
ZERO_RATE = _entry("faulty-zero-rate", sample_rate_hz=0)
