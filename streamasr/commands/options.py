"""The model options group shared by `file`, `mic` and `bench`, and the one builder.

Typer has no option groups, so a command asks for the group with a decorator and takes one
parameter, `model_options: ModelOptions`; the decorator adds the group's options (`--model`,
`--backend`, `--gpu`, `--device`, `--chunk`, `--att-context-size`, `--decoder`,
`--trust-model-config`, `--fp32`, `--threads`, `--decoding-method`, `--hotwords`,
`--hotwords-score`, `--endpoint`, `--rule1/2/3`, `--block-ms`, `--tail-padding`,
`--onset-dbfs`) to the command's signature where that parameter stands, and hands the
command their values as one frozen dataclass:

    @app.command("file")
    @with_model_options()
    def file_command(paths: ..., model_options: ModelOptions, fmt: FormatOpt = None) -> None:
        recognizer, stream_options = build(model_options, paced=realtime)

A command that sweeps a setting itself (bench: `--chunk 16,32`) leaves that option out with
`skip=("chunk",)` and declares its own; one whose `--device` means something else (mic: the
input device) renames the compute device with `rename={"device": "--compute-device"}`.
Each option's default and help text are written here once.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar

import typer

from streamasr.backends.base import (
    EndpointOptions,
    EngineOptions,
    NemoOptions,
    Recognizer,
    SherpaOptions,
)
from streamasr.commands.common import (
    DEFAULT_THREADS,
    HOTWORDS_SCORE_RANGE,
    RULE_S_RANGE,
    check_number,
    check_stream_numbers,
    check_threads,
    err_console,
    onset_options,
)
from streamasr.errors import UsageError
from streamasr.stream import DEFAULT_TAIL_PADDING_S, StreamOptions
from streamasr.vad import vad_options

log = logging.getLogger("streamasr")

DECODERS = ("rnnt", "ctc")
GPU_BACKEND = "nemo"
GPU_DEVICE = "cuda"


@dataclass(frozen=True)
class ModelOptions:
    """Everything the shared group says: which model and engine, how to decode, how to feed."""

    model: str | None = None
    backend: str | None = None
    gpu: bool = False
    device: str | None = None  # None: cpu, or cuda with --gpu
    chunk: int | None = None
    att_context_size: str | None = None  # "L,R" as typed; parsed by att_context()
    decoder: str | None = None
    trust_model_config: bool = False
    fp32: bool = False
    threads: int = DEFAULT_THREADS
    decoding_method: str = "greedy_search"
    hotwords: str | None = None
    hotwords_score: float = 1.5
    endpoint: bool = True
    rule1_s: float = 2.4
    rule2_s: float = 1.2
    rule3_s: float = 20.0
    block_ms: float | None = None
    tail_padding_s: float = DEFAULT_TAIL_PADDING_S
    onset_dbfs: float | None = None
    vad: str = "energy"  # streamasr.vad: silero | energy | off
    vad_end: bool = False
    vad_gate: bool = False
    vad_model: str | None = None
    verify: bool = False  # hash every file of a pulled model before use


@dataclass(frozen=True)
class _Spec:
    """One option of the group: its type, names on the command line and help."""

    field: str
    type: Any
    decls: tuple[str, ...]
    help: str


_SPECS: tuple[_Spec, ...] = (
    _Spec(
        "model", str | None, ("--model", "-m"),
        "Bundled model name, catalog name, a sherpa-onnx model directory or a .nemo file.",
    ),
    _Spec(
        "backend", str | None, ("--backend",),
        "Engine: sherpa-onnx (default for ONNX models), nemo (picked for .nemo files), or "
        "module:ATTRIBUTE naming a streamasr BackendEntry.",
    ),
    _Spec(
        "gpu", bool, ("--gpu",),
        "NeMo on CUDA: the same as --backend nemo --device cuda (needs "
        "pip install 'streamasr\\[gpu]' and an NVIDIA GPU).",
    ),
    _Spec(
        "device", str | None, ("--device",),
        "Compute device of the engine: cpu, cuda or cuda:N (NeMo). Default cpu, cuda with --gpu.",
    ),
    _Spec(
        "chunk", int | None, ("--chunk",),
        "Chunk in 50 Hz frames (16 = 320 ms). Selects the model export with that chunk; "
        "a chunk the model has no export for is a usage error (exit 2). For NeMo models use "
        "--att-context-size.",
    ),
    _Spec(
        "att_context_size", str | None, ("--att-context-size",),
        "NeMo look-ahead L,R among those the model was trained with (70,1 = 160 ms chunk, "
        "80 ms look-ahead); default the model's first. sherpa-onnx models: use --chunk.",
    ),
    _Spec(
        "decoder", str | None, ("--decoder",),
        "rnnt or ctc: which head of a hybrid NeMo model decodes (default the model's own).",
    ),
    _Spec(
        "trust_model_config", bool, ("--trust-model-config",),
        "NeMo: load a .nemo whose config names classes outside streamasr's list of "
        "FastConformer parts. This runs code from the file: only for files you trust.",
    ),
    _Spec("fp32", bool, ("--fp32",), "Use fp32 ONNX files even if int8 exist."),
    _Spec(
        "threads", int, ("--threads",),
        "CPU threads for the engine. Default 1: on a 2-core machine 2 threads were "
        "1.4-1.8x slower than 1 for the full-size model and used ~3x the CPU; to use more "
        "cores run more streams (bench --workers N, --streams N) rather than more threads.",
    ),
    _Spec("decoding_method", str, ("--decoding-method",), "greedy_search or modified_beam_search."),
    _Spec(
        "hotwords", str | None, ("--hotwords",),
        "File of hotwords, one per line (needs modified_beam_search).",
    ),
    _Spec("hotwords_score", float, ("--hotwords-score",), "Bonus per hotword token."),
    _Spec(
        "endpoint", bool, ("--endpoint/--no-endpoint",),
        "Cut the stream into utterances at silences (endpoint rules).",
    ),
    _Spec(
        "rule1_s", float, ("--rule1",),
        "Endpoint after this many seconds of silence when nothing was recognised.",
    ),
    _Spec(
        "rule2_s", float, ("--rule2",),
        "Endpoint after this many seconds of silence following recognised text.",
    ),
    _Spec("rule3_s", float, ("--rule3",), "Endpoint any utterance longer than this many seconds."),
    _Spec(
        "block_ms", float | None, ("--block-ms",),
        "Feed block in ms (how much audio arrives at once); default one chunk.",
    ),
    _Spec(
        "tail_padding_s", float, ("--tail-padding",),
        "Seconds of silence appended at end of input so the last words come out.",
    ),
    _Spec(
        "onset_dbfs", float | None, ("--onset-dbfs",),
        "Speech onset for first-token timing at this fixed level (dBFS RMS of 10 ms "
        "frames) instead of the default: 10 dB above the measured noise floor.",
    ),
    _Spec(
        "vad", str, ("--vad",),
        "Voice activity detector for onsets, --vad-end and --vad-gate: silero (Silero VAD, "
        "bundled), energy (10 dB over the noise floor) or off (docs/vad.md).",
    ),
    _Spec(
        "vad_end", bool, ("--vad-end",),
        "End an utterance when the VAD hears 0.5 s of silence (sooner than --rule2).",
    ),
    _Spec(
        "vad_gate", bool, ("--vad-gate",),
        "Do not feed the recogniser silence the VAD finds (0.5 s hangover); the stream "
        "ends at each gap, times stay those of the input.",
    ),
    _Spec("vad_model", str | None, ("--vad-model",), "A Silero VAD .onnx file (v5 or later)."),
    _Spec(
        "verify", bool, ("--verify",),
        "Hash every file of a pulled model against its manifest before use. Without it "
        "each use compares sizes and mtimes, and hashes only files whose mtime moved.",
    ),
)

_DEFAULTS = ModelOptions()
GROUP_FIELDS = tuple(spec.field for spec in _SPECS)
_PARAM = "model_options"

F = TypeVar("F", bound=Callable[..., Any])


def with_model_options(
    *, skip: Iterable[str] = (), rename: Mapping[str, str] | None = None
) -> Callable[[F], F]:
    """Add the group's options where the command's `model_options` parameter stands.

    `skip`: fields the command declares itself (they keep ModelOptions' defaults).
    `rename`: field -> option name, for a command where the usual name means something else.
    """
    skipped = set(skip)
    renamed = dict(rename or {})
    unknown = (skipped | set(renamed)) - set(GROUP_FIELDS)
    if unknown:
        raise ValueError(f"not in the model options group: {sorted(unknown)}")
    specs = [spec for spec in _SPECS if spec.field not in skipped]

    def decorate(command: F) -> F:
        signature = inspect.signature(command, eval_str=True)
        if _PARAM not in signature.parameters:
            raise TypeError(f"{command.__name__} needs a parameter named {_PARAM}")
        taken = set(signature.parameters)
        group: list[inspect.Parameter] = []
        for spec in specs:
            name = f"opt_{spec.field}" if spec.field in taken else spec.field
            decls = (renamed[spec.field],) if spec.field in renamed else spec.decls
            group.append(
                inspect.Parameter(
                    name,
                    inspect.Parameter.KEYWORD_ONLY,
                    default=getattr(_DEFAULTS, spec.field),
                    annotation=Annotated[spec.type, typer.Option(*decls, help=spec.help)],
                )
            )
        names = {param.name: spec.field for param, spec in zip(group, specs, strict=True)}
        params: list[inspect.Parameter] = []
        for param in signature.parameters.values():
            if param.name == _PARAM:
                params.extend(group)
            else:
                params.append(param.replace(kind=inspect.Parameter.KEYWORD_ONLY))

        @functools.wraps(command)
        def wrapper(**kwargs: Any) -> Any:
            values = {field: kwargs.pop(name) for name, field in names.items()}
            # a command's --quiet (captions only) also hides the demo-model hint
            hint = not kwargs.get("quiet", False)
            kwargs[_PARAM] = with_user_defaults(ModelOptions(**values), hint=hint)
            return command(**kwargs)

        wrapper.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
        wrapper.__annotations__ = {p.name: p.annotation for p in params}
        return wrapper  # type: ignore[return-value]

    return decorate


def att_context(text: str | None) -> tuple[int, int] | None:
    """`--att-context-size L,R` as two whole numbers (None when not given)."""
    if text is None:
        return None
    parts = text.replace(" ", "").split(",")
    try:
        left, right = (int(part) for part in parts)
    except ValueError:
        raise UsageError(
            f"--att-context-size {text!r}: give two whole numbers L,R (e.g. 70,1: 70 frames of "
            "left context, 1 frame of look-ahead)"
        ) from None
    if left < 0 or right < 0:
        raise UsageError(f"--att-context-size {text}: L and R cannot be negative")
    return left, right


def backend_and_device(options: ModelOptions) -> tuple[str | None, str]:
    """--gpu, --backend and --device as one backend name (None: chosen by the model) and device."""
    backend, device = options.backend, options.device
    if options.gpu:
        if backend is not None and backend != GPU_BACKEND:
            raise UsageError(
                f"--gpu runs the {GPU_BACKEND} backend; drop --backend {backend} or drop --gpu"
            )
        if device is not None and not device.startswith("cuda"):
            raise UsageError(f"--gpu runs on CUDA, not on {device}: drop one of the two")
        backend, device = GPU_BACKEND, device or GPU_DEVICE
    device = device or "cpu"
    if device != "cpu" and device != "cuda" and not _cuda_index(device):
        raise UsageError(f"compute device {device!r} is not known; use cpu, cuda or cuda:N")
    if device != "cpu":  # asked of the driver, before torch or NeMo is imported
        from streamasr.cuda import require_cuda_device

        require_cuda_device(device)
    return backend, device


def _cuda_index(device: str) -> bool:
    prefix, _, index = device.partition(":")
    return prefix == "cuda" and index.isdigit()


def engine_options(options: ModelOptions) -> EngineOptions:
    """The engine settings the group asks for, range-checked before anything loads."""
    check_threads(options.threads)
    check_number("--hotwords-score", options.hotwords_score, *HOTWORDS_SCORE_RANGE)
    if options.decoder is not None and options.decoder not in DECODERS:
        raise UsageError(f"--decoder {options.decoder!r}: use one of: {', '.join(DECODERS)}")
    _, device = backend_and_device(options)
    return EngineOptions(
        threads=options.threads,
        device=device,
        decoding_method=options.decoding_method,
        hotwords_file=options.hotwords or "",
        hotwords_score=options.hotwords_score,
        sherpa=SherpaOptions(chunk=options.chunk, prefer_int8=not options.fp32),
        nemo=NemoOptions(att_context_size=att_context(options.att_context_size),
                         decoder=options.decoder, trust_config=options.trust_model_config),
    )


def stream_options(options: ModelOptions, *, paced: bool) -> StreamOptions:
    """How audio is fed and cut: block, tail padding, onset and the endpoint rules."""
    check_stream_numbers(options.block_ms, options.tail_padding_s, options.chunk)
    for name, value in (
        ("--rule1", options.rule1_s), ("--rule2", options.rule2_s), ("--rule3", options.rule3_s)
    ):
        check_number(name, value, *RULE_S_RANGE, "s")
    return StreamOptions(
        block_s=options.block_ms / 1000 if options.block_ms else None,
        tail_padding_s=options.tail_padding_s,
        onset=onset_options(options.onset_dbfs),
        paced=paced,
        vad=vad_options(options.vad, options.vad_end, options.vad_gate, options.vad_model),
        endpoint=EndpointOptions(
            enabled=options.endpoint,
            rule1_s=options.rule1_s,
            rule2_s=options.rule2_s,
            rule3_s=options.rule3_s,
        ),
    )


def check_engine_fit(options: ModelOptions, backend_name: str) -> None:
    """Refuse a setting of one engine given to the other, naming the equivalent."""
    if backend_name == "sherpa-onnx":
        if options.att_context_size is not None:
            raise UsageError(
                "--att-context-size is for NeMo models; for this sherpa-onnx model the "
                "equivalent is --chunk (e.g. --chunk 16 = 320 ms)"
            )
        if options.decoder is not None:
            raise UsageError(
                "--decoder chooses a head of a hybrid NeMo model; this is a sherpa-onnx model"
            )
        if options.trust_model_config:
            raise UsageError(
                "--trust-model-config is for NeMo .nemo files; a sherpa-onnx model names no "
                "code to trust, so drop it"
            )
    if backend_name == "nemo":
        if options.chunk is not None:
            raise UsageError(
                "--chunk selects a sherpa-onnx export; for this NeMo model the equivalent is "
                "--att-context-size L,R (chunk R+1 frames of 80 ms)"
            )
        if options.hotwords or options.decoding_method != "greedy_search":
            raise UsageError(
                "the NeMo backend decodes with greedy search only; drop --hotwords and "
                "--decoding-method (they are for sherpa-onnx transducers)"
            )


def with_user_defaults(options: ModelOptions, hint: bool = True) -> ModelOptions:
    """The config file's and environment's model and device where the command line gave none;
    on a terminal (and with `hint`), one line when the bundled demo model is about to be used
    instead."""
    from dataclasses import replace

    from streamasr import config

    settings = config.load()
    model = options.model or settings.model
    device = options.device or (None if options.gpu else settings.device)
    if model is None and options.backend is None and not options.gpu and settings.hints and hint:
        if err_console.is_terminal:
            err_console.print(
                "using the bundled demo model tiny-en, which is not for real speech; for a real "
                "one: streamasr models pull en --default  (hints = false in "
                f"{settings.path} hides this)",
                style="dim", highlight=False, markup=False,
            )
    return replace(options, model=model, device=device)


def verify_model(options: ModelOptions) -> None:
    """`--verify`: hash every file of a pulled model before it loads (a changed file is a
    ModelError naming `models verify` and `pull --force`)."""
    if options.verify:
        from streamasr.distribution import cache

        cache.verify_before_use(options.model)


def check_model_options(options: ModelOptions, *, paced: bool) -> None:
    """Every check build() makes before loading (ranges, combinations, the engine's fit,
    CUDA), for commands that have more to check before the load (mic's device)."""
    from streamasr.backends.registry import choose_backend

    stream_options(options, paced=paced)
    engine_options(options)
    backend, _ = backend_and_device(options)
    check_engine_fit(options, choose_backend(options.model, backend).name)


def build(options: ModelOptions, *, paced: bool) -> tuple[Recognizer, StreamOptions]:
    """Check every option before any audio is touched, then load the model via the registry."""
    from streamasr.backends.registry import choose_backend, load_recognizer

    feed = stream_options(options, paced=paced)
    engine = engine_options(options)
    backend, _ = backend_and_device(options)
    entry = choose_backend(options.model, backend)
    check_engine_fit(options, entry.name)
    verify_model(options)
    from streamasr.commands.models import offer_download

    offer_download(options.model)
    recognizer = load_recognizer(options.model, engine, backend)
    log.info("model: %s", recognizer.description)
    return recognizer, feed
