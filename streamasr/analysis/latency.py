"""What a streaming setting costs in milliseconds, derived line by line, and measured.

Every figure is a `BudgetLine` that carries the formula it came from, so the table shows the
arithmetic instead of asking to be trusted. This module holds what every engine shares: the
table itself, WeNet U2-style chunks counted in encoder steps (`--chunk N --subsampling 4`),
and the lines a measurement adds. It knows no engine: the budget a loaded model's declared
chunk and look-ahead imply is backends/declared_budget.py's (it reads a BackendInfo), and an
engine's own arithmetic lives with it: backends/sherpa/budget.py
(Zipformer exports, from `decode_chunk_len` and `T`), backends/nemo/budget.py
(`att_context_size`).

All derived latencies are algorithmic: they assume the network takes no time.
`with_measurement` adds what `latency --measure` found on this machine (`EngineTiming`: when
encoder steps actually ran and what each cost), measured by session/measure.py through the
stepping core.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace
from typing import Any

from streamasr.analysis.mask import UNLIMITED
from streamasr.errors import UsageError

FEATURE_SHIFT_MS = 10.0  # 100 Hz feature frames, the front end of every engine here
FBANK_SHIFT_MS = FEATURE_SHIFT_MS


@dataclass(frozen=True)
class BudgetLine:
    """One row of the latency table: a quantity, its value, and how it was obtained."""

    key: str
    quantity: str
    value: float  # math.inf means unlimited
    unit: str  # "ms", "s", "Hz", "steps", "chunks", "frames", "x"
    formula: str
    note: str = ""
    measured: bool = False
    flagged: bool = False  # a measured figure that disagrees with the derived one

    @property
    def text(self) -> str:
        """The value as shown: "1120 ms", "5.6 s", "unlimited"."""
        return format_value(self.value, self.unit)

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe: an unlimited value becomes null with text "unlimited"."""
        return {
            "key": self.key,
            "quantity": self.quantity,
            "value": None if math.isinf(self.value) else self.value,
            "unit": self.unit,
            "text": self.text,
            "formula": self.formula,
            "note": self.note,
            "measured": self.measured,
            "flagged": self.flagged,
        }


@dataclass(frozen=True)
class LatencyBudget:
    """A titled list of budget lines, the settings they came from, and footnotes."""

    title: str
    family: str  # "zipformer", "nemo", "chunk"
    settings: dict[str, Any]
    lines: tuple[BudgetLine, ...]
    notes: tuple[str, ...] = ()

    def get(self, key: str) -> BudgetLine:
        """The line with this key (KeyError names the keys there are)."""
        for line in self.lines:
            if line.key == key:
                return line
        raise KeyError(f"{key!r} not in budget; keys: {', '.join(self.keys())}")

    def keys(self) -> tuple[str, ...]:
        return tuple(line.key for line in self.lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "title": self.title,
            "family": self.family,
            "settings": dict(self.settings),
            "lines": [line.to_dict() for line in self.lines],
            "notes": list(self.notes),
        }


def _num(value: float) -> str:
    """Shortest honest rendering: 1120, 457.5, 0.83."""
    if math.isinf(value):
        return "unlimited"
    if abs(value - round(value)) < 1e-9:
        return str(int(round(value)))
    if abs(value) < 10:
        return f"{value:.2f}".rstrip("0").rstrip(".")
    return f"{value:.1f}".rstrip("0").rstrip(".")


def format_value(value: float, unit: str) -> str:
    if math.isinf(value):
        return "unlimited"
    if unit == "x":
        return f"{value:.3f}"
    return f"{_num(value)} {unit}"


ZERO_COMPUTE_NOTE = (
    "Algorithmic latencies: they assume the network takes no time. Compute comes on top "
    "(--measure adds it for a model it loads)."
)


def chunk_budget(
    chunk: int, *, subsampling: int = 4, left_chunks: int = UNLIMITED
) -> LatencyBudget:
    """`--chunk N` counted in encoder steps of `subsampling` x 10 ms, as WeNet's U2 does."""
    if chunk < 1:
        raise UsageError(f"--chunk {chunk}: use a positive number of encoder steps")
    if subsampling < 1:
        raise UsageError(f"--subsampling {subsampling}: use a factor >= 1 (U2: 4)")
    if left_chunks < UNLIMITED:
        raise UsageError(f"--left-chunks {left_chunks}: use >= 0, or -1 for unlimited")
    step = subsampling * FBANK_SHIFT_MS
    chunk_ms = chunk * step
    lines = [
        BudgetLine("step_ms", "encoder step", step, "ms",
                   f"subsampling x 10 ms = {subsampling} x 10 ms"),
        BudgetLine("chunk_ms", "chunk", chunk_ms, "ms",
                   f"chunk x step = {chunk} x {_num(step)} ms"),
        BudgetLine("worst_ms", "worst-case latency (U2 convention)", chunk_ms, "ms",
                   "the whole chunk", "U2's abstract quotes the chunk length"),
        BudgetLine("average_ms", "average latency (U2++ convention)", chunk_ms / 2, "ms",
                   f"chunk / 2 = {_num(chunk_ms)} / 2",
                   "U2++: latency ranges from 0 to the chunk, so the average is half"),
        BudgetLine("lookahead_ms", "worst-case look-ahead, NeMo convention",
                   (chunk - 1) * step, "ms",
                   f"(chunk - 1) x step = {chunk - 1} x {_num(step)} ms",
                   "counted from the end of a chunk's first step"),
    ]
    if left_chunks == UNLIMITED:
        lines.append(BudgetLine("history_s", "history (left context)", math.inf, "s",
                                "--left-chunks -1: every earlier chunk"))
    else:
        lines.append(BudgetLine("history_s", "history (left context)",
                                left_chunks * chunk_ms / 1000, "s",
                                f"left chunks x chunk = {left_chunks} x {_num(chunk_ms)} ms"))
    settings = {"chunk": chunk, "subsampling": subsampling, "left_chunks": left_chunks}
    notes = (
        ZERO_COMPUTE_NOTE,
        "The subsampling front end's own look-ahead is not counted here, as in U2.",
    )
    title = f"chunk of {chunk} encoder steps at {_num(step)} ms (WeNet U2 style)"
    return LatencyBudget(title, "chunk", settings, tuple(lines), notes)


