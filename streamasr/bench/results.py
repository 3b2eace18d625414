"""results.json and results.md in the output folder, and the summary table: the same columns
on the terminal (Rich) and in results.md."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from streamasr.bench.baseline import Check, comparison_lines
from streamasr.bench.report import streams_entry


def write_results(out: Path, doc: dict[str, Any], comparison: Sequence[Check] = ()) -> None:
    """Write results.json and results.md into `out` (created if needed)."""
    from streamasr.bench.outdir import write_result_file

    out.mkdir(parents=True, exist_ok=True)
    write_result_file(out / "results.json", json.dumps(doc, indent=1) + "\n")
    write_result_file(out / "results.md", markdown(doc, comparison))



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
