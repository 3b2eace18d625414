"""The latency budget of a loaded model of any backend, from what its BackendInfo declares.

It lives with the engines, not in analysis/latency.py, because it reads the engines'
protocol: the budget table below it stays engine-free, and an engine without arithmetic of
its own (a plugin) still gets a budget from the chunk and look-ahead it states.
"""

from __future__ import annotations

from typing import Any

from streamasr.analysis.latency import ZERO_COMPUTE_NOTE, BudgetLine, LatencyBudget, _num
from streamasr.backends.base import BackendInfo


def budget_from_info(info: BackendInfo) -> LatencyBudget:
    """What a loaded model's declared chunk and look-ahead imply, for any backend.

    The backend states its chunk, its worst-case look-ahead and its output frame; the first
    step is derived as a whole chunk plus the look-ahead past it. Engines whose look-ahead
    lies inside the chunk (NeMo chunked_limited) or whose first chunk is shorter step
    earlier: `--measure` shows by how much.
    """
    chunk_ms = info.chunk_s * 1000.0
    look_ms = info.lookahead_s * 1000.0
    frame_ms = info.output_frame_s * 1000.0
    first_ms = chunk_ms + look_ms
    first_formula = f"chunk + look-ahead = {_num(chunk_ms)} + {_num(look_ms)}"
    first_note = (
        "if the look-ahead lies past a full first chunk; an engine whose look-ahead lies "
        "inside its chunk, or whose first chunk is shorter, steps earlier (--measure)"
    )
    if info.first_step_s is not None:
        first_ms = info.first_step_s * 1000.0
        first_formula = f"first chunk as the {info.backend} backend derives it from the model"
        first_note = "a shorter first chunk; later steps come one chunk apart"
    average_ms = first_ms - chunk_ms / 2
    lines = (
        BudgetLine(
            "chunk_ms", "chunk (audio per encoder step)", chunk_ms, "ms",
            f"declared by the {info.backend} backend",
        ),
        BudgetLine(
            "lookahead_ms", "worst-case look-ahead", look_ms, "ms",
            f"declared by the {info.backend} backend",
        ),
        BudgetLine(
            "output_frame_ms", "output frame", frame_ms, "ms",
            "token times and final ends are counted in these",
        ),
        BudgetLine(
            "first_step_ms", "audio needed before the first encoder step", first_ms, "ms",
            first_formula,
            first_note,
        ),
        BudgetLine(
            "step_interval_ms", "then one encoder step every", chunk_ms, "ms", "chunk",
        ),
        BudgetLine(
            "average_ms", "average algorithmic latency", average_ms, "ms",
            f"first step - chunk / 2 = {_num(first_ms)} - {_num(chunk_ms / 2)}",
            "speech starting anywhere in the first chunk",
        ),
    )
    settings: dict[str, Any] = {
        "backend": info.backend,
        "model": info.model_name,
        "device": info.device,
        "chunk_ms": chunk_ms,
        "lookahead_ms": look_ms,
        "output_frame_ms": frame_ms,
        **{str(k): v for k, v in info.settings.items()},
    }
    title = f"{info.model_name} ({info.backend}): chunk {_num(chunk_ms)} ms"
    return LatencyBudget(title, info.backend, settings, lines, (ZERO_COMPUTE_NOTE,))
