"""The latency budget of a NeMo cache-aware FastConformer setting, `att_context_size=[L, R]`."""

from __future__ import annotations

import math
from typing import Any

from streamasr.analysis.latency import ZERO_COMPUTE_NOTE, BudgetLine, LatencyBudget, _num
from streamasr.analysis.mask import UNLIMITED, validate_att_context_size
from streamasr.errors import UsageError


def nemo_budget(
    left: int,
    right: int,
    *,
    style: str = "chunked_limited",
    layers: int = 17,
    subsampling: int = 8,
    window_stride_ms: float = 10.0,
) -> LatencyBudget:
    """The budget of `att_context_size=[left, right]` in NeMo's arithmetic.

    Defaults follow NeMo's shipped cache-aware streaming config: 17 layers, 8x subsampling,
    10 ms window stride.
    """
    validate_att_context_size(left, right, style)
    if layers < 1:
        raise UsageError(f"--layers {layers}: use 1 or more layers")
    if subsampling < 1:
        raise UsageError(f"--subsampling {subsampling}: use a factor >= 1 (FastConformer: 8)")
    step = subsampling * window_stride_ms
    stride = _num(window_stride_ms)
    unlimited_left = left == UNLIMITED
    lines = [
        BudgetLine(
            "step_ms", "encoder step", step, "ms",
            f"subsampling x window stride = {subsampling} x {stride} ms",
        )
    ]
    settings: dict[str, Any] = {
        "att_context_size": [left, right], "style": style, "layers": layers,
        "subsampling": subsampling, "window_stride_ms": window_stride_ms,
    }
    notes = [ZERO_COMPUTE_NOTE]
    if style == "chunked_limited":
        chunk_size = right + 1
        chunk_ms = chunk_size * step
        look_ms = right * step
        lines += [
            BudgetLine(
                "chunk_ms", "chunk", chunk_ms, "ms",
                f"(R + 1) x step = {chunk_size} x {_num(step)} ms",
                f"{chunk_size} encoder step{'s' if chunk_size != 1 else ''}",
            ),
            BudgetLine(
                "lookahead_ms", "worst-case look-ahead (first step of a chunk)", look_ms, "ms",
                f"R x step = {right} x {_num(step)} ms",
                "NeMo's formula: att_context_size[1] x subsampling_factor x window_stride",
            ),
            BudgetLine(
                "lookahead_last_ms", "look-ahead of a chunk's last step", 0.0, "ms",
                "it waits for no later step",
            ),
            BudgetLine(
                "average_ms", "average look-ahead (cache-aware paper)", look_ms / 2, "ms",
                f"R x step / 2 = {_num(look_ms)} / 2",
                "half the worst case, the convention of arXiv:2312.17279",
            ),
            BudgetLine(
                "eil_ms", "EIL, Emformer convention", chunk_ms / 2, "ms",
                f"(R + 1) x step x 0.5 = {_num(chunk_ms)} x 0.5",
                "the whole chunk as Emformer's center block, discounted by 0.5",
            ),
        ]
        if unlimited_left:
            lines += [
                BudgetLine("history_s", "history (left context)", math.inf, "s",
                           "L = -1: every earlier step"),
                BudgetLine("history_chunks", "history in chunks", math.inf, "chunks",
                           "L = -1: every earlier chunk"),
            ]
        else:
            lines += [
                BudgetLine("history_s", "history (left context)", left * step / 1000, "s",
                           f"L x step = {left} x {_num(step)} ms"),
                BudgetLine("history_chunks", "history in chunks", left // chunk_size, "chunks",
                           f"L // (R + 1) = {left} // {chunk_size}"),
            ]
        lines.append(
            BudgetLine(
                "depth_lookahead_ms", f"look-ahead through {layers} layers", look_ms, "ms",
                "R x step, whatever the depth",
                "no step sees past its chunk, so depth adds nothing",
            )
        )
        title = f"NeMo att_context_size=[{left},{right}], chunked_limited"
    else:
        if right == UNLIMITED:
            per_layer = math.inf
            depth_ms = math.inf
            depth_formula = "R = -1: the whole future (offline)"
        else:
            per_layer = right * step
            depth_ms = layers * right * step
            depth_formula = f"layers x R x step = {layers} x {right} x {_num(step)} ms"
        lines += [
            BudgetLine(
                "layer_lookahead_ms", "look-ahead per layer", per_layer, "ms",
                f"R x step = {right} x {_num(step)} ms" if right != UNLIMITED else "R = -1",
            ),
            BudgetLine(
                "lookahead_ms", f"look-ahead through {layers} layers", depth_ms, "ms",
                depth_formula,
                "a band mask: each layer looks R steps past the last one's outputs",
            ),
            BudgetLine(
                "average_ms", "average look-ahead", depth_ms, "ms",
                "= worst case: every step waits the same",
            ),
        ]
        if unlimited_left:
            lines.append(BudgetLine("history_s", "history per layer", math.inf, "s",
                                    "L = -1: every earlier step"))
        else:
            lines += [
                BudgetLine("history_s", "history per layer", left * step / 1000, "s",
                           f"L x step = {left} x {_num(step)} ms"),
                BudgetLine("depth_history_s", f"history through {layers} layers",
                           layers * left * step / 1000, "s",
                           f"layers x L x step = {layers} x {left} x {_num(step)} ms"),
            ]
        title = f"NeMo att_context_size=[{left},{right}], regular (band)"
        notes.append(
            "The band's look-ahead adds up layer by layer; chunked_limited keeps it at "
            "R x step at any depth."
        )
    return LatencyBudget(title, "nemo", settings, tuple(lines), tuple(notes))


# --- WeNet U2-style chunks counted in encoder steps ----------------------------------------
