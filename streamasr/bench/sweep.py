"""Sweeps: one run per value of the option a backend marks sweepable (sherpa-onnx's
`--chunk 16,32`, NeMo's `--att-context-size 70,1/70,13`, a plugin's own), every setting
checked before any runs.

A setting is one loaded engine with its own EngineOptions, named as the backend labels the
option (`chunk 16`, `att 70,13`). All of them are loaded through the backend registry first,
so a value the model lacks stops the sweep before minutes are spent on the others. Nothing
here knows which engine runs or what its options are called.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from streamasr.backends.base import BackendEntry, EngineOptions, Recognizer
from streamasr.backends.options import EngineOption, complete
from streamasr.backends.plan import LoadPlan
from streamasr.bench.datasets import Utterance
from streamasr.bench.report import setting_record, summarize
from streamasr.bench.runner import (
    RunOptions,
    UtteranceRecord,
    run_batched,
    run_sequential,
    warm_up,
)
from streamasr.errors import ModelMismatchError, UsageError

log = logging.getLogger("streamasr")

Progress = Callable[[str, UtteranceRecord], None]


def parse_int_list(text: str | None, option: str) -> list[int | None]:
    """'16,32' -> [16, 32]; None -> [None] (the model's default export)."""
    if text is None or not text.strip():
        return [None]
    values: list[int | None] = []
    for part in text.split(","):
        part = part.strip()
        try:
            value = int(part)
        except ValueError:
            raise UsageError(
                f"{option} takes whole numbers separated by commas (e.g. 16,32), got {text!r}"
            ) from None
        if value <= 0:
            raise UsageError(f"{option} values must be positive, got {value}")
        if value in values:
            raise UsageError(f"{option} lists {value} twice")
        values.append(value)
    return values


@dataclass(frozen=True)
class Setting:
    """One point of a sweep: what to load (picklable, for worker processes) and the engine
    loaded from it in this process. `own`: the backend's options for it, defaults filled in
    (for the run record)."""

    name: str
    plan: LoadPlan
    recognizer: Recognizer
    own: Mapping[str, Any] = field(default_factory=dict)


def _sweepable(name: str) -> list[EngineOption]:
    """Every installed backend's sweepable option called `name`."""
    from streamasr.backends.registry import installed

    found = (entry.option(name) for entry in installed())
    return [option for option in found if option is not None and option.sweep]


def swept_option(given: Mapping[str, object]) -> str | None:
    """The one sweepable option among those given (None: no sweep); two are refused."""
    swept = [name for name in given if _sweepable(name)]
    if len(swept) > 1:
        flags = " or ".join(_sweepable(name)[0].flag for name in swept)
        raise UsageError(f"sweep one setting at a time: {flags}, not both")
    return swept[0] if swept else None


def setting_name(entry: BackendEntry, recognizer: Recognizer) -> str:
    """`chunk 16` for an export, `att 70,13` for a look-ahead (as the backend labels its
    sweepable option and reports its value), else the backend's name."""
    settings = recognizer.info.settings
    for option in entry.options:
        if option.sweep and option.name in settings:
            return f"{option.label or option.name} {settings[option.name]}"
    return recognizer.info.backend


def swept_records(settings: Sequence[Setting]) -> dict[str, list[Any]]:
    """For the run record: each installed backend's sweepable option (`chunks`: [16, 32]),
    as every setting's engine reports it (None where it has no such setting)."""
    from streamasr.backends.registry import installed

    record: dict[str, list[Any]] = {}
    for entry in installed():
        for option in entry.options:
            if option.sweep and option.record and option.record not in record:
                record[option.record] = [
                    s.recognizer.info.settings.get(option.name) for s in settings
                ]
    return record


def plan_settings(
    plan: LoadPlan,
    entry: BackendEntry,
    swept: str | None = None,
    values: Sequence[Any] = (None,),
) -> list[Setting]:
    """Load every setting up front by `plan` (the first load hashes a pulled model's files
    when the plan says so; the settings' plans, for workers, do not hash again).

    A chunk or look-ahead the model lacks raises ModelMismatchError listing those it has.
    """
    settings: list[Setting] = []
    for value in values:
        own = dict(plan.engine.own) if swept is None else {**plan.engine.own, swept: value}
        point = plan.with_own(own)
        try:
            recognizer = replace(point, verify=plan.verify and not settings).load(entry)
        except ModelMismatchError:
            raise
        except UsageError as exc:  # the loader refused a setting this model does not have
            raise ModelMismatchError(str(exc)) from exc
        name = setting_name(entry, recognizer)
        full = complete(entry.options, own)
        settings.append(Setting(name, replace(point, verify=False), recognizer, full))
    return settings


def run_setting(
    setting: Setting,
    engine: EngineOptions,
    utterances: Sequence[Utterance],
    options: RunOptions,
    streams: Sequence[int] = (1,),
    on_done: Progress = lambda name, record: None,
    clock: Callable[[], float] = time.perf_counter,
) -> dict[str, Any]:
    """Warm the setting's engine up, run the utterances; return the setting's results entry.

    The one-stream pass gives the per-utterance records and RTF. Each `streams` value above 1
    decodes the set again in batches of that many for its aggregate throughput, and is
    compared with the one-stream pass: the text must agree (`same_text`), and every
    algorithmic field agrees too unless an int8 model's dynamic quantisation moved a token
    time (`identical`).
    """
    recognizer = setting.recognizer
    log.info("bench setting %s: %s", setting.name, recognizer.description)
    warm_up(recognizer)
    started = clock()
    records = run_sequential(
        recognizer, utterances, options, lambda r: on_done(setting.name, r), clock=clock
    )
    wall_s = clock() - started
    sweep = batched_passes(setting, records, utterances, options, streams, on_done, clock)
    summary = summarize(records, options.metric, wall_s, sweep or None)
    return setting_record(setting.name, recognizer.info, summary, records)


def batched_passes(
    setting: Setting,
    records: Sequence[UtteranceRecord],
    utterances: Sequence[Utterance],
    options: RunOptions,
    streams: Sequence[int],
    on_done: Progress,
    clock: Callable[[], float],
) -> list[dict[str, Any]]:
    """Each `streams` value above 1: decode the set in batches of that many on the setting's
    engine and compare with the one-stream `records` (`compare_batched`)."""
    sweep = []
    for n in (n for n in streams if n > 1):
        started = clock()
        batched = run_batched(
            setting.recognizer, utterances, options, n,
            pass_progress(on_done, f"{setting.name} x{n}"),
        )
        sweep.append(compare_batched(setting.name, records, batched, n, clock() - started))
    return sweep


def pass_progress(on_done: Progress, name: str) -> Callable[[UtteranceRecord], None]:
    """Report each record of a pass under that pass's name."""
    return lambda record: on_done(name, record)


def compare_batched(
    name: str,
    records: Sequence[UtteranceRecord],
    batched: Sequence[UtteranceRecord],
    n: int,
    wall_s: float,
) -> dict[str, Any]:
    """One `--streams` value: its throughput, and how its results compare with one stream."""
    pairs = list(zip(records, batched, strict=True))
    mismatched = [a.id for a, b in pairs if a.algorithmic() != b.algorithmic()]
    text_mismatched = [a.id for a, b in pairs if a.text() != b.text()]
    if text_mismatched:
        log.warning(
            "%s: batching %d streams changed the text of %d utterances (%s)",
            name,
            n,
            len(text_mismatched),
            ", ".join(text_mismatched[:5]),
        )
    elif mismatched:
        log.info(
            "%s: %d streams: same text, token times differ for %s (int8 dynamic quantisation)",
            name,
            n,
            ", ".join(mismatched[:5]),
        )
    audio_s = sum(r.audio_s for r in batched)
    return {
        "n": n,
        "wall_s": round(wall_s, 3),
        "throughput_x": round(audio_s / wall_s, 2) if wall_s > 0 else None,
        "identical": not mismatched,
        "same_text": not text_mismatched,
        "mismatched": mismatched,
        "text_mismatched": text_mismatched,
    }
