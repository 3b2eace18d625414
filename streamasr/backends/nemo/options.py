"""The NeMo engine's own options: a trained look-ahead, a head of a hybrid model, and trust.

Declared here once (parser, default, range, help); the commands offer them and every other
engine refuses them (backends/options.py says how).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from streamasr.backends.base import EngineOptions
from streamasr.backends.options import EngineOption, complete, one_of, switch
from streamasr.errors import UsageError

DECODERS = ("rnnt", "ctc")
MAX_CONTEXT = 100_000  # encoder steps (80 ms each): far past any trained context


def att_context_size(given: Any) -> tuple[int, int]:
    """`70,1` or `[70, 1]` (or a pair from a library caller) as a trained look-ahead L,R:
    the grammar of `latency` and `mask` too; a model's look-ahead is never unlimited."""
    from streamasr.analysis.mask import parse_att_context_size

    if isinstance(given, (tuple, list)):
        given = ",".join(str(v) for v in given)
    left, right = parse_att_context_size(str(given))
    for value in (left, right):
        if not 0 <= value <= MAX_CONTEXT:
            raise UsageError(
                f"--att-context-size {left},{right}: L and R are steps from 0 to "
                f"{MAX_CONTEXT}, as the model was trained (e.g. 70,1)"
            )
    return left, right


OPTIONS = (
    EngineOption(
        "att_context_size",
        "Trained look-ahead L,R (e.g. 70,1).",
        att_context_size, sweep="/", label="att", record="att_context_sizes", kind="latency",
        about="is for NeMo models",
        example="L,R (chunk R+1 frames of 80 ms)", metavar="L,R",
    ),
    EngineOption(
        "decoder", "Hybrid model's head: rnnt or ctc.",
        one_of("--decoder", DECODERS), kind="head",
        about="chooses a head of a hybrid NeMo model",
    ),
    EngineOption(
        "trust_model_config",
        "Load unknown .nemo classes: runs code.",
        switch, default=False, switch=True, kind="trust", about="is for NeMo .nemo files",
    ),
)

#: what this engine says when given another engine's option of a kind it does not have
LACKS = {
    "search": "the NeMo backend decodes with greedy search only",
    "precision": "the NeMo backend runs the .nemo's own weights; it has no int8 or fp32 exports",
}


@dataclass(frozen=True)
class NemoSettings:
    """The options above as the engine reads them, defaults filled in."""

    att_context_size: tuple[int, int] | None
    decoder: str | None
    trust_model_config: bool

    @classmethod
    def of(cls, options: EngineOptions) -> NemoSettings:
        return cls(**complete(OPTIONS, options.own))
