"""Aggregate records into per-setting summaries; write results.json / results.md; gate on a
baseline.

results.json (schema "streamasr-bench/1"):

    {"schema": ..., "run": {versions, cpu, date, engine settings, command line},
     "dataset": {"path", "format", "utterances", "bad_rows": [...], "missing_audio": [...]},
     "settings": [{"name": "chunk 16" | "att 70,13", "model", "backend", "device", "chunk_ms",
                   "lookahead_ms", "output_frame_ms", "chunk" (sherpa-onnx exports),
                   "att_context_size" (NeMo), "settings": {the backend's own},
                   "files": {name: sha256 of each model file loaded},
                   "summary": {...}, "utterances": [record, ...]}]}

`--fail-on "wer+0.5,first_token_p90+50ms"` rules: METRIC, then + (fail when the value rose by
more than the amount) or - (fail when it fell by more), then the amount: a bare number is in
the metric's own unit (percentage points for wer/cer, ms for latencies, x real time for
throughput), `ms` or `s` for latencies, `%` relative to the baseline value.
"""

from __future__ import annotations

import datetime as dt
import json
import platform
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from streamasr import __version__
from streamasr.backends.base import BackendInfo
from streamasr.bench.datasets import Dataset
from streamasr.bench.metrics import percentiles, total_counts
from streamasr.bench.runner import UtteranceRecord
from streamasr.distribution.manifest import sha256_file
from streamasr.errors import InputError, UsageError

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


def write_results(out: Path, doc: dict[str, Any], comparison: Sequence[Check] = ()) -> None:
    """Write results.json and results.md into `out` (created if needed)."""
    from streamasr.bench.outdir import write_result_file

    out.mkdir(parents=True, exist_ok=True)
    write_result_file(out / "results.json", json.dumps(doc, indent=1) + "\n")
    write_result_file(out / "results.md", markdown(doc, comparison))


# ---- the table: the same columns on the terminal and in results.md ----------------------


