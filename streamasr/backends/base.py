"""The protocol the streaming loop needs from an engine, and the options engines share."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np


@dataclass(frozen=True)
class Hypothesis:
    """What the engine currently believes for the open segment."""

    text: str
    tokens: tuple[str, ...] = ()
    token_times_s: tuple[float, ...] = ()  # absolute audio time of each token
    segment_start_s: float = 0.0
    # the model emitted its end-of-utterance token (models trained with one, e.g. parakeet EOU)
    end_of_utterance: bool = False


@dataclass(frozen=True)
class EndpointOptions:
    """sherpa-onnx endpoint rules (seconds).

    rule1: end after this much trailing silence even if nothing was recognised;
    rule2: end after this much trailing silence once something was recognised;
    rule3: end any utterance longer than this.
    """

    enabled: bool = True
    rule1_s: float = 2.4
    rule2_s: float = 1.2
    rule3_s: float = 20.0


@dataclass(frozen=True)
class EngineOptions:
    """Settings of the decoding engine, independent of the audio source."""

    threads: int = 1  # measured faster than 2 on 2 cores; see commands/common.py
    decoding_method: str = "greedy_search"
    max_active_paths: int = 4
    hotwords_file: str = ""
    hotwords_score: float = 1.5
    endpoint: EndpointOptions = EndpointOptions()


class RecognizerStream(Protocol):
    """One utterance stream inside an engine."""

    def accept(self, sample_rate: int, samples: np.ndarray) -> None: ...

    def decode_step(self) -> bool:
        """Run one encoder chunk if enough audio is buffered; False when nothing ran."""
        ...

    def text(self) -> str:
        """Current text only: cheap enough to ask after every encoder step."""
        ...

    def hypothesis(self) -> Hypothesis: ...

    def is_endpoint(self) -> bool: ...

    def reset(self) -> None:
        """Start a new segment; buffered audio is kept."""
        ...

    def input_finished(self) -> None: ...


class Recognizer(Protocol):
    """A loaded model that can open streams."""

    @property
    def description(self) -> str: ...

    @property
    def chunk_s(self) -> float: ...

    def create_stream(self) -> RecognizerStream: ...
