"""Attention masks of streaming encoders, and what each output depends on through depth.

Rows are queries, columns are keys; True means "may attend". The rules are NeMo's
(`ConformerEncoder._create_masks`) written out without torch:

- chunked_limited, att_context_size=[L, R]: chunk_size = R + 1, left_chunks = L // chunk_size
  (unlimited when L = -1); step i sees step j when 0 <= chunk(i) - chunk(j) <= left_chunks.
- regular, [L, R]: a band, i - L <= j <= i + R (-1 on either side means unlimited).
- WeNet/icefall chunks (--chunk N --left-chunks K) are the chunked_limited rule with
  chunk_size = N and left_chunks = K (-1 = unlimited).

Stacking layers composes the masks: after N layers output i depends on input j when there is
a path i -> ... -> j through N masks (the boolean matrix power). In the band style the
look-ahead grows by R per layer; in the chunk style it never passes the chunk's end.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from streamasr.errors import UsageError

Style = Literal["chunked_limited", "regular"]
STYLES: tuple[str, ...] = ("chunked_limited", "regular")
UNLIMITED = -1
MAX_STEPS = 200  # a drawing wider than any terminal says nothing more
MAX_LAYERS = 1000  # deeper than any encoder; the receptive field stops growing long before


def check_mask_numbers(steps: int, chunk: int | None, left_chunks: int, layers: int) -> None:
    """Refuse sizes that cannot be drawn or mean nothing, before any matrix is built."""
    if not 1 <= steps <= MAX_STEPS:
        raise UsageError(
            f"--steps {steps}: use 1 to {MAX_STEPS} steps (the drawing must fit a terminal)"
        )
    if chunk is not None and not 1 <= chunk <= MAX_STEPS:
        raise UsageError(f"--chunk {chunk}: use 1 to {MAX_STEPS} encoder steps")
    if not UNLIMITED <= left_chunks <= MAX_STEPS:
        raise UsageError(
            f"--left-chunks {left_chunks}: use 0 to {MAX_STEPS} chunks, or -1 for unlimited"
        )
    if not 1 <= layers <= MAX_LAYERS:
        raise UsageError(f"--layers {layers}: use 1 to {MAX_LAYERS} layers")


def parse_att_context_size(text: str) -> tuple[int, int]:
    """Parse "70,13" or "[70, 13]" into (left, right)."""
    cleaned = text.strip().strip("[]()").replace(" ", "")
    parts = cleaned.split(",")
    try:
        if len(parts) != 2:
            raise ValueError(text)
        left, right = int(parts[0]), int(parts[1])
    except ValueError:
        raise UsageError(
            f"--att-context-size {text!r}: give two whole numbers L,R (LEFT,RIGHT context in "
            "frames), e.g. 70,13 or [70, 13] (-1 = unlimited, for the arithmetic of latency "
            "and mask)"
        ) from None
    return left, right


def validate_att_context_size(left: int, right: int, style: str) -> None:
    """Reject what NeMo rejects, with the reason and the nearest valid settings."""
    if style not in STYLES:
        raise UsageError(f"--style {style!r} is unknown; use one of: {', '.join(STYLES)}")
    for name, value in (("left", left), ("right", right)):
        if value < UNLIMITED:
            raise UsageError(
                f"att_context_size {name} context {value} is negative; use a step count "
                "or -1 for unlimited"
            )
    if style == "chunked_limited":
        if right == UNLIMITED:
            raise UsageError(
                "att_context_size[1] = -1 (unlimited right context) is not a chunk: "
                "chunked_limited needs a right context >= 0, or use --style regular"
            )
        chunk_size = right + 1
        if left > 0 and left % chunk_size:
            lower = left - left % chunk_size
            upper = lower + chunk_size
            raise UsageError(
                f"att_context_size [{left}, {right}]: for chunked_limited the left context "
                f"must be a multiple of the chunk size att_context_size[1] + 1 = {chunk_size} "
                f"(NeMo rejects it too); use [{lower}, {right}] or [{upper}, {right}]"
            )


def validate_chunks(chunk_size: int, left_chunks: int) -> None:
    """Check WeNet/icefall style chunk settings."""
    if chunk_size < 1:
        raise UsageError(f"--chunk {chunk_size}: a chunk holds at least one step")
    if left_chunks < UNLIMITED:
        raise UsageError(
            f"--left-chunks {left_chunks}: use a number of chunks >= 0, or -1 for unlimited"
        )


def chunk_mask(steps: int, chunk_size: int, left_chunks: int) -> np.ndarray:
    """Chunk rule: see your own chunk and `left_chunks` earlier ones (-1: all earlier)."""
    validate_chunks(chunk_size, left_chunks)
    chunk_idx = np.arange(steps) // chunk_size
    diff_chunks = chunk_idx[:, None] - chunk_idx[None, :]
    visible = diff_chunks >= 0
    if left_chunks != UNLIMITED:
        visible &= diff_chunks <= left_chunks
    return visible


def chunked_limited_mask(steps: int, left: int, right: int) -> np.ndarray:
    """NeMo's chunked_limited mask for att_context_size=[left, right]."""
    validate_att_context_size(left, right, "chunked_limited")
    chunk_size = right + 1
    left_chunks = UNLIMITED if left == UNLIMITED else left // chunk_size
    return chunk_mask(steps, chunk_size, left_chunks)