def table_rows(doc: dict[str, Any], compact: bool = False) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the summary table, one row per setting.

    `compact` (the terminal) leaves out S/D/I and revisions, which results.md keeps, so the
    table fits 80 columns.
    """
    metric = doc["run"].get("metric", "wer").upper()
    realtime = bool(doc["run"].get("realtime"))
    sweep = _sweep(doc)
    columns: list[tuple[str, Any]] = [
        ("setting", lambda st, s: st["name"]),
        (
            "utts",
            lambda st, s: (
                f"{s['utterances']}" + (f" ({s['failed']} failed)" if s["failed"] else "")
            ),
        ),
        (f"{metric}\n%", lambda st, s: _fmt(s["error_rate_pct"], 2)),
        ("S/D/I", lambda st, s: f"{s['substitutions']}/{s['deletions']}/{s['insertions']}"),
        ("first\ntoken ms\np50/p90", lambda st, s: _pair(s["first_token_ms"])),
        ("text\nbefore\nonset", lambda st, s: str(s.get("text_before_onset", 0))),
    ]
    if realtime:
        columns.append(
            ("wall first\ntoken ms\np50/p90", lambda st, s: _pair(s["first_token_wall_ms"]))
        )
    columns += [
        ("final ms\np50", lambda st, s: _fmt(s["final_ms"].get("p50"), 0)),
        ("text complete\nms p50", lambda st, s: _fmt(s.get("complete_ms", {}).get("p50"), 0)),
    ]
    if realtime:
        columns.append(("wall final\nms p50", lambda st, s: _fmt(s["final_wall_ms"].get("p50"), 0)))
    columns += [
        ("rev/\nutt", lambda st, s: _fmt(s["revisions_per_utt"], 2)),
        ("RTF", lambda st, s: _fmt(s["rtf"], 3)),
        ("x real\ntime", lambda st, s: _fmt(s["throughput_x"], 1)),
    ]
    for n in sweep:
        columns.append(
            (
                f"x real\ntime\n{n} str" if compact else f"x real time\n{n} streams",
                lambda st, s, n=n: _streams_cell(streams_entry(s, n)),
            )
        )
    if compact:
        columns = [c for c in columns if c[0] not in _NOT_COMPACT]
    header = [name for name, _ in columns]
    rows = [[cell(st, st["summary"]) for _, cell in columns] for st in doc["settings"]]
    return header, rows


_NOT_COMPACT = (
    "S/D/I",
    "rev/\nutt",
    "wall final\nms p50",
    "text complete\nms p50",
    "text\nbefore\nonset",  # the terminal prints a note under the table instead
)


def _sweep(doc: dict[str, Any]) -> list[int]:
    """The --streams values above 1 that a run decoded in batches."""
    streams = doc["run"].get("streams", 1)
    return [n for n in (streams if isinstance(streams, list) else [streams]) if n > 1]


def streams_entries(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """The `--streams` sweep of a summary (an older results.json held one entry, not a list)."""
    info = summary.get("streams")
    if isinstance(info, dict):
        return [info]
    return list(info or [])


def streams_entry(summary: dict[str, Any], n: int) -> dict[str, Any]:
    """The entry for `--streams` value n (empty when not run)."""
    return next((e for e in streams_entries(summary) if e.get("n") == n), {})


def _streams_cell(info: dict[str, Any]) -> str:
    if not info.get("same_text", info.get("identical", True)):
        note = " (text differs!)"
    elif not info.get("identical", True):
        note = " (times differ)"
    else:
        note = ""
    return f"{_fmt(info.get('throughput_x'), 1)}{note}"


def _fmt(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _pair(stats: dict[str, float]) -> str:
    if not stats:
        return "-"
    return f"{stats['p50']:.0f}/{stats['p90']:.0f}"


def rich_table(doc: dict[str, Any]) -> Any:
    """The summary as a Rich Table (the command prints it)."""
    from rich.table import Table
    from rich.text import Text

    header, rows = table_rows(doc, compact=True)
    table = Table(
        title=Text(f"streamasr bench: {doc['dataset']['path']}"),
        title_justify="left",
        caption="latencies: ms of audio time (wall: wall clock) from speech onset/end"
        + ("; N str: N streams decoded in batches" if _sweep(doc) else ""),
        caption_justify="left",
    )
    for index, name in enumerate(header):
        table.add_column(name, justify="left" if index == 0 else "right")
    for row in rows:
        table.add_row(*(Text(str(cell)) for cell in row))  # names are text, not markup
    return table


def markdown(doc: dict[str, Any], comparison: Sequence[Check] = ()) -> str:
    """results.md: the table, the run record and what was skipped."""
    header, rows = table_rows(doc)
    run, data = doc["run"], doc["dataset"]
    lines = [
        "# streamasr bench results",
        "",
        f"Dataset: `{data['path']}` ({data['format']}, {data['utterances']} utterances read, "
        f"{len(data['bad_rows'])} bad rows skipped, {len(data['missing_audio'])} missing audio)",
        "",
        "| " + " | ".join(h.replace("/\n", "/").replace("\n", " ") for h in header) + " |",
        "|" + "|".join("---" for _ in header) + "|",
        *("| " + " | ".join(row) + " |" for row in rows),
        "",
        "Latencies are algorithmic (audio time) unless marked wall; see the README for the "
        "definitions.",
        "",
        "## Run",
        "",
    ]
    for key in (
        "model",
        "streamasr_version",
        "sherpa_onnx_version",
        "decoding_method",
        "threads",
        "realtime",
        "streams",
        "metric",
        "cpu",
        "platform",
        "date",
    ):
        if key in run:
            lines.append(f"- {key}: {run[key]}")
    lines.append(f"- command: `{' '.join(run.get('command', []))}`")
    for setting in doc["settings"]:
        files = ", ".join(f"{name} {digest[:12]}" for name, digest in setting["files"].items())
        lines.append(f"- {setting['name']} files (sha256): {files}")
    if comparison:
        lines += ["", "## Against the baseline", "", *comparison_lines(comparison)]
    if data["bad_rows"] or data["missing_audio"]:
        lines += ["", "## Skipped", ""]
        lines += [f"- {row}" for row in data["bad_rows"]]
        lines += [f"- missing audio: {row}" for row in data["missing_audio"]]
    return "\n".join(lines) + "\n"


# ---- baseline gate ------------------------------------------------------------------------


_METRIC_PATHS: dict[str, tuple[str, ...]] = {
    "error_rate": ("error_rate_pct",),
    "wer": ("error_rate_pct",),
    "cer": ("error_rate_pct",),
    "mer": ("error_rate_pct",),
    "rtf": ("rtf",),
    "throughput": ("throughput_x",),
    "streams_throughput": ("streams", "throughput_x"),  # the largest --streams value
    "revisions": ("revisions_per_utt",),
}
for _name in ("first_token", "first_token_wall", "final", "final_wall", "complete"):
    for _p in ("p50", "p90", "p99"):
        _METRIC_PATHS[f"{_name}_{_p}"] = (f"{_name}_ms", _p)
_LATENCY = {name for name, path in _METRIC_PATHS.items() if path[0].endswith("_ms")}
_RULE = re.compile(r"^\s*([a-z0-9_]+)\s*([+-])\s*([0-9]*\.?[0-9]+)\s*(ms|s|%|pp)?\s*$")


@dataclass(frozen=True)
class Rule:
    """One --fail-on term: fail when METRIC moved in `direction` by more than the amount."""

    metric: str
    direction: str  # "+" or "-"
    amount: float  # in the metric's unit, or percent of the baseline when relative
    relative: bool = False

    def __str__(self) -> str:
        unit = "%" if self.relative else ("ms" if self.metric in _LATENCY else "")
        return f"{self.metric}{self.direction}{self.amount:g}{unit}"


def parse_fail_on(text: str) -> list[Rule]:
    """Parse 'wer+0.5,first_token_p90+50ms,throughput-10%'."""
    rules = []
    for term in filter(None, (t.strip() for t in text.split(","))):
        match = _RULE.match(term)
        if not match:
            raise UsageError(
                f"--fail-on term {term!r} is not METRIC+AMOUNT or METRIC-AMOUNT "
                "(e.g. wer+0.5, first_token_p90+50ms, throughput-10%)"
            )
        metric, direction, number, unit = match.groups()
        if metric not in _METRIC_PATHS:
            raise UsageError(
                f"--fail-on metric {metric!r} is not known; use one of: "
                f"{', '.join(sorted(_METRIC_PATHS))}"
            )
        amount = float(number)
        if unit in ("ms", "s") and metric not in _LATENCY:
            raise UsageError(f"--fail-on {term!r}: {metric} is not a latency; drop the {unit}")
        if unit == "pp" and metric not in ("wer", "cer", "mer", "error_rate"):
            raise UsageError(f"--fail-on {term!r}: pp (percentage points) is for wer/cer only")
        if unit == "s":
            amount *= 1000.0
        rules.append(Rule(metric, direction, amount, relative=unit == "%"))
    if not rules:
        raise UsageError("--fail-on is empty; give terms like wer+0.5,first_token_p90+50ms")
    return rules


def metric_value(summary: dict[str, Any], metric: str) -> float | None:
    """A summary figure by its --fail-on name (None when not measured)."""
    value: Any = summary
    if metric == "streams_throughput":
        entries = streams_entries(summary)
        value = {"streams": entries[-1] if entries else None}
    for key in _METRIC_PATHS[metric]:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return float(value) if isinstance(value, (int, float)) else None


@dataclass(frozen=True)
class Check:
    """One metric of one setting against the baseline."""

    setting: str
    metric: str
    baseline: float | None
    current: float | None
    rule: Rule | None = None

    @property
    def delta(self) -> float | None:
        """current - baseline."""
        if self.baseline is None or self.current is None:
            return None
        return self.current - self.baseline

    @property
    def failed(self) -> bool:
        """True when a rule exists and the change is beyond it."""
        if self.rule is None or self.delta is None:
            return False
        allowed = self.rule.amount
        if self.rule.relative:
            allowed = abs(self.baseline or 0.0) * self.rule.amount / 100.0
        if self.rule.direction == "+":
            return self.delta > allowed + 1e-9
        return -self.delta > allowed + 1e-9


def load_baseline(path: Path) -> dict[str, Any]:
    """An earlier results.json (a directory holding one is accepted too)."""
    if path.is_dir():
        path = path / "results.json"
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(f"--baseline {path}: no such file; pass an earlier results.json") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"--baseline {path}: not a readable results.json ({exc})") from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise InputError(
            f"--baseline {path}: not a streamasr bench results.json (schema {SCHEMA} expected)"
        )
    return doc


DEFAULT_COMPARED = ("error_rate", "first_token_p50", "first_token_p90", "final_p50", "rtf")


def check_baseline_matches(baseline: dict[str, Any], settings: Sequence[str], path: str) -> None:
    """--fail-on compares settings by name: with none in common, every check would be vacuous
    and the gate would pass whatever the run gives. Refuse that before anything runs."""
    names = [s.get("name") for s in baseline.get("settings", []) if isinstance(s, dict)]
    if not set(names) & set(settings):
        raise UsageError(
            f"--fail-on: --baseline {path} has no setting of this run to compare "
            f"(it has {', '.join(map(str, names)) or 'none'}; this run has "
            f"{', '.join(settings)}); run the baseline's settings or make a new baseline"
        )


def compare(
    baseline: dict[str, Any], current: dict[str, Any], rules: Sequence[Rule] = ()
) -> list[Check]:
    """Settings matched by name; every ruled metric, plus the headline ones for display."""
    before = {s["name"]: s["summary"] for s in baseline.get("settings", [])}
    checks = []
    ruled = {r.metric: r for r in rules}
    names = list(ruled) + [m for m in DEFAULT_COMPARED if m not in ruled]
    for setting in current["settings"]:
        old = before.get(setting["name"])
        for metric in names:
            base = metric_value(old, metric) if old is not None else None
            checks.append(
                Check(
                    setting["name"],
                    metric,
                    base,
                    metric_value(setting["summary"], metric),
                    ruled.get(metric),
                )
            )
    return checks


def comparison_lines(checks: Sequence[Check]) -> list[str]:
    """Human lines: setting, metric, baseline -> current (delta), verdict."""
    lines = []
    for check in checks:
        if check.delta is None:
            verdict = "not comparable (missing in the baseline or here)"
            lines.append(f"- {check.setting} {check.metric}: {verdict}")
            continue
        verdict = "FAIL" if check.failed else ("ok" if check.rule else "")
        rule = f" [rule {check.rule}]" if check.rule else ""
        lines.append(
            f"- {check.setting} {check.metric}: {check.baseline:g} -> {check.current:g} "
            f"({check.delta:+.3g}){rule} {verdict}".rstrip()
        )
    return lines
