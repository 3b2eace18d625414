"""What `streamasr bench` shows, on stderr: the progress bar (on a terminal only), the results
table and the notes under it (skipped rows, text before onset, batching that changed text,
where the files went), each capacity probe and the capacity report."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from streamasr.bench import capacity_report, results
from streamasr.bench.baseline import Check, comparison_lines
from streamasr.bench.outdir import RECORDS_NAME
from streamasr.bench.report import streams_entries
from streamasr.bench.run import BenchView
from streamasr.commands.common import err_console
from streamasr.output.render import escape


@contextmanager
def progress(total: int) -> Iterator[Callable[[str], None]]:
    """One bar with an ETA over every pass; the callback advances it by one utterance."""
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn())
    with Progress(*columns, console=err_console, transient=True,
                  disable=not err_console.is_terminal) as bar:
        task = bar.add_task("bench", total=total)
        yield lambda label: bar.update(task, advance=1, description=escape(label))


def _table(table: Table, width: int) -> None:
    """A terminal gets its own width; a log file or pipe gets the table's natural width, not
    80 columns that would cut the figures of a wide sweep."""
    if err_console.is_terminal:
        err_console.print(table)
    else:
        Console(file=err_console.file, width=width, color_system=None).print(table)


def show_results(doc: dict[str, Any], out: Path, notes: list[str], checks: list[Check]) -> None:
    """The results table, the notes under it and the comparison with the baseline."""
    _table(results.rich_table(doc), 160)
    _print_notes(doc, out)
    for note in notes:
        err_console.print(note, highlight=False, markup=False)
    if checks:
        err_console.print("[bold]against the baseline[/bold]")
        for line in comparison_lines(checks):
            err_console.print(line, highlight=False, markup=False)


def show_probe(n: int, found: dict[str, Any]) -> None:
    """One line per probe, also when stderr is a log: a search takes minutes."""
    err_console.print(f"capacity: {n} streams: p99 {found['p99_ms']} ms, "
                      f"{'held' if found['held'] else 'missed'}", highlight=False, markup=False)


def show_capacity(doc: dict[str, Any], out: Path) -> None:
    """The capacity table, its headline and where the files went."""
    _table(capacity_report.rich_table(doc), 120)
    err_console.print(capacity_report.headline(doc), highlight=False, markup=False)
    err_console.print(f"results: {out / 'results.json'}, {out / 'results.md'}",
                      highlight=False, markup=False)


def _print_notes(doc: dict[str, Any], out: Path) -> None:
    """Skipped rows, failures and where the files went, under the table."""
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


VIEW = BenchView(progress, show_results, show_probe, show_capacity)
