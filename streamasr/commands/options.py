"""The model options group shared by `file`, `mic` and `bench`, and the one builder.

Typer has no option groups, so a command asks for the group with a decorator and takes one
parameter, `model_options: ModelOptions`; the decorator adds the group's options (`--model`,
`--backend`, `--gpu`, `--device`, `--threads`, `--endpoint`, `--rule1/2/3`, `--block-ms`,
`--tail-padding`, `--onset-dbfs`, and every option the installed backends declare, plus
`--engine-option/-O NAME=VALUE` for any backend's) to the command's signature where that
parameter stands, and hands the command their values as one frozen dataclass:

    @app.command("file")
    @with_model_options()
    def file_command(paths: ..., model_options: ModelOptions, fmt: FormatOpt = None) -> None:
        recognizer, stream_options = build(model_options, paced=realtime)

The engine options come from the backend registry (built-in engines and installed plugins):
their help names the backend that owns them, their values stay as typed until the chosen
backend parses them (backends/options.py), and one the chosen backend does not declare is a
usage error naming its owner. A command that sweeps (bench) asks for `sweep=True`: options a
backend marks sweepable then take several values. One whose `--device` means something else
(mic: the input device) renames the compute device with `rename={"device": "--compute-device"}`.
Each neutral option's default and help text are written here once.
"""

from __future__ import annotations

import functools
import inspect
import logging
import math
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, TypeVar

import typer

from streamasr.backends import registry
from streamasr.backends.base import (
    DEFAULT_THREADS,
    BackendEntry,
    EndpointOptions,
    Recognizer,
    check_device_name,
)
from streamasr.backends.options import EngineOption, check_number
from streamasr.backends.plan import LoadPlan, make_plan
from streamasr.commands.common import err_console, note, spliced_parameters
from streamasr.errors import UsageError
from streamasr.session.endpointing import ENDPOINT_SWITCH, RULE_OPTIONS, endpoint_options
from streamasr.session.stream import DEFAULT_TAIL_PADDING_S, StreamOptions
from streamasr.vad import vad_options
from streamasr.vad.onset import OnsetOptions

log = logging.getLogger("streamasr")

# Number ranges of the feed, checked before any audio or model is touched. An upper bound is
# where a value stops meaning anything (and a huge one would hang or eat memory).
BLOCK_MS_RANGE = (1.0, 60_000.0)  # a feed block from 1 ms to one minute
TAIL_PADDING_RANGE = (0.0, 30.0)  # seconds of silence appended at the end of input
ONSET_DBFS_RANGE = (-120.0, 0.0)
GPU_BACKEND = "nemo"
GPU_DEVICE = "cuda"


