"""sherpa-onnx OnlineRecognizer behind the Recognizer protocol (CPU, streaming Zipformer)."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any  # sherpa_onnx's bindings carry no type information

import numpy as np

from streamasr.backends.base import (
    BackendInfo,
    EngineOptions,
    Hypothesis,
    RecognizerStream,
)
from streamasr.backends.sherpa.modeldir import ModelFiles
from streamasr.backends.sherpa.options import MAX_ACTIVE_PATHS, SherpaSettings
from streamasr.errors import ModelError, UsageError
from streamasr.text.prefix import Growing, Prefix
from streamasr.text.tokens import (
    APPEND_CHECK,
    AssembledText,
    PieceText,
    SpacedText,
    Vocabulary,
    read_vocabulary,
    shared_prefix_len,
)

log = logging.getLogger("streamasr")

ENGINE_SAMPLE_RATE = 16000
OUTPUT_FRAME_S = 0.04  # streaming Zipformer output rate: 25 Hz
NAME = "sherpa-onnx"  # as in entry.py, which the registry imports without this module
# encoder `model_type`s sherpa-onnx's transducer loader accepts by name. Without the name it
# opens a whole extra encoder session just to read this metadata value, which we have read
# already: about half of a load (docs/performance.md, "First sample").
NAMED_TRANSDUCER_TYPES = frozenset({"zipformer2", "zipformer", "conformer", "lstm"})


def check_engine_options(own: SherpaSettings, kind: str) -> None:
    """Refuse combinations the engine would silently ignore."""
    if own.hotwords:
        if own.decoding_method != "modified_beam_search":
            raise UsageError(
                "--hotwords only works with --decoding-method modified_beam_search "
                "(greedy search ignores them); add --decoding-method modified_beam_search"
            )
        if kind != "transducer":
            raise UsageError("--hotwords needs a transducer model; this model is CTC")
        if not Path(own.hotwords).exists():  # what it is: hotwords.read_phrases
            raise UsageError(f"--hotwords file {own.hotwords} does not exist")


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
        own = SherpaSettings.of(options)
        check_engine_options(own, files.kind)
        self.files = files
        self.options = options
        self.own = own
        self.vocabulary = read_vocabulary(files.tokens)
        with contextlib.ExitStack() as stack:
            hotword_setup: dict[str, object] = {}
            if own.hotwords and files.kind == "transducer":
                from streamasr.backends.sherpa.hotwords import (
                    HOTWORD_MIN_ACTIVE_PATHS,
                    engine_hotword_options,
                )

                hotword_setup = dict(
                    stack.enter_context(
                        engine_hotword_options(Path(own.hotwords), self.vocabulary, files.directory)
                    )
                )
                hotword_setup["max_active_paths"] = max(MAX_ACTIVE_PATHS, HOTWORD_MIN_ACTIVE_PATHS)
            self.engine = self._load(files, options.threads, own, hotword_setup)

    @staticmethod
    def _load(files: ModelFiles, threads: int, own: SherpaSettings, hotword_setup: dict) -> Any:
        """The engine, from the optimised graphs of the graph cache where it has them."""
        from streamasr.backends.sherpa.graph_cache import optimised_paths, refuse

        originals = list(files.onnx_files())
        graphs = optimised_paths(originals)
        if graphs == originals:
            return SherpaRecognizer._build(files, graphs, threads, own, hotword_setup)
        try:
            return SherpaRecognizer._build(files, graphs, threads, own, hotword_setup)
        except ModelError as exc:
            log.warning(
                "sherpa-onnx refused the cached optimised graphs (%s); loading the "
                "original files (STREAMASR_GRAPH_CACHE=0 skips the cache)",
                exc,
            )
            refuse([g for g in graphs if g not in originals], "sherpa-onnx refused it")
            return SherpaRecognizer._build(files, originals, threads, own, hotword_setup)

    @staticmethod
    def _build(
        files: ModelFiles,
        graphs: list[Path],
        threads: int,
        own: SherpaSettings,
        hotword_setup: dict,
    ) -> Any:
        import sherpa_onnx

        common = dict(
            tokens=str(files.tokens),
            num_threads=threads,
            sample_rate=ENGINE_SAMPLE_RATE,
            feature_dim=80,
            # endpointing is the core's (session/endpointing.py), the same for every engine
            enable_endpoint_detection=False,
            decoding_method=own.decoding_method,
        )
        try:
            if files.kind == "transducer":
                model_type = files.metadata.model_type
                transducer = dict(
                    model_type=model_type if model_type in NAMED_TRANSDUCER_TYPES else "",
                    max_active_paths=MAX_ACTIVE_PATHS,
                    hotwords_file=own.hotwords,
                    hotwords_score=own.hotwords_score,
                )
                transducer.update(hotword_setup)
                encoder, decoder, joiner = graphs
                return sherpa_onnx.OnlineRecognizer.from_transducer(
                    encoder=str(encoder),
                    decoder=str(decoder),
                    joiner=str(joiner),
                    **transducer,
                    **common,
                )
            return sherpa_onnx.OnlineRecognizer.from_zipformer2_ctc(model=str(graphs[0]), **common)
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
            f"{self.own.decoding_method}, {self.options.threads} threads)"
        )

    @property
    def chunk_s(self) -> float:
        """Seconds of audio per encoder step."""
        return self.files.chunk_s

    @property
    def info(self) -> BackendInfo:
        """What the core, bench and renderers need to know about this export."""
        return BackendInfo(
            backend=NAME,
            model_name=self.files.name,
            device="cpu",
            sample_rate_hz=ENGINE_SAMPLE_RATE,
            resamples_input=True,
            output_frame_s=OUTPUT_FRAME_S,
            chunk_s=self.files.chunk_s,
            lookahead_s=self.files.metadata.lookahead_frames * 0.01,
            token_type=self.vocabulary.token_type,
            model_files=self.files.onnx_files(),
            settings={
                "chunk": self.files.chunk,
                "kind": self.files.kind,
                "decoding_method": self.own.decoding_method,
                "threads": self.options.threads,
            },
        )

    def create_stream(self) -> SherpaStream:
        """Open a new stream on this model."""
        append_only = self.own.decoding_method == "greedy_search"
        return SherpaStream(self.engine, self.vocabulary, append_only)

    def decode_batch(
        self, streams: Sequence[RecognizerStream], *, checked: bool = False
    ) -> list[bool]:
        """One batched encoder step (`decode_streams`) over every stream with a chunk ready
        (all of them when `checked`: one GIL hand-over per step instead of one per stream)."""
        ours = [s for s in streams if isinstance(s, SherpaStream)]
        if len(ours) != len(streams):
            raise TypeError("decode_batch takes streams this recognizer created")
        if checked:
            if ours:
                self.engine.decode_streams([s.stream for s in ours])
            return [True] * len(ours)
        ready = [self.engine.is_ready(s.stream) for s in ours]
        if any(ready):
            self.engine.decode_streams([s.stream for s, r in zip(ours, ready, strict=True) if r])
        return ready


class SherpaStream:
    """One sherpa-onnx OnlineStream with the engine it belongs to."""

    def __init__(
        self, engine: Any, vocabulary: Vocabulary | None = None, append_only: bool = False
    ) -> None:
        self.engine = engine
        self.stream = engine.create_stream()
        self._announced_rate = ENGINE_SAMPLE_RATE
        # byte-level models: the engine's text is not whole characters, so text is built
        # from the token pieces (see streamasr.text.tokens)
        self._from_pieces = vocabulary is not None and vocabulary.token_type == "byte"
        # greedy search only appends to a hypothesis; beam search may revise earlier pieces.
        # Either way text is assembled only from what changed since the previous step.
        self._append_only = append_only
        self._piece_text = PieceText(append_only)
        self._spaced_text = SpacedText(append_only)
        self._finished = False
        # the segment's pieces and times, appended to in place while greedy search only
        # appends: each step's Hypothesis holds an O(1) snapshot (streamasr.text.prefix)
        self._piece_list: Growing[str] = Growing()
        self._time_list: Growing[float] = Growing()
        self._last_start = float("nan")  # segment start of the times in _time_list
        self._segment = 0
        self._reported_segment = -1
        self.dropped_bytes = 0  # bytes dropped at finals because they formed no character

    def accept(self, sample_rate: int, samples: np.ndarray) -> None:
        """Buffer audio; sherpa-onnx resamples non-16 kHz audio itself."""
        if sample_rate != self._announced_rate:
            log.debug("engine resamples %d Hz input to %d Hz", sample_rate, ENGINE_SAMPLE_RATE)
            self._announced_rate = sample_rate
            with quiet_native_stderr():
                self.stream.accept_waveform(sample_rate, samples)
            return
        self.stream.accept_waveform(sample_rate, samples)

    def ready(self) -> bool:
        """A chunk is buffered for the next step (the server feeds blocks until then)."""
        return bool(self.engine.is_ready(self.stream))

    def decode_step(self) -> bool:
        """Run one encoder chunk if one is ready."""
        if not self.engine.is_ready(self.stream):
            return False
        self.engine.decode_stream(self.stream)
        return True

    def hypothesis(self) -> Hypothesis:
        """Current text, tokens and absolute token times.

        sherpa-onnx hands out the whole hypothesis (its Python API has no way to ask for the
        pieces added since a step), so reading it stays proportional to the utterance, in
        C++ and pybind11; the text is assembled here only from what changed.
        """
        result = self.engine.get_result_all(self.stream)
        start = float(result.start_time)
        previous, previous_times = self._piece_list.snapshot(), self._time_list.snapshot()
        pieces = self._pieces(result)
        if self._from_pieces:
            text = self._assembled(pieces).text
            unchanged = self._piece_text.unchanged
        else:
            text = self._spaced_text.update(result.text)
            unchanged = shared_prefix_len(previous, pieces, self._append_only)
        times = self._times(result.timestamps, start, unchanged, len(pieces))
        if not self._append_only:
            # a beam may switch to a path with the same pieces at other frames
            unchanged = min(unchanged, shared_prefix_len(previous_times, times, False))
        return Hypothesis(
            text=text,
            tokens=pieces,
            token_times_s=times,
            segment_start_s=start,
            unchanged_tokens=unchanged,
        )

    def _times(self, raw: list[float], start: float, unchanged: int, count: int) -> Prefix:
        """Absolute token times, rounded to the millisecond. Greedy search never moves a
        token it has emitted, so within one segment only the times of new tokens are
        converted and appended: the cost of a step follows what it added, not the utterance."""
        keep = 0
        if self._append_only and start == self._last_start:
            keep = min(unchanged, len(self._time_list), count)
        self._last_start = start
        tail = np.round(np.add(raw[keep:count], start), 3).tolist()
        return self._time_list.replace(keep, tail)

    def _pieces(self, result: Any) -> Prefix[str]:
        """The token pieces; a build that hands out half characters keeps the last good ones.

        Greedy search only appends, so the pieces of the previous step stay where they are
        and only the new ones are appended: comparing this hypothesis with the last one,
        here and in the renderers, then costs what the step added, not the utterance.
        """
        try:
            raw = result.tokens
        except UnicodeDecodeError:
            log.debug("engine returned tokens that are not UTF-8; keeping the previous ones")
            return self._piece_list.snapshot()
        last = self._piece_list.snapshot()
        size = len(last)
        tail = max(0, size - APPEND_CHECK)
        if self._append_only and len(raw) >= size and tuple(raw[tail:size]) == last[tail:]:
            return self._piece_list.extend(raw[size:])
        return self._piece_list.replace(0, raw)

    def _assembled(self, pieces: Sequence[str]) -> AssembledText:
        """Whole characters; once no more audio can come, an incomplete tail is dropped."""
        final = self._finished and not self.engine.is_ready(self.stream)
        assembled = self._piece_text.update(pieces, final=final)
        if final and assembled.dropped_bytes and self._reported_segment != self._segment:
            self._report_dropped(assembled.dropped_bytes)
        return assembled

    def _report_dropped(self, count: int) -> None:
        self._reported_segment = self._segment
        self.dropped_bytes += count
        log.warning(
            "segment %d: dropped %d byte(s) the model emitted that form no complete character",
            self._segment,
            count,
        )

    def reset(self) -> None:
        """Begin a new segment after an endpoint."""
        if self._from_pieces:
            pieces = self._pieces(self.engine.get_result_all(self.stream))
            dropped = self._piece_text.update(pieces, final=True).dropped_bytes
            if dropped and self._reported_segment != self._segment:
                self._report_dropped(dropped)
        self.engine.reset(self.stream)
        self._piece_list = Growing()
        self._time_list = Growing()
        self._piece_text.reset()
        self._spaced_text.reset()
        self._segment += 1

    def input_finished(self) -> None:
        """No more audio will come; lets the engine process what it holds."""
        self._finished = True
        self.stream.input_finished()
