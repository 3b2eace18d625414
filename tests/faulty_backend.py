"""Test backends that return what no backend may: the energy backend with one fault each.

`--backend faulty_backend:NAN_TIME` (and DECREASING_TIMES, BYTES_TOKEN, BYTES_TEXT,
NONE_HYPOTHESIS) with this folder on PYTHONPATH; the fault appears from the second token of a
segment on, so the first partial is good and reaches the output before the core refuses the
bad one. NAN_CHUNK, NAN_FRAME and ZERO_RATE report sizes no engine can have in their
BackendInfo, refused when the model loads. ESCAPES is no fault the core refuses: its tokens
hold terminal escape sequences (CSI, OSC, C1, NUL, backspace) and forged caption lines, which
every human-facing output must show without acting on them.
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


#: what ESCAPES says in place of its tokens B1, B2, B3, ...: each piece tries another trick
HOSTILE_PIECES = (
    "\x1b[2J\x1b[31mred\x1b[0m",  # CSI: clear the screen, colour
    " \x1b]0;owned\x07title",  # OSC: set the window title
    " \x9b1Ac1\x00nul\x08\x7f",  # C1 CSI (cursor up), NUL, backspace, DEL
    " x\r\n\n99\n00:00:00,000 --> 00:09:00,000\nforged",  # a caption cue of its own
    " \u2028sep\x1bPdcs\x1b\\",  # line separator, DCS ... ST
)


def _hostile(hyp: Hypothesis) -> Hypothesis:
    tokens = tuple(HOSTILE_PIECES[i % len(HOSTILE_PIECES)] for i in range(len(hyp.tokens)))
    return dataclasses.replace(hyp, text="".join(tokens), tokens=tokens)


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
ESCAPES = _entry("faulty-escapes", _hostile)
