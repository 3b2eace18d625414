"""Sweeps: one run per setting (`--chunk 16,32` or `--att-context-size 70,1/70,13`), every
setting checked before any runs.

A setting is one loaded engine: a sherpa-onnx export (`chunk 16`) or a trained look-ahead of a
NeMo model (`att 70,13`), each with its own EngineOptions. All of them are loaded through the
backend registry first, so a chunk or look-ahead the model lacks stops the sweep before
minutes are spent on the others. Nothing here knows which engine runs.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from streamasr.backends.base import EngineOptions, Recognizer
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


def parse_att_list(text: str | None) -> list[tuple[int, int] | None]:
    """'70,1/70,13' -> [(70, 1), (70, 13)]; None -> [None] (the model's default)."""
    from streamasr.mask import parse_att_context_size

    if text is None or not text.strip():
        return [None]
    values: list[tuple[int, int] | None] = []
    for part in text.split("/"):
        value = parse_att_context_size(part)
        if value in values:
            raise UsageError(f"--att-context-size lists {value[0]},{value[1]} twice")
        values.append(value)
    return values


@dataclass(frozen=True)
class Setting:
    """One point of a sweep: what to load (picklable, for worker processes) and the engine
    loaded from it in this process."""

    name: str
    model: str | None
    backend: str | None
    engine: EngineOptions
    recognizer: Recognizer


def setting_name(recognizer: Recognizer) -> str:
    """`chunk 16` for an export, `att 70,13` for a look-ahead, else the backend's name."""
    settings = recognizer.info.settings
    if "chunk" in settings:
        return f"chunk {settings['chunk']}"
    if "att_context_size" in settings:
        return f"att {settings['att_context_size']}"
    return recognizer.info.backend


def plan_settings(
    model: str | None,
    engine: EngineOptions,
    chunks: Sequence[int | None] = (None,),
    att_context_sizes: Sequence[tuple[int, int] | None] = (None,),
    backend: str | None = None,
) -> list[Setting]:
    """Load every setting up front through the registry.

    A chunk or look-ahead the model lacks raises ModelMismatchError listing those it has;
    `--chunk` on a model without exports (NeMo) or `--att-context-size` on one without
    trained look-aheads (sherpa-onnx) is a usage error.
    """
    from streamasr.backends.registry import load_recognizer

    chunks, atts = list(chunks), list(att_context_sizes)
    if chunks != [None] and atts != [None]:
        raise UsageError("sweep either --chunk (sherpa-onnx exports) or --att-context-size "
                         "(NeMo look-aheads), not both")
    wanted: list[EngineOptions] = [
        replace(engine, sherpa=replace(engine.sherpa, chunk=c)) for c in chunks if c is not None
    ] + [
        replace(engine, nemo=replace(engine.nemo, att_context_size=a))
        for a in atts
        if a is not None
    ]
    settings = []
    for options in wanted or [engine]:
        try:
            recognizer = load_recognizer(model, options, backend)
        except ModelMismatchError:
            raise
        except UsageError as exc:  # the loader refused a setting this model does not have
            raise ModelMismatchError(str(exc)) from exc
        _check_kind(recognizer, chunks != [None], atts != [None])
        settings.append(Setting(setting_name(recognizer), model, backend, options, recognizer))
    return settings


def _check_kind(recognizer: Recognizer, chunk: bool, att: bool) -> None:
    """--chunk needs a backend with exports, --att-context-size one with look-aheads."""
    info = recognizer.info
    has_chunk, has_att = "chunk" in info.settings, "att_context_size" in info.settings
    if chunk and not has_chunk:
        hint = " (sweep its trained look-aheads with --att-context-size L,R/L,R)" if has_att else ""
        raise UsageError(
            f"--chunk selects a sherpa-onnx export; {info.model_name} is a {info.backend} "
            f"model with no chunk setting{hint}"
        )
    if att and not has_att:
        hint = " (sweep its exports with --chunk 16,32)" if has_chunk else ""
        raise UsageError(
            f"--att-context-size selects a NeMo model's trained look-ahead; "
            f"{info.model_name} is a {info.backend} model without one{hint}"
        )


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
