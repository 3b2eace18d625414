"""The protocol the streaming loop needs from an engine, and the settings every engine shares."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np

from streamasr.analysis.latency import LatencyBudget
from streamasr.backends.options import EngineOption, check_number
from streamasr.distribution.catalog import CatalogEntry
from streamasr.distribution.local_models import FolderFacts
from streamasr.errors import UsageError

#: Settings alone, by name, that an engine's arithmetic reads (chunk, att_context_size,
#: style, layers, subsampling): `streamasr latency` without a model; None: not given
BudgetSettings = Mapping[str, int | str | None]


@dataclass(frozen=True)
class Hypothesis:
    """What the engine currently believes for the open segment."""

    text: str
    # tuples, or (sherpa-onnx) O(1) snapshots of the segment's append-only lists that
    # behave as tuples (streamasr.text.prefix)
    tokens: Sequence[str] = ()
    token_times_s: Sequence[float] = ()  # absolute audio time of each token
    segment_start_s: float = 0.0
    # the model emitted its end-of-utterance token (models trained with one, e.g. parakeet EOU)
    end_of_utterance: bool = False
    # audio decoded in this segment so far, for engines whose steps differ in length (NeMo's
    # first chunk is shorter); None: every step decoded one chunk
    segment_decoded_s: float | None = None
    # leading tokens (with their times) the same as in this stream's previous hypothesis of
    # the segment: the core checks only the rest, so a step costs what it added. 0: all new
    unchanged_tokens: int = 0


@dataclass(frozen=True)
class EndpointOptions:
    """Endpoint rules (seconds), applied by the core's endpointer as sherpa-onnx counts them.

    rule1: end after this much trailing silence even if nothing was recognised;
    rule2: end after this much trailing silence once something was recognised;
    rule3: end any utterance longer than this.
    """

    enabled: bool = True
    rule1_s: float = 2.4
    rule2_s: float = 1.2
    rule3_s: float = 20.0


#: Engine threads by default. Measured with the full-size en-2023-06-26 architecture on a
#: 2-core machine (scripts/perf_report.py): one thread per engine is faster than two, per
#: stream and for batches, and more engines (bench --workers) use more cores better than more
#: threads per engine.
DEFAULT_THREADS = 1
THREADS_MAX = 64  # onnxruntime gains nothing past the cores of a large server; 100000 hangs


def check_threads(threads: int, option: str = "--threads") -> None:
    """Engine threads: at least one, at most THREADS_MAX."""
    check_number(option, threads, 1, THREADS_MAX, f"(more than {THREADS_MAX} never helps)")


def check_device_name(device: str) -> None:
    """cpu, cuda or cuda:N; whether the chosen engine can use it is its entry's `devices`."""
    prefix, _, index = device.partition(":")
    if device != "cpu" and device != "cuda" and not (prefix == "cuda" and index.isdigit()):
        raise UsageError(f"compute device {device!r} is not known; use cpu, cuda or cuda:N")


@dataclass(frozen=True)
class EngineOptions:
    """Settings of the decoding engine, independent of the audio source.

    `threads` and `device` mean the same to every engine and are checked here, where the
    object is built. `own` holds the chosen backend's declared options by name, already
    parsed by that backend (registry.engine_options builds it; an engine fills in its
    defaults for names it does not find). Endpointing is not the engine's: the core does it
    (StreamOptions.endpoint).
    """

    threads: int = DEFAULT_THREADS
    device: str = "cpu"  # "cpu" | "cuda" | "cuda:N"
    own: Mapping[str, object] = field(default_factory=dict)
    swept: str | None = None  # bench's sweep: the option whose values `own` holds, one load each

    def __post_init__(self) -> None:
        check_threads(self.threads)
        check_device_name(self.device)


@dataclass(frozen=True)
class BackendInfo:
    """What a loaded model declares, so the core, bench and renderers need not know the engine.

    `resamples_input`: the engine takes audio at any rate itself; otherwise the core resamples
    to `sample_rate_hz` before `accept`. `model_files` are hashed into bench run records.
    """

    backend: str
    model_name: str
    device: str
    sample_rate_hz: int
    resamples_input: bool
    output_frame_s: float
    chunk_s: float
    lookahead_s: float
    token_type: str  # "word" | "bpe" | "cjkchar" | "cjkchar+bpe" | "byte" | "char"
    model_files: tuple[Path, ...] = ()
    language: str = ""
    settings: Mapping[str, object] = field(default_factory=dict)
    # audio the first encoder step needs, derived from the model's configuration, where it
    # is not one whole chunk plus the look-ahead past it (NeMo: a shorter first chunk whose
    # look-ahead lies inside it); None: chunk_s + lookahead_s
    first_step_s: float | None = None