@dataclass(frozen=True)
class ModelOptions:
    """Everything the shared group says: which model and engine, how to decode, how to feed."""

    model: str | None = None
    backend: str | None = None
    gpu: bool = False
    device: str | None = None  # None: cpu, or cuda with --gpu
    threads: int = DEFAULT_THREADS
    # the backends' own options that were given: name -> value as typed (or a switch's True);
    # the chosen backend parses them (registry.engine_options)
    engine: Mapping[str, object] = field(default_factory=dict)
    endpoint: bool = True
    rule1_s: float = EndpointOptions.rule1_s
    rule2_s: float = EndpointOptions.rule2_s
    rule3_s: float = EndpointOptions.rule3_s
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
        "Model name (`models list`), folder or .nemo.",
    ),
    _Spec(
        "backend", str | None, ("--backend",),
        "Engine: sherpa-onnx, nemo, module:ATTRIBUTE.",
    ),
    _Spec(
        "gpu", bool, ("--gpu",),
        "NeMo on CUDA (pip install 'streamasr\\[gpu]').",
    ),
    _Spec(
        "device", str | None, ("--device",),
        "Engine device: cpu, cuda, cuda:N (NeMo).",
    ),
    _Spec(
        "threads", int, ("--threads",),
        "CPU threads for the engine.",
    ),
    # the endpoint options' names, help and ranges are endpointing.py's
    _Spec(ENDPOINT_SWITCH.field, bool, (ENDPOINT_SWITCH.flag,), ENDPOINT_SWITCH.help),
    *(_Spec(rule.field, float, (rule.flag,), rule.help) for rule in RULE_OPTIONS),
    _Spec(
        "block_ms", float | None, ("--block-ms",),
        "Feed block in ms; default one chunk.",
    ),
    _Spec(
        "tail_padding_s", float, ("--tail-padding",),
        "Silence in s appended so the last words come out.",
    ),
    _Spec(
        "onset_dbfs", float | None, ("--onset-dbfs",),
        "Speech-onset level, dBFS (default: floor + 10 dB).",
    ),
    _Spec(
        "vad", str, ("--vad",),
        "VAD: silero, energy or off.",
    ),
    _Spec(
        "vad_end", bool, ("--vad-end",),
        "End an utterance after 0.5 s of VAD silence.",
    ),
    _Spec(
        "vad_gate", bool, ("--vad-gate",),
        "Feed the recogniser no silence the VAD finds.",
    ),
    _Spec(
        "vad_model", str | None, ("--vad-model",),
        "Silero VAD .onnx, v5 or later (docs/vad.md).",
    ),
    _Spec(
        "verify", bool, ("--verify",),
        "Hash a pulled model's files before use.",
    ),
)

_DEFAULTS = ModelOptions()
GROUP_FIELDS = tuple(spec.field for spec in _SPECS)
_PARAM = "model_options"
_GENERIC = "engine_option"

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class _Declared:
    """One engine option name on the command line, and every installed backend declaring it."""

    option: EngineOption
    owners: tuple[str, ...]


def declared_options() -> list[_Declared]:
    """The engine options of every installed backend, one per name, in the order declared
    (a later backend's option of the same name but another form is reachable with -O)."""
    from streamasr.backends.registry import installed
    from streamasr.commands.lazy import plugin_options_wanted

    found: dict[str, _Declared] = {}
    for entry in installed(plugins=plugin_options_wanted()):
        for option in entry.options:
            seen = found.get(option.name)
            if seen is None:
                found[option.name] = _Declared(option, (entry.name,))
            elif seen.option.switch == option.switch:
                found[option.name] = _Declared(seen.option, (*seen.owners, entry.name))
    return list(found.values())


def _engine_parameter(name: str, declared: _Declared, sweep: bool) -> inspect.Parameter:
    option = declared.option
    owners = ", ".join(declared.owners)
    helptext = f"{owners}: {option.help}"
    if sweep and option.sweep:
        helptext += f" Several, separated by {option.sweep!r}, are swept (one run each)."
    from rich.markup import escape

    if option.switch:
        kind: Any = bool
        default: Any = False
        decls: tuple[str, ...] = (option.flag,)
    else:
        kind, default, decls = str | None, None, (option.flag,)
    metavar = option.metavar if option.metavar and not option.switch else None
    return inspect.Parameter(
        name,
        inspect.Parameter.KEYWORD_ONLY,
        default=default,
        annotation=Annotated[kind, typer.Option(*decls, help=escape(helptext), metavar=metavar)],
    )


def _generic_parameter() -> inspect.Parameter:
    return inspect.Parameter(
        _GENERIC,
        inspect.Parameter.KEYWORD_ONLY,
        default=None,
        annotation=Annotated[
            list[str] | None,
            typer.Option(
                "--engine-option", "-O", metavar="NAME=VALUE",
                help="An option of a --backend module (repeatable).",
            ),
        ],
    )


