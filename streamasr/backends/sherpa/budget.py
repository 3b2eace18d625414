"""The latency budget of a sherpa-onnx streaming Zipformer export, from its metadata.

`decode_chunk_len` and `T` in the encoder's metadata count 100 Hz fbank frames (25 ms window,
10 ms shift, snip_edges=false); released models' values are the catalog's, so a budget needs
no download.
"""

from __future__ import annotations

from dataclasses import dataclass

from streamasr.analysis.latency import ZERO_COMPUTE_NOTE, BudgetLine, LatencyBudget, _num
from streamasr.backends.sherpa.onnx_meta import EncoderMetadata
from streamasr.distribution import catalog
from streamasr.errors import ModelError, ModelMismatchError, UsageError

FBANK_SHIFT_MS = 10.0  # 100 Hz feature frames
FBANK_WINDOW_MS = 25.0
#: With snip_edges=false a frame is centred on its 10 ms shift, so its window reaches this
#: far past the shift's end: (25 - 10) / 2 = 7.5 ms.
FBANK_TAIL_MS = (FBANK_WINDOW_MS - FBANK_SHIFT_MS) / 2
ZIPFORMER_OUTPUT_MS = 40.0  # 25 Hz encoder output: 2x front end, 2x output downsampling
CHUNK_FRAME_MS = 20.0  # --chunk counts 50 Hz frames
#: T - decode_chunk_len by model type: 7 for the subsampling convs (+ 2 x 3 for ConvNeXt)
PADS = {"zipformer2": 13, "zipformer": 7}


@dataclass(frozen=True)
class PublishedExport:
    """A released model's export settings, from the catalog's record of it (`engine_data`:
    model type, chunk and left context each).

    These are the values the released encoder files carry in their metadata, so
    `streamasr latency --model en-20M` works without downloading anything.
    """

    release: str
    model_type: str
    chunk: int  # 50 Hz frames
    left_context: int  # 50 Hz frames (left_context_len of the first stack); 0: not published
    decode_chunk_len: int
    T: int  # named as the metadata key is


def exports_of(entry: catalog.CatalogEntry) -> tuple[PublishedExport, ...]:
    """The Zipformer exports among a sherpa-onnx release's settings (type, chunk, left)."""
    exports = [(str(e[0]), int(e[1]), int(e[2])) for e in entry.engine_data if e[0] in PADS]
    return tuple(PublishedExport(entry.name, kind, chunk, left, 2 * chunk,
                                 2 * chunk + PADS[kind]) for kind, chunk, left in exports)


#: A view of the catalog, alias to release name (the catalog is the one table).
PUBLISHED_ALIASES: dict[str, str] = {
    alias: entry.name for entry in catalog.CATALOG for alias in entry.aliases
}


def published_export(name: str, chunk: int | None = None) -> PublishedExport:
    """A released Zipformer's export by alias or release name; the first one if several."""
    entry = catalog.find(name)
    if entry is None:
        raise ModelError(
            f"unknown model {name!r}; {catalog.did_you_mean(name)}. Or pass --model DIR with "
            "a sherpa-onnx streaming model directory"
        )
    exports = exports_of(entry)
    if not exports:
        raise ModelError(f"{entry.name} is a NeMo FastConformer, not a Zipformer export")
    if chunk is not None:
        chosen = tuple(e for e in exports if e.chunk == chunk)
        if not chosen:
            have = sorted({e.chunk for e in exports})
            raise ModelMismatchError(
                f"{entry.name} has no export for --chunk {chunk}; it was released with chunk "
                f"{', '.join(map(str, have))} (50 Hz frames, 16 = 320 ms)"
            )
        exports = chosen
    return exports[0]


