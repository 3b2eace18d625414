"""The sherpa-onnx engine's own options: what its exports and decoders can be asked for.

Declared here once (parser, default, range, help); the commands offer them and every other
engine refuses them (backends/options.py says how).
"""

from __future__ import annotations

from dataclasses import dataclass

from streamasr.backends.base import EngineOptions
from streamasr.backends.options import (
    EngineOption,
    complete,
    one_of,
    real_number,
    switch,
    text,
    whole_number,
)

DECODING_METHODS = ("greedy_search", "modified_beam_search")
CHUNK_RANGE = (1, 1024)  # 50 Hz frames: 20 ms to 20 s
HOTWORDS_SCORE_RANGE = (0.0, 100.0)  # bonus per hotword token (log domain)
MAX_ACTIVE_PATHS = 4  # beam of modified_beam_search

OPTIONS = (
    EngineOption(
        "chunk",
        "Chunk in 50 Hz frames (16 = 320 ms); none exported: usage error (exit 2).",
        whole_number("--chunk", *CHUNK_RANGE, "50 Hz frames (16 = 320 ms)"),
        sweep=",", label="chunk", record="chunks", kind="latency",
        about="selects a sherpa-onnx export",
        example="(e.g. --chunk 16 = 320 ms)", metavar="FRAMES",
    ),
    EngineOption(
        "fp32", "fp32 files even if int8 exist.", switch, default=False, switch=True,
        kind="precision", about="chooses the fp32 files of a sherpa-onnx export",
    ),
    EngineOption(
        "decoding_method", "greedy_search or modified_beam_search.",
        one_of("--decoding-method", DECODING_METHODS), default="greedy_search",
        kind="search", about="is for sherpa-onnx transducers",
    ),
    EngineOption(
        "hotwords", "File of hotwords, one per line (needs modified_beam_search).", text,
        default="", kind="search", about="is for sherpa-onnx transducers", metavar="FILE",
    ),
    EngineOption(
        "hotwords_score", "Bonus per hotword token.",
        real_number("--hotwords-score", *HOTWORDS_SCORE_RANGE), default=1.5,
        kind="search", about="is for sherpa-onnx transducers",
    ),
)


@dataclass(frozen=True)
class SherpaSettings:
    """The options above as the engine reads them, defaults filled in."""

    chunk: int | None
    fp32: bool
    decoding_method: str
    hotwords: str
    hotwords_score: float

    @classmethod
    def of(cls, options: EngineOptions) -> SherpaSettings:
        return cls(**complete(OPTIONS, options.own))
