"""The capacity run's table (terminal and results.md) and its result files, in bench's style."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

HEADER = (
    "streams",
    "per worker",
    "p50 ms",
    "p99 ms",
    "max ms",
    "align wait\np50/max ms",
    "step\np99 ms",
    "CPU s per\naudio s",
    "load\n1 min",
    "held",
)


def table_rows(doc: dict[str, Any]) -> list[list[str]]:
    """One row per probe, by stream count."""
    deadline = doc["capacity"]["deadline_ms"]
    rows = []
    for p in doc["capacity"]["probes"]:
        if p["held"]:
            verdict = "yes"
        elif p["fell_behind"]:
            verdict = "no (fell behind)"
        else:
            verdict = f"no (step p99 > {deadline:.0f})"
        rows.append([
            str(p["streams"]),
            "+".join(str(n) for n in p["streams_per_worker"]),
            _fmt(p["p50_ms"], 1),
            _fmt(p["p99_ms"], 1),
            _fmt(p["max_ms"], 1),
            _wait(p),
            _fmt(p.get("step_p99_ms"), 1),
            _fmt(p["cpu_s_per_audio_s"], 3),
            _fmt(p["loadavg_1min"], 2),
            verdict,
        ])
    return rows


def _fmt(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _wait(probe: dict[str, Any]) -> str:
    """The align wait's p50/max (`-` under the ready schedule, which has none)."""
    p50, most = probe.get("align_wait_p50_ms"), probe.get("align_wait_max_ms")
    return "-" if p50 is None or most is None else f"{p50:.0f}/{most:.0f}"


def headline(doc: dict[str, Any]) -> str:
    """One sentence: the answer."""
    cap, run = doc["capacity"], doc["run"]
    return (
        f"{cap['largest_streams']} live streams held (step p99 within the "
        f"{cap['deadline_ms']:.0f} ms chunk, {cap.get('schedule', 'ready')} schedule)"
        + (f", {cap['of_ceiling']:.2f} of the engine's ceiling of {cap['ceiling_streams']:g}"
           if cap.get("of_ceiling") is not None else "")
        + f" on {cap['workers']} worker(s), "
        f"{cap['cores']} core(s), {run.get('cpu', 'unknown CPU')}; "
        f"model load {cap['load_s']:.2f} s, not timed"
        + (f"; the CPU alone would allow {cap['cpu_bound_streams']} (cores / CPU s per audio s)"
           if cap.get("cpu_bound_streams") else "")
    )


def rich_table(doc: dict[str, Any]) -> Any:
    """The probes as a Rich Table."""
    from rich.table import Table
    from rich.text import Text

    table = Table(
        title=Text(f"streamasr bench --capacity: {doc['run']['model']}"),
        title_justify="left",
        caption="latency: a chunk's audio all there -> its step done; "
        f"{doc['capacity']['probe_s']:g} s per probe",
        caption_justify="left",
    )
    for index, name in enumerate(HEADER):
        table.add_column(name, justify="left" if index == 0 else "right")
    for row in table_rows(doc):
        table.add_row(*(Text(cell) for cell in row))
    return table


def markdown(doc: dict[str, Any]) -> str:
    """results.md of a capacity run."""
    run, cap = doc["run"], doc["capacity"]
    lines = [
        "# streamasr bench --capacity results",
        "",
        headline(doc) + ".",
        "",
        "| " + " | ".join(h.replace("\n", " ") for h in HEADER) + " |",
        "|" + "|".join("---" for _ in HEADER) + "|",
        *("| " + " | ".join(row) + " |" for row in table_rows(doc)),
        "",
        "Latency: from the moment a chunk's audio has all arrived (paced at real time) to the "
        "end of the batched step that consumed it. A count holds when its step p99 (the "
        "latency less the align wait) is within the chunk "
        f"({cap['deadline_ms']:.0f} ms). Schedule: {cap.get('schedule', 'ready')} "
        "(aligned: the streams step together at the ticks of one clock of chunk period, and a "
        "chunk's wait for its tick, the align wait, is part of its latency; ready: a stream "
        "steps as soon as its chunk is there). Probes in the order run: "
        f"{', '.join(str(n) for n in cap['probe_order'])}.",
        "",
        "## Run",
        "",
    ]
    for key in ("model", "streamasr_version", "sherpa_onnx_version", "threads", "cpu",
                "platform", "date"):
        if key in run:
            lines.append(f"- {key}: {run[key]}")
    lines.append(f"- cores: {cap['cores']}, workers: {cap['workers']}")
    lines.append(f"- command: `{' '.join(run.get('command', []))}`")
    return "\n".join(lines) + "\n"


def write_capacity(out: Path, doc: dict[str, Any]) -> None:
    """results.json and results.md into `out`."""
    from streamasr.bench.outdir import write_result_file

    out.mkdir(parents=True, exist_ok=True)
    write_result_file(out / "results.json", json.dumps(doc, indent=1) + "\n")
    write_result_file(out / "results.md", markdown(doc))