def regular_mask(steps: int, left: int, right: int) -> np.ndarray:
    """NeMo's regular (band) mask: `left` steps back and `right` steps ahead."""
    validate_att_context_size(left, right, "regular")
    idx = np.arange(steps)
    offset = idx[None, :] - idx[:, None]  # key - query
    visible = np.ones((steps, steps), dtype=bool)
    if left != UNLIMITED:
        visible &= offset >= -left
    if right != UNLIMITED:
        visible &= offset <= right
    return visible


def receptive_field(mask: np.ndarray, layers: int) -> np.ndarray:
    """Which inputs each output depends on after `layers` layers with this mask.

    Every mask here lets a step see itself, so the paths of N layers include those of fewer
    (the residual connections give the same result).
    """
    if not 1 <= layers <= MAX_LAYERS:
        raise UsageError(f"--layers {layers}: use 1 to {MAX_LAYERS} layers")
    step = mask.astype(np.int64)
    reach = step.copy()
    for _ in range(layers - 1):
        grown = ((reach @ step) > 0).astype(np.int64)
        if np.array_equal(grown, reach):  # a fixed point: more layers reach nothing new
            break
        reach = grown
    return reach > 0


def lookahead_steps(matrix: np.ndarray) -> tuple[int, ...]:
    """For each query row, how many steps past itself it sees (0 if none)."""
    idx = np.arange(matrix.shape[0])
    out = []
    for i in idx:
        seen = np.flatnonzero(matrix[i])
        out.append(int(max(seen.max() - i, 0)) if seen.size else 0)
    return tuple(out)


def history_steps(matrix: np.ndarray) -> tuple[int, ...]:
    """For each query row, how many steps before itself it sees (0 if none)."""
    out = []
    for i in range(matrix.shape[0]):
        seen = np.flatnonzero(matrix[i])
        out.append(int(max(i - seen.min(), 0)) if seen.size else 0)
    return tuple(out)


@dataclass(frozen=True)
class MaskReport:
    """A mask, its receptive field after `layers` layers, and the settings that made it."""

    style: str
    steps: int
    layers: int
    left: int  # steps (regular) or as given in att_context_size; -1 unlimited
    right: int
    chunk_size: int  # 0 for the regular band style, which has no chunks
    left_chunks: int  # -1 unlimited; 0 for the regular style
    source: str  # "att_context_size" or "chunks"
    mask: np.ndarray = field(compare=False, repr=False)
    receptive: np.ndarray = field(compare=False, repr=False)

    @property
    def chunk_starts(self) -> tuple[int, ...]:
        """Indices where a new chunk begins (for drawing boundaries); empty for band style."""
        if not self.chunk_size:
            return ()
        return tuple(range(0, self.steps, self.chunk_size))

    def to_dict(self) -> dict[str, object]:
        """Plain data for `--format json`."""
        data: dict[str, object] = {
            "style": self.style,
            "source": self.source,
            "steps": self.steps,
            "layers": self.layers,
            "rows": "query",
            "columns": "key",
            "chunk_size": self.chunk_size or None,
            "left_chunks": self.left_chunks if self.chunk_size else None,
            "mask": self.mask.tolist(),
            "lookahead_steps": list(lookahead_steps(self.mask)),
            "history_steps": list(history_steps(self.mask)),
        }
        if self.source == "att_context_size":
            data["att_context_size"] = [self.left, self.right]
        if self.layers > 1:
            data["receptive_field"] = self.receptive.tolist()
            data["receptive_field_lookahead_steps"] = list(lookahead_steps(self.receptive))
            data["receptive_field_history_steps"] = list(history_steps(self.receptive))
        return data


def build_mask_report(
    steps: int,
    *,
    att_context_size: tuple[int, int] | None = None,
    style: str = "chunked_limited",
    chunk: int | None = None,
    left_chunks: int = UNLIMITED,
    layers: int = 1,
) -> MaskReport:
    """The one entry point for `streamasr mask`: NeMo settings or WeNet/icefall chunks."""
    if steps < 1:
        raise UsageError(f"--steps {steps}: draw at least one step")
    if (att_context_size is None) == (chunk is None):
        raise UsageError(
            "give either --att-context-size LEFT,RIGHT (NeMo) or --chunk N (WeNet/icefall "
            "chunks, with --left-chunks K), not both and not neither"
        )
    if att_context_size is not None:
        left, right = att_context_size
        validate_att_context_size(left, right, style)
        if style == "regular":
            matrix = regular_mask(steps, left, right)
            chunk_size, n_left = 0, 0
        else:
            matrix = chunked_limited_mask(steps, left, right)
            chunk_size = right + 1
            n_left = UNLIMITED if left == UNLIMITED else left // chunk_size
        source = "att_context_size"
    else:
        chunk = int(chunk or 0)
        if style != "chunked_limited":
            raise UsageError("--chunk draws chunks; --style regular needs --att-context-size")
        validate_chunks(chunk, left_chunks)
        matrix = chunk_mask(steps, chunk, left_chunks)
        chunk_size, n_left = chunk, left_chunks
        left = UNLIMITED if left_chunks == UNLIMITED else left_chunks * chunk
        right = chunk - 1
        source = "chunks"
    return MaskReport(
        style=style,
        steps=steps,
        layers=layers,
        left=left,
        right=right,
        chunk_size=chunk_size,
        left_chunks=n_left,
        source=source,
        mask=matrix,
        receptive=receptive_field(matrix, layers),
    )
