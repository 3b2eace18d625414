"""Sweeps: one run per setting (`--chunk 16,32,64`), every setting checked before any runs.

A setting is one model export. All of them are resolved first, so a chunk the model was not
exported for stops the sweep before minutes are spent on the others.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from streamasr.backends.base import EngineOptions
from streamasr.bench.datasets import Utterance
from streamasr.bench.report import setting_record, summarize
from streamasr.bench.runner import (
    RunOptions,
    UtteranceRecord,
    run_batched,
    run_sequential,
    warm_up,
)
from streamasr.errors import UsageError
from streamasr.modeldir import ModelFiles, resolve_model

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
    """One point of a sweep."""

    name: str
    files: ModelFiles


def plan_settings(
    model: str | None, chunks: Sequence[int | None], prefer_int8: bool
) -> list[Setting]:
    """Resolve every setting up front; a missing chunk raises ModelError listing those the
    model has."""
    settings = []
    for chunk in chunks:
        files = resolve_model(model, chunk, prefer_int8=prefer_int8)
        settings.append(Setting(f"chunk {files.chunk}", files))
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
    """Load the export, warm it up, run the utterances; return the setting's results entry.

    The one-stream pass gives the per-utterance records and RTF. Each `streams` value above 1
    decodes the set again in batches of that many for its aggregate throughput, and is
    compared with the one-stream pass: the text must agree (`same_text`), and every
    algorithmic field agrees too unless an int8 model's dynamic quantisation moved a token
    time (`identical`).
    """
    from streamasr.backends.sherpa import SherpaRecognizer

    recognizer = SherpaRecognizer(setting.files, engine)
    log.info("bench setting %s: %s", setting.name, recognizer.description)
    warm_up(recognizer)
    started = clock()
    records = run_sequential(
        recognizer, utterances, options, lambda r: on_done(setting.name, r), clock=clock
    )
    wall_s = clock() - started
    sweep = []
    for n in (n for n in streams if n > 1):
        started = clock()
        batched = run_batched(
            recognizer, utterances, options, n, lambda r, n=n: on_done(f"{setting.name} x{n}", r)
        )
        sweep.append(compare_batched(setting.name, records, batched, n, clock() - started))
    summary = summarize(records, options.metric, wall_s, sweep or None)
    files = setting.files
    return setting_record(
        setting.name, files.name, files.chunk, files.onnx_files(), summary, records
    )


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