# --- what a measurement found (session/measure.py measures) ---------------------------------


@dataclass(frozen=True)
class EngineTiming:
    """When each encoder step became possible (audio time) and what it cost (wall time)."""

    step_audio_ms: tuple[float, ...]
    decode_ms: tuple[float, ...]
    feed_ms: float
    audio_fed_ms: float

    @property
    def first_step_ms(self) -> float:
        return self.step_audio_ms[0]

    @property
    def step_interval_ms(self) -> float:
        """Median audio between consecutive steps."""
        gaps = [b - a for a, b in zip(self.step_audio_ms[:-1], self.step_audio_ms[1:], strict=True)]
        return statistics.median(gaps) if gaps else math.nan

    @property
    def median_decode_ms(self) -> float:
        return statistics.median(self.decode_ms)

    def to_dict(self) -> dict[str, Any]:
        return {
            "step_audio_ms": list(self.step_audio_ms),
            "decode_ms": list(self.decode_ms),
            "feed_ms": self.feed_ms,
            "audio_fed_ms": self.audio_fed_ms,
        }


def with_measurement(budget: LatencyBudget, timing: EngineTiming, threads: int) -> LatencyBudget:
    """Append the measured lines, flag disagreements, and end with the expected latency."""
    for key in ("first_step_ms", "step_interval_ms", "chunk_ms", "average_ms"):
        if key not in budget.keys():
            raise UsageError(
                f"--measure needs a budget derived from a model ({budget.title} has no {key}); "
                "pass --model"
            )
    derived_first = budget.get("first_step_ms").value
    derived_interval = budget.get("step_interval_ms").value
    chunk_ms = budget.get("chunk_ms").value
    average_ms = budget.get("average_ms").value
    first = timing.first_step_ms
    offset = first - derived_first
    tol = timing.feed_ms / 2 + 1e-6
    first_flag = abs(offset) > tol
    if first_flag:
        later = "later" if offset > 0 else "earlier"
        first_note = (
            f"derived {_num(derived_first)} ms: the engine runs {_num(abs(offset))} ms {later}"
            + (" (it waits for one fbank frame more than T)"
               if abs(offset - FBANK_SHIFT_MS) <= tol else "")
        )
    else:
        first_note = "matches the derived figure"
    interval = timing.step_interval_ms
    interval_flag = not math.isnan(interval) and abs(interval - derived_interval) > tol
    compute = timing.median_decode_ms
    feed = _num(timing.feed_ms)
    n = len(timing.decode_ms)
    shown = ", ".join(_num(t) for t in timing.step_audio_ms[:4]) + (", ..." if n > 4 else "")
    plural = "s" if threads != 1 else ""
    lines = list(budget.lines) + [
        BudgetLine(
            "measured_first_step_ms", "first encoder step ran after (measured)", first, "ms",
            f"audio fed when decode_batch() first ran a step, feeding {feed} ms at a time",
            first_note, measured=True, flagged=first_flag,
        ),
        BudgetLine(
            "measured_step_interval_ms", "encoder step interval (measured)", interval, "ms",
            f"median gap between the {n} steps",
            (f"derived {_num(derived_interval)} ms; " if interval_flag
             else "matches the derived figure; ") + f"steps ran at {shown} ms of audio",
            measured=True, flagged=interval_flag,
        ),
        BudgetLine(
            "measured_first_tokens_ms", "tokens can first appear (measured)", first, "ms",
            "audio fed at the first encoder step",
            "no output exists before the first encoder step", measured=True,
        ),
        BudgetLine(
            "decode_ms", f"compute per encoder step ({threads} thread{plural})", compute, "ms",
            f"median of {n} decode_batch() calls that ran a step, time.perf_counter",
            f"real-time factor {compute / chunk_ms:.3f} (compute / chunk)", measured=True,
        ),
        BudgetLine(
            "expected_worst_ms", "expected first-token latency, worst case", first + compute,
            "ms", f"measured first step + compute = {_num(first)} + {_num(compute)}",
            "speech starting at a chunk's first frame", measured=True,
        ),
        BudgetLine(
            "expected_ms", "expected first-token latency on this machine",
            average_ms + offset + compute, "ms",
            f"average + engine offset + compute = {_num(average_ms)} + {_num(offset)} "
            f"+ {_num(compute)}",
            "speech starting anywhere in a chunk; excludes the model's own token delay",
            measured=True,
        ),
    ]
    settings = dict(budget.settings, threads=threads, measure=timing.to_dict())
    return replace(budget, lines=tuple(lines), settings=settings)
