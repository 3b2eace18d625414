"""What `streamasr bench` prints after a run, on stderr: the results table and the notes under
it (skipped rows, text before onset, batching that changed text, where the files went)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from streamasr.backends.base import BackendEntry
from streamasr.bench.outdir import RECORDS_NAME
from streamasr.commands.common import err_console
from streamasr.output.render import escape


def show_results(doc: dict[str, Any], out: Path) -> None:
    """The results table and the notes under it, on stderr."""
    from streamasr.bench.results import rich_table

    # a terminal gets its own width; a log file or pipe gets the table's natural width,
    # not 80 columns that would cut the figures of a wide sweep
    table = rich_table(doc)
    if err_console.is_terminal:
        err_console.print(table)
    else:
        from rich.console import Console

        Console(file=err_console.file, width=160, color_system=None).print(table)
    _print_notes(doc, out)


def note_int8_batching(entry: BackendEntry, settings: list[Any], streams: str) -> None:
    """Say plainly when batched rows are not bit-exact (an int8 export), in the words of the
    engine that knows its precisions, whenever such a model is batched."""
    most = max((int(p) for p in streams.split(",") if p.strip().isdigit()), default=1)
    if most > 1 and entry.batching_note is not None:
        note = entry.batching_note([(s.name, s.recognizer.info) for s in settings])
        if note is not None:
            err_console.print(note, highlight=False, markup=False)


def _print_notes(doc: dict[str, Any], out: Path) -> None:
    """Skipped rows, failures and where the files went, under the table."""
    from streamasr.bench.report import streams_entries

    data = doc["dataset"]
    if data["bad_rows"] or data["missing_audio"]:
        err_console.print(
            f"skipped {len(data['bad_rows'])} bad rows, {len(data['missing_audio'])} "
            "utterances with missing audio (listed in results.md)",
            highlight=False,
        )
    for setting in doc["settings"]:
        summary = setting["summary"]
        if "load_s" in summary:
            err_console.print(
                f"{setting['name']}: {summary['workers']} workers loaded the model in "
                f"{summary['load_s']:.2f} s, before the timed passes (RTF and throughput "
                "leave it out)",
                highlight=False,
                markup=False,
            )
        if summary.get("text_before_onset"):
            err_console.print(
                f"{setting['name']}: {summary['text_before_onset']} utterance(s) showed text "
                "before the speech onset (first token counted as 0 ms, left out of the "
                "percentiles)",
                highlight=False,
                markup=False,
            )
        for info in streams_entries(summary):
            if not info.get("same_text", info["identical"]):
                err_console.print(
                    f"[red]warning:[/red] {setting['name']}: batching {info['n']} streams "
                    f"changed the text of {escape(', '.join(info['text_mismatched'][:5]))}",
                    highlight=False,
                )
            elif not info["identical"]:
                err_console.print(
                    f"{setting['name']}: {info['n']} streams: same text; token times differ "
                    f"for {len(info['mismatched'])} utterance(s) (int8 models quantise each "
                    "batch as a whole; see the README)",
                    highlight=False,
                    markup=False,
                )
    err_console.print(
        f"results: {out / 'results.json'}, {out / 'results.md'}, {out / RECORDS_NAME}",
        highlight=False,
        markup=False,
    )