def engine_values(named: Mapping[str, object], generic: Iterable[str] | None) -> dict[str, object]:
    """The engine options given: named flags (a switch only when on) and -O NAME=VALUE."""
    values = {k: v for k, v in named.items() if v is not None and v is not False}
    for item in generic or ():
        name, sep, value = item.partition("=")
        key = name.strip().lstrip("-").replace("-", "_")
        if not sep or not key:
            raise UsageError(f"--engine-option {item!r}: write it as NAME=VALUE (e.g. chunk=16)")
        if key in values:
            raise UsageError(f"--engine-option {item!r}: {key} is given twice")
        values[key] = value
    return values


def with_model_options(
    *,
    sweep: bool = False,
    rename: Mapping[str, str] | None = None,
    help_for: Mapping[str, str] | None = None,
    fields: Iterable[str] = GROUP_FIELDS,
    own: Iterable[str] = (),
    user_defaults: bool = True,
    said_defaults: Iterable[str] = (),
) -> Callable[[F], F]:
    """Add the group's options where the command's `model_options` parameter stands.

    `sweep`: options a backend marks sweepable take several values (bench).
    `rename`: field -> option name, for a command where the usual name means something else.
    `help_for`: field -> help text, for a command whose default differs (serve's feed block).
    `fields`: the neutral options the command takes (all by default; the engines' always).
    `own`: engine option names the command declares itself (latency's --chunk, which is
    also arithmetic without a model).
    `user_defaults`: fill the config's model and device in (latency reads only what it is told).
    `said_defaults`: fields whose help_for text says a default of the command's own (serve's
    tail padding), so the group's is not shown beside it.
    """
    renamed = dict(rename or {})
    unknown = (set(renamed) | set(fields)) - set(GROUP_FIELDS)
    if unknown:
        raise ValueError(f"not in the model options group: {sorted(unknown)}")
    wanted, declared_here, said_defaults = set(fields), set(own), set(said_defaults)
    specs = [spec for spec in _SPECS if spec.field in wanted]
    helps = {spec.field: (help_for or {}).get(spec.field, spec.help) for spec in specs}

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
                    annotation=Annotated[spec.type, typer.Option(
                        *decls, help=helps[spec.field],
                        show_default=spec.field not in said_defaults)],
                )
            )
        names = {param.name: spec.field for param, spec in zip(group, specs, strict=True)}
        engine_names: dict[str, str] = {}
        for declared in declared_options():
            if declared.option.name in declared_here:
                continue  # the command's own option of that name
            if declared.option.flag in {d for s in _SPECS for d in s.decls}:
                continue  # a neutral option's name is not an engine's to take
            name = f"engine_{declared.option.name}"
            engine_names[name] = declared.option.name
            group.append(_engine_parameter(name, declared, sweep))
        group.append(_generic_parameter())
        params = spliced_parameters(signature, _PARAM, group)

        @functools.wraps(command)
        def wrapper(**kwargs: Any) -> Any:
            values = {field: kwargs.pop(name) for name, field in names.items()}
            named = {option: kwargs.pop(name) for name, option in engine_names.items()}
            engine = engine_values(named, kwargs.pop(_GENERIC))
            # a command's --quiet (captions only) also hides the demo-model hint
            hint = not kwargs.get("quiet", False)
            group_options = ModelOptions(**values, engine=engine)
            if user_defaults:
                group_options = with_user_defaults(group_options, hint=hint)
            kwargs[_PARAM] = group_options
            return command(**kwargs)

        wrapper.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
        wrapper.__annotations__ = {p.name: p.annotation for p in params}
        return wrapper  # type: ignore[return-value]

    return decorate


def backend_and_device(options: ModelOptions) -> tuple[str | None, str]:
    """--gpu, --backend and --device as one backend name (None: chosen by the model) and device;
    a CUDA device must be there (asked of the driver, before torch or NeMo is imported)."""
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
    check_device_name(device)
    if device != "cpu":
        from streamasr.cuda import require_cuda_device

        require_cuda_device(device)
    return backend, device


