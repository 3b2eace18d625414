"""sherpa-onnx OnlineRecognizer behind the Recognizer protocol (CPU, streaming Zipformer)."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from streamasr.backends.base import EngineOptions, Hypothesis
from streamasr.errors import ModelError, UsageError
from streamasr.modeldir import ModelFiles

log = logging.getLogger("streamasr")

DECODING_METHODS = ("greedy_search", "modified_beam_search")
ENGINE_SAMPLE_RATE = 16000


def check_engine_options(options: EngineOptions, kind: str) -> None:
    """Refuse combinations the engine would silently ignore."""
    if options.decoding_method not in DECODING_METHODS:
        raise UsageError(
            f"--decoding-method {options.decoding_method!r} is not supported; "
            f"use one of: {', '.join(DECODING_METHODS)}"
        )
    if options.hotwords_file:
        if options.decoding_method != "modified_beam_search":
            raise UsageError(
                "--hotwords only works with --decoding-method modified_beam_search "
                "(greedy search ignores them); add --decoding-method modified_beam_search"
            )
        if kind != "transducer":
            raise UsageError("--hotwords needs a transducer model; this model is CTC")
        if not Path(options.hotwords_file).is_file():
            raise UsageError(f"--hotwords file {options.hotwords_file} does not exist")
    if options.threads < 1:
        raise UsageError(f"--threads must be at least 1, got {options.threads}")


@contextlib.contextmanager
def quiet_native_stderr() -> Iterator[None]:
    """Silence messages the C++ engine writes straight to fd 2 (e.g. 'Creating a resampler').

    They are informational, not errors, and would break the Rich live display; streamasr logs
    the same fact itself at debug level.
    """
    sys.stderr.flush()
    try:
        saved = os.dup(2)
    except OSError:
        yield
        return
    with open(os.devnull, "wb") as devnull:
        os.dup2(devnull.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)


class SherpaRecognizer:
    """A loaded sherpa-onnx streaming model."""

    def __init__(self, files: ModelFiles, options: EngineOptions) -> None:
        import sherpa_onnx

        check_engine_options(options, files.kind)
        self.files = files
        self.options = options
        endpoint = options.endpoint
        common = dict(
            tokens=str(files.tokens),
            num_threads=options.threads,
            sample_rate=ENGINE_SAMPLE_RATE,
            feature_dim=80,
            enable_endpoint_detection=endpoint.enabled,
            rule1_min_trailing_silence=endpoint.rule1_s,
            rule2_min_trailing_silence=endpoint.rule2_s,
            rule3_min_utterance_length=endpoint.rule3_s,
            decoding_method=options.decoding_method,
        )
        try:
            if files.kind == "transducer":
                self.engine = sherpa_onnx.OnlineRecognizer.from_transducer(
                    encoder=str(files.encoder),
                    decoder=str(files.decoder),
                    joiner=str(files.joiner),
                    max_active_paths=options.max_active_paths,
                    hotwords_file=options.hotwords_file,
                    hotwords_score=options.hotwords_score,
                    **common,
                )
            else:
                self.engine = sherpa_onnx.OnlineRecognizer.from_zipformer2_ctc(
                    model=str(files.encoder), **common
                )
        except (RuntimeError, ValueError) as exc:
            raise ModelError(
                f"sherpa-onnx could not load model {files.directory}: {exc}. "
                "Check that the ONNX files are complete streaming exports"
            ) from exc

    @property
    def description(self) -> str:
        """Model, export and decoding settings in one line, for summaries."""
        return (
            f"{self.files.name} ({self.files.kind}, {self.files.encoder.name}, "
            f"chunk {self.files.chunk} = {self.files.chunk_s * 1000:.0f} ms, "
            f"{self.options.decoding_method}, {self.options.threads} threads)"
        )

    @property
    def chunk_s(self) -> float:
        """Seconds of audio per encoder step."""
        return self.files.chunk_s

    def create_stream(self) -> SherpaStream:
        """Open a new stream on this model."""
        return SherpaStream(self.engine)

    def decode_many(self, streams: list[SherpaStream]) -> int:
        """One batched encoder step over every stream that has a chunk ready."""
        ready = [s for s in streams if self.engine.is_ready(s.stream)]
        if ready:
            self.engine.decode_streams([s.stream for s in ready])
        return len(ready)


class SherpaStream:
    """One sherpa-onnx OnlineStream with the engine it belongs to."""

    def __init__(self, engine: object) -> None:
        self.engine = engine
        self.stream = engine.create_stream()
        self._announced_rate = ENGINE_SAMPLE_RATE

    def accept(self, sample_rate: int, samples: np.ndarray) -> None:
        """Buffer audio; sherpa-onnx resamples non-16 kHz audio itself."""
        if sample_rate != self._announced_rate:
            log.debug("engine resamples %d Hz input to %d Hz", sample_rate, ENGINE_SAMPLE_RATE)
            self._announced_rate = sample_rate
            with quiet_native_stderr():
                self.stream.accept_waveform(sample_rate, samples)
            return
        self.stream.accept_waveform(sample_rate, samples)

    def decode_step(self) -> bool:
        """Run one encoder chunk if one is ready."""
        if not self.engine.is_ready(self.stream):
            return False
        self.engine.decode_stream(self.stream)
        return True

    def text(self) -> str:
        """Current text of the open segment."""
        return self.engine.get_result(self.stream).strip()

    def hypothesis(self) -> Hypothesis:
        """Current text, tokens and absolute token times."""
        result = self.engine.get_result_all(self.stream)
        start = float(result.start_time)
        return Hypothesis(
            text=result.text.strip(),
            tokens=tuple(result.tokens),
            token_times_s=tuple(np.round(np.add(result.timestamps, start), 3).tolist()),
            segment_start_s=start,
        )

    def is_endpoint(self) -> bool:
        """True when an endpoint rule fired for the open segment."""
        return bool(self.engine.is_endpoint(self.stream))

    def reset(self) -> None:
        """Begin a new segment after an endpoint."""
        self.engine.reset(self.stream)

    def input_finished(self) -> None:
        """No more audio will come; lets the engine process what it holds."""
        self.stream.input_finished()