class RecognizerStream(Protocol):
    """One audio stream inside an engine, cut into segments (utterances) by the core."""

    def accept(self, sample_rate: int, samples: np.ndarray) -> None:
        """Buffer mono float32 audio (at the model's rate unless the backend resamples)."""
        ...

    def decode_step(self) -> bool:
        """Run one encoder chunk if enough audio is buffered; False when nothing ran.

        Returns only when the step's work is done (on a GPU: synchronised), so the time
        around it is the compute time.
        """
        ...

    def hypothesis(self) -> Hypothesis:
        """Text, tokens and absolute token times of the open segment."""
        ...

    def reset(self) -> None:
        """Start a new segment after an endpoint; buffered audio is kept."""
        ...

    def input_finished(self) -> None:
        """No more audio: let the engine decode what it holds (after the core's tail padding)."""
        ...


class Recognizer(Protocol):
    """A loaded model that can open streams and step several of them at once."""

    @property
    def info(self) -> BackendInfo: ...

    @property
    def description(self) -> str:
        """Model, export and decoding settings in one line, for summaries."""
        ...

    @property
    def chunk_s(self) -> float: ...

    def create_stream(self) -> RecognizerStream: ...

    def decode_batch(
        self, streams: Sequence[RecognizerStream], *, checked: bool = False
    ) -> list[bool]:
        """One encoder step over every given stream that has a chunk ready, batched where the
        engine can; returns which streams stepped. Same results as stepping each alone.

        `checked`: the caller has just seen each stream's `ready()` true and fed nothing since,
        so the engine need not ask again (the server's engine thread: sherpa-onnx lets go of
        the GIL in every question, and on a busy server each one waits to get it back).
        An engine may ignore it."""
        ...


@dataclass(frozen=True)
class Released:
    """A released model as its engine reads the catalog's data for it: the chunks released
    (50 Hz frames), the engine's own words for them (`models list --format json`) and the
    latency budget of the one `--chunk` picks (None: the first), with nothing downloaded."""

    chunks: tuple[int, ...]
    record: Mapping[str, object]
    budget: Callable[[int | None], LatencyBudget]


@dataclass(frozen=True)
class BackendEntry:
    """One engine for the registry: how to tell its models apart, how to load one, and the
    options it takes.

    `recognises` looks at the model name or path only (no engine import), so asking every
    backend costs nothing; `load` imports the engine. `options` are the engine's own settings
    (backends/options.py): the commands offer them and refuse them for every other engine.
    `devices`: "cpu", and "cuda" if it can run there. `label` names its models in messages
    ("NeMo"); `lacks` maps an option kind the engine does not have to the sentence it says
    when given another engine's option of that kind. `budget` is the engine's own latency
    arithmetic for `streamasr latency --model`; `arithmetic` its budget from settings alone
    (`streamasr latency --chunk 16`, no model read), None when the settings are not its own.
    """

    name: str
    summary: str
    recognises: Callable[[str | None], bool]
    load: Callable[[str | None, EngineOptions], Recognizer]
    aliases: tuple[str, ...] = ()
    options: tuple[EngineOption, ...] = ()
    devices: tuple[str, ...] = ("cpu",)
    label: str = ""
    lacks: Mapping[str, str] = field(default_factory=dict)
    # (model, options, measure) -> its declared LatencyBudget (analysis/latency.py); with
    # measure, that of the files latency --measure then loads (it measures them itself) and a
    # refusal of a model it cannot load; None: latency loads the model and derives the budget
    # from what it declares
    budget: Callable[[str | None, EngineOptions, bool], LatencyBudget | None] | None = None
    # settings alone -> their budget, None when they are not this engine's
    arithmetic: Callable[[BudgetSettings], LatencyBudget | None] | None = None
    # the model store's hooks (distribution/ imports no engine): refuse a single-file model
    # before it is installed; make an installed folder's first load quick; describe a local
    # folder for `models list` (a FolderFacts, or None when the folder is not this engine's)
    check_file: Callable[[Path], None] | None = None
    prepare_folder: Callable[[Path], None] | None = None
    describe: Callable[[Path], FolderFacts | None] | None = None
    # (setting name, info) of loaded settings -> the note bench prints when their batched
    # rows are not bit-exact with one stream (an int8 export), with the way to exact rows;
    # None: batching is exact
    batching_note: Callable[[Sequence[tuple[str, BackendInfo]]], str | None] | None = None
    # a catalog entry naming this engine -> what its opaque `engine_data` says (Released)
    released: Callable[[CatalogEntry], Released] | None = None

    @property
    def title(self) -> str:
        """How its models are named in messages."""
        return self.label or self.name

    def option(self, name: str) -> EngineOption | None:
        """The declared option called `name`, if any."""
        return next((o for o in self.options if o.name == name), None)