def stream_options(options: ModelOptions, *, paced: bool) -> StreamOptions:
    """How audio is fed and cut: the endpoint rules, block, tail padding and onset."""
    endpoint = endpoint_options(
        options.endpoint, options.rule1_s, options.rule2_s, options.rule3_s
    )
    check_number("--block-ms", options.block_ms, *BLOCK_MS_RANGE, "ms")
    check_number("--tail-padding", options.tail_padding_s, *TAIL_PADDING_RANGE, "s")
    low, high = ONSET_DBFS_RANGE
    onset = options.onset_dbfs
    if onset is not None and not (math.isfinite(onset) and low <= onset <= high):
        raise UsageError(
            f"--onset-dbfs {onset:g}: use a level from {low:g} to {high:g} dBFS "
            "(e.g. -40), or leave it out to measure the noise floor"
        )
    return StreamOptions(
        block_s=options.block_ms / 1000 if options.block_ms else None,
        tail_padding_s=options.tail_padding_s,
        onset=OnsetOptions(threshold_dbfs=onset),
        paced=paced,
        vad=vad_options(options.vad, options.vad_end, options.vad_gate, options.vad_model),
        endpoint=endpoint,
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
            note(
                "using the bundled demo model tiny-en, which is not for real speech; for a real "
                "one: streamasr models pull en --default  (hints = false in "
                f"{settings.path} hides this)",
                style="dim", highlight=False, markup=False,
            )
    return replace(options, model=model, device=device)


@dataclass(frozen=True)
class Prepared:
    """A prepared engine choice: every option checked, nothing loaded or downloaded yet.
    `entry` is the backend that parsed the engine options and will load, `plan` what it
    loads (a worker process or a Ray task loads the same), `feed` how audio is fed and cut;
    with a sweep, the plan holds the swept option's values, parsed by that backend."""

    model: str | None
    entry: BackendEntry
    plan: LoadPlan
    feed: StreamOptions

    @property
    def swept(self) -> str | None:
        """The option a sweep runs over (bench), or None."""
        return self.plan.engine.swept

    @property
    def values(self) -> tuple[Any, ...]:
        """The swept option's values, one load each; (None,) without a sweep."""
        values: Any = self.plan.engine.own[self.swept] if self.swept else (None,)
        return tuple(values)

    def offer(self) -> None:
        """A catalog model not pulled yet: on a terminal, ask, then pull it. Decided without
        the download stack (progress bars, the installer, HTTP: commands/models.py), which is
        imported only then; any other model: nothing to do, nothing imported."""
        from streamasr.distribution.catalog import find

        if self.model is None or find(self.model) is None:
            return
        from streamasr.distribution.cache import find_cached

        if find_cached(self.model) is not None or not sys.stdin.isatty():
            return
        from streamasr.commands.models import offer_download

        offer_download(self.model)

    def load(self) -> Recognizer:
        """Offer the download, then load by the plan with the backend chosen in preflight."""
        self.offer()
        recognizer = self.plan.load(self.entry)
        log.info("model: %s", recognizer.description)
        return recognizer


def preflight(options: ModelOptions, *, paced: bool, sweep: bool = False) -> Prepared:
    """Every check before a model loads, in the one order every command shares: the backend
    and device (a CUDA device asked of the driver, before torch), the feed's numbers, the
    backend chosen once, and its plan: the engine options parsed by it (one it does not
    declare refused, naming its owner) and, for a sweep (bench), the values of the option it
    sweeps. Nothing is downloaded or loaded: a command may check more (mic's device) before
    `Prepared.load`."""
    backend, device = backend_and_device(options)
    feed = stream_options(options, paced=paced)
    entry = registry.choose_backend(options.model, backend)
    plan = make_plan(options.model, backend, options.engine, threads=options.threads,
                     device=device, verify=options.verify, entry=entry, sweep=sweep)
    return Prepared(options.model, entry, plan, feed)


def build(options: ModelOptions, *, paced: bool) -> tuple[Recognizer, StreamOptions]:
    """The model loaded by the group's plan, and how to feed it (`preflight`)."""
    prepared = preflight(options, paced=paced)
    return prepared.load(), prepared.feed
