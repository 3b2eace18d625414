"""Aggregate records into per-setting summaries and the run record: the content of results.json.

results.json (schema "streamasr-bench/1"):

    {"schema": ..., "run": {versions, cpu, date, engine settings, command line},
     "dataset": {"path", "format", "utterances", "bad_rows": [...], "missing_audio": [...]},
     "settings": [{"name": "chunk 16" | "att 70,13", "model", "backend", "device", "chunk_ms",
                   "lookahead_ms", "output_frame_ms", "chunk" (sherpa-onnx exports),
                   "att_context_size" (NeMo), "settings": {the backend's own},
                   "files": {name: sha256 of each model file loaded},
                   "summary": {...}, "utterances": [record, ...]}]}

Writing it (with results.md and the terminal table) is `bench.results`; comparing it with a
baseline is `bench.baseline`.
"""

from __future__ import annotations

import datetime as dt
import platform
import sys
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from streamasr.backends.base import BackendInfo
from streamasr.bench.datasets import Dataset
from streamasr.bench.metrics import percentiles, total_counts
from streamasr.bench.runner import UtteranceRecord
from streamasr.distribution.manifest import sha256_file
from streamasr.version import __version__

SCHEMA = "streamasr-bench/1"


def summarize(
    records: Sequence[UtteranceRecord],
    metric: str,
    wall_s: float,
    streams: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The aggregate figures of one setting (corpus error rate, percentiles, RTF, speed).

    First-token percentiles leave out the utterances whose text came before the speech
    onset (their latency is clamped to 0); `text_before_onset` counts them.
    """
    ran = [r for r in records if not r.failed]
    counts = total_counts(r.counts for r in records)
    audio_s = sum(r.audio_s for r in ran)
    compute_s = sum(r.compute_s for r in ran)
    revisions = [r.stability.revisions for r in ran]
    revised = [w for r in ran for w in r.stability.revised_words]
    causes: dict[str, int] = {}
    for r in ran:
        causes[r.timing.final_cause] = causes.get(r.timing.final_cause, 0) + 1

    early = [r for r in ran if r.timing.text_before_onset]

    def values(name: str) -> list[float]:
        timed = ran
        if name.startswith("first_token"):
            timed = [r for r in ran if not r.timing.text_before_onset]
        return [v for r in timed if (v := getattr(r.timing, name)) is not None]

    return {
        "utterances": len(records),
        "failed": len(records) - len(ran),
        "audio_s": round(audio_s, 3),
        "compute_s": round(compute_s, 3),
        "rtf": round(compute_s / audio_s, 4) if audio_s else None,
        "wall_s": round(wall_s, 3),
        "throughput_x": round(audio_s / wall_s, 2) if wall_s > 0 else None,
        "metric": metric,
        "ref_units": counts.ref_units,
        "substitutions": counts.substitutions,
        "deletions": counts.deletions,
        "insertions": counts.insertions,
        "error_rate_pct": _round(counts.rate_pct, 2),
        "first_token_ms": percentiles(values("first_token_ms")),
        "text_before_onset": len(early),
        "text_before_onset_ids": [r.id for r in early],
        "first_token_wall_ms": percentiles(values("first_token_wall_ms")),
        "final_ms": percentiles(values("final_ms")),
        "final_wall_ms": percentiles(values("final_wall_ms")),
        "complete_ms": percentiles(values("complete_ms")),
        "final_causes": causes,
        "revisions_per_utt": round(sum(revisions) / len(revisions), 3) if revisions else None,
        "revised_words_per_revision": round(sum(revised) / len(revised), 3) if revised else None,
        "streams": streams,
    }


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def cpu_model() -> str:
    """The CPU's marketing name (Linux /proc/cpuinfo), else what platform says."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def run_record(settings: dict[str, Any], argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Who ran what, where and when: enough to reproduce or to distrust a number."""
    return {
        "streamasr_version": __version__,
        "sherpa_onnx_version": _version("sherpa-onnx"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu": cpu_model(),
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "command": list(sys.argv if argv is None else argv),
        **settings,
    }


def dataset_record(dataset: Dataset) -> dict[str, Any]:
    """What was read, and what was skipped or missing, for the results file."""
    return {
        "path": str(dataset.path),
        "format": dataset.format,
        "utterances": len(dataset.utterances),
        "bad_rows": [str(row) for row in dataset.bad_rows],
        "missing_audio": [f"{u.id}: {u.audio}" for u in dataset.missing_audio],
    }


def setting_record(
    name: str,
    info: BackendInfo,
    summary: dict[str, Any],
    records: Sequence[UtteranceRecord],
) -> dict[str, Any]:
    """One setting of a sweep: what ran (backend, device, chunk, look-ahead, output frame,
    the backend's own settings), the checksums of the model files it loaded, its summary and
    every utterance."""
    settings = {str(k): v for k, v in info.settings.items()}
    record: dict[str, Any] = {
        "name": name,
        "model": info.model_name,
        "backend": info.backend,
        "device": info.device,
        "chunk_ms": _ms(info.chunk_s),
        "lookahead_ms": _ms(info.lookahead_s),
        "output_frame_ms": _ms(info.output_frame_s),
    }
    if "chunk" in settings:
        record["chunk"] = settings["chunk"]
    if "att_context_size" in settings:
        record["att_context_size"] = settings["att_context_size"]
    record.update(
        settings=settings,
        files={p.name: sha256_file(p) for p in info.model_files},
        summary=summary,
        utterances=[r.to_dict() for r in records],
    )
    return record


def _ms(seconds: float) -> float | int:
    """Milliseconds, whole when they are (320, not 320.0)."""
    value = round(seconds * 1000, 3)
    return int(value) if value == int(value) else value


def results_document(
    run: dict[str, Any], dataset: dict[str, Any], settings: list[dict[str, Any]]
) -> dict[str, Any]:
    """The whole results.json."""
    return {"schema": SCHEMA, "run": run, "dataset": dataset, "settings": settings}


def streams_entries(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """The `--streams` sweep of a summary (an older results.json held one entry, not a list)."""
    info = summary.get("streams")
    if isinstance(info, dict):
        return [info]
    return list(info or [])


def streams_entry(summary: dict[str, Any], n: int) -> dict[str, Any]:
    """The entry for `--streams` value n (empty when not run)."""
    return next((e for e in streams_entries(summary) if e.get("n") == n), {})