def zipformer_budget(
    decode_chunk_len: int,
    T: int,  # named as the metadata key is
    *,
    left_context: int = 0,
    model_type: str = "zipformer2",
    source: str = "",
) -> LatencyBudget:
    """The budget of a Zipformer export from its two metadata numbers.

    `decode_chunk_len` and `T` count 100 Hz fbank frames; `left_context` counts 50 Hz frames
    (0 when not known).
    """
    if decode_chunk_len <= 0 or T < decode_chunk_len:
        raise ModelError(
            f"decode_chunk_len={decode_chunk_len}, T={T}: need 0 < decode_chunk_len <= T"
        )
    shift = FBANK_SHIFT_MS
    pad = T - decode_chunk_len
    chunk_ms = decode_chunk_len * shift
    look_ms = pad * shift
    tail = FBANK_TAIL_MS
    first_ms = T * shift + tail
    worst_ms = chunk_ms + look_ms + tail
    best_ms = look_ms + tail
    average_ms = look_ms + tail + chunk_ms / 2
    chunk50 = decode_chunk_len / 2
    if pad == PADS["zipformer2"]:
        pad_note = "7 frames for the subsampling convs + 2 x 3 for ConvNeXt"
    elif pad == PADS["zipformer"]:
        pad_note = "7 frames for the subsampling convs"
    else:
        pad_note = ""
    lines = [
        BudgetLine(
            "chunk_ms", "chunk (audio per encoder step)", chunk_ms, "ms",
            f"decode_chunk_len x 10 ms = {decode_chunk_len} x 10 ms",
            f"= --chunk {_num(chunk50)} x 20 ms (50 Hz frames)",
        ),
        BudgetLine(
            "lookahead_ms", "look-ahead (front end, past the chunk)", look_ms, "ms",
            f"(T - decode_chunk_len) x 10 ms = ({T} - {decode_chunk_len}) x 10 ms",
            pad_note,
        ),
        BudgetLine(
            "window_tail_ms", "fbank window past its last frame", tail, "ms",
            "(25 ms window - 10 ms shift) / 2, snip_edges=false",
        ),
        BudgetLine(
            "first_step_ms", "audio needed before the first encoder step", first_ms, "ms",
            f"T x 10 ms + 7.5 ms = {T} x 10 + 7.5",
            f"= chunk + look-ahead + tail = {_num(chunk_ms)} + {_num(look_ms)} + 7.5",
        ),
        BudgetLine(
            "step_interval_ms", "then one encoder step every", chunk_ms, "ms",
            "decode_chunk_len x 10 ms",
        ),
        BudgetLine(
            "worst_ms", "worst-case latency (audio at a chunk's first frame)", worst_ms, "ms",
            f"chunk + look-ahead + tail = {_num(chunk_ms)} + {_num(look_ms)} + 7.5",
        ),
        BudgetLine(
            "best_ms", "best case (audio at a chunk's last frame)", best_ms, "ms",
            f"look-ahead + tail = {_num(look_ms)} + 7.5",
        ),
        BudgetLine(
            "average_ms", "average algorithmic latency", average_ms, "ms",
            f"look-ahead + tail + chunk / 2 = {_num(look_ms)} + 7.5 + {_num(chunk_ms / 2)}",
            "mean over where in the chunk the audio falls",
        ),
        BudgetLine(
            "output_rate_hz", "encoder output frame rate", 1000 / ZIPFORMER_OUTPUT_MS, "Hz",
            "100 Hz / 2 (front end) / 2 (output downsampling) = one frame per 40 ms",
            f"{_num(chunk_ms / ZIPFORMER_OUTPUT_MS)} output frames per encoder step",
        ),
    ]
    if left_context > 0:
        lines.append(
            BudgetLine(
                "left_context_s", "left context (attention history)",
                left_context * CHUNK_FRAME_MS / 1000, "s",
                f"left_context_len x 20 ms = {left_context} x 20 ms",
                f"= {_num(left_context / chunk50)} chunks",
            )
        )
    settings = {"model_type": model_type, "decode_chunk_len": decode_chunk_len, "T": T,
                "chunk": chunk50 if chunk50 % 1 else int(chunk50)}
    if left_context > 0:
        settings["left_context"] = left_context
    title = f"{model_type} export, chunk {_num(chunk50)}"
    if source:
        title += f" ({source})"
    return LatencyBudget(title, "zipformer", settings, tuple(lines), (ZERO_COMPUTE_NOTE,))


def budget_from_metadata(meta: EncoderMetadata) -> LatencyBudget:
    """The budget of an exported encoder file, from its ONNX metadata."""
    return zipformer_budget(
        meta.decode_chunk_len, meta.T, left_context=meta.left_context,
        model_type=meta.model_type, source=f"metadata of {meta.path.name}",
    )


def budget_from_published(export: PublishedExport) -> LatencyBudget:
    """The budget of a released model from its published export settings."""
    return zipformer_budget(
        export.decode_chunk_len, export.T, left_context=export.left_context,
        model_type=export.model_type,
        source=f"{export.release}, published export settings",
    )


def budget_for_zipformer2_chunk(chunk: int) -> LatencyBudget:
    """Textbook zipformer2 arithmetic for `--chunk N` when no model is given."""
    if chunk < 1:
        raise UsageError(f"--chunk {chunk}: use a positive number of 50 Hz frames, e.g. 16")
    budget = zipformer_budget(
        2 * chunk, 2 * chunk + PADS["zipformer2"],
        source="no model read: decode_chunk_len = 2 x chunk, T = decode_chunk_len + 13",
    )
    return budget
