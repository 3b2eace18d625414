"""The driver of `file --ray`: check, load once here, spread the inputs, report as they end.

The model is loaded on the driver first: every option and the model itself are checked in
seconds, before the cluster is asked for anything, and its files' sha256 become what every
node's copy must match. Then each input is one task; the driver shows the same progress bar
as a local run (all inputs as one length of audio: x real time across the cluster, ETA),
and one summary line per input as its task ends, in the order they end.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from streamasr.cluster import outputs
from streamasr.cluster.address import check_address
from streamasr.cluster.connect import ClusterInfo
from streamasr.cluster.driver import start_driver
from streamasr.cluster.files import FileNote, file_jobs, run_files
from streamasr.cluster.models import ModelSpec, model_spec
from streamasr.errors import UsageError

log = logging.getLogger("streamasr")


@dataclass(frozen=True)
class FileRunRequest:
    """What `file --ray` was asked (the options the local path checked already)."""

    address: str
    paths: tuple[str, ...]
    out_dir: Path
    formats: tuple[str, ...]
    partials: str
    raw: Any = None
    sentence_case: bool = False
    quiet: bool = False


def check_ray_file(output_dir: Path | None, paths: list[str], realtime: bool,
                   punctuate: str | None) -> Path:
    """What `file --ray` cannot do, said before anything loads; the output folder."""
    if output_dir is None:
        raise UsageError("--ray writes one file per input and format: add --output-dir DIR "
                         "(a folder every node can write)")
    if "-" in paths:
        raise UsageError("--ray decodes files the nodes can read; stdin ('-') stays on this "
                         "machine: drop --ray for it")
    if realtime:
        raise UsageError("--realtime paces one live stream; a cluster run decodes as fast as "
                         "it can: drop one of the two")
    if punctuate is not None:
        raise UsageError("--punctuate runs on local decoding only; drop --ray, or punctuate "
                         "the outputs afterwards")
    return output_dir


def total_duration_s(paths: tuple[str, ...]) -> float | None:
    """All inputs' audio, from their headers (None when one does not say)."""
    from streamasr.audio import open_source
    from streamasr.errors import InputError

    total = 0.0
    for path in paths:
        try:
            source = open_source(path)
        except (InputError, OSError):
            continue  # its task fails alone, as locally
        try:
            if source.info.duration_s is None:
                return None
            total += source.info.duration_s
        finally:
            source.close()
    return total


def file_on_ray(address: str, paths: list[str], model_options: Any, output_dir: Path | None,
                fmt: str | None, partials: str, raw: tuple[Any, Any, Any], realtime: bool,
                punctuate: str | None, sentence_case: bool, quiet: bool) -> None:
    """`file --ray`: every check of a local run, then the inputs on the cluster; exits 1
    when an input failed, 130 when stopped (only complete outputs are left)."""
    import typer

    from streamasr.commands.common import (
        EXIT_INTERRUPTED,
        check_partials,
        cli_errors,
        err_console,
    )
    from streamasr.commands.inputs import check_inputs_exist, raw_input_format
    from streamasr.commands.options import preflight
    from streamasr.output.output_dir import check_output_dir, parse_formats
    from streamasr.output.render_bars import ProgressDisplay

    with cli_errors():
        check_address(address)
        output_dir = check_ray_file(output_dir, paths, realtime, punctuate)
        raw_format = raw_input_format(*raw)
        formats = parse_formats(fmt)
        check_partials(partials, "jsonl" if "jsonl" in formats else formats[0])
        check_output_dir(output_dir, paths)
        check_inputs_exist(paths)
        prepared = preflight(model_options, paced=False)
        recognizer, stream = prepared.load(), prepared.feed
        spec = model_spec(prepared.plan, recognizer)
        request = FileRunRequest(address, tuple(paths), output_dir, formats, partials,
                                 raw_format, sentence_case, quiet)
        progress = ProgressDisplay(err_console) if err_console.is_terminal and not quiet else None
        try:
            failed = run_file_request(request, spec, stream, err_console, progress)
        except KeyboardInterrupt:
            err_console.print("[yellow]interrupted; the tasks are cancelled, the outputs in "
                              "place are complete[/yellow]")
            raise typer.Exit(EXIT_INTERRUPTED) from None
    if failed:
        err_console.print(f"{failed} of {len(paths)} inputs failed", highlight=False)
        raise typer.Exit(1)


def run_file_request(request: FileRunRequest, spec: ModelSpec, stream: Any, err: Console,
                     progress: Any | None) -> int:
    """Decode every input on the cluster; the number of inputs that failed."""
    from streamasr.commands.common import report_error
    from streamasr.output.output_dir import FILE_FORMATS, output_stem
    from streamasr.output.render import summary_line
    from streamasr.text.printable import printable

    driver = start_driver(request.address)
    cluster = driver.info
    state = outputs.fresh_state(request.out_dir)
    jobs = file_jobs(request.paths, request.out_dir, state, request.formats, request.partials,
                     stream, request.raw, request.sentence_case)
    failed = 0
    done_audio_s = 0.0
    if progress is not None:
        progress.begin(f"{len(jobs)} inputs on {cluster.nodes} Ray node(s)",
                       total_duration_s(request.paths))

    def on_note(note: FileNote) -> None:
        nonlocal failed, done_audio_s
        if note.summary is not None:
            done_audio_s += note.summary.audio_s
            if progress is not None:
                progress.advance(done_audio_s)
            if not request.quiet:
                line = summary_line(note.summary, False)
                err.print(f"{line} -> {', '.join(note.written)}", highlight=False, markup=False)
        elif note.skipped and not request.quiet:  # its first attempt placed them, then
            # its node was lost before the result came back: the retry found them in place
            names = ", ".join(f"{output_stem(note.path)}.{FILE_FORMATS[f]}"
                              for f in request.formats)  # fmt: skip
            err.print(printable(f"{note.path}: written by an attempt on a lost node -> {names}"),
                      highlight=False, markup=False)  # fmt: skip
        if note.error:
            failed += 1
            report_error(note.error)

    try:
        run_files(driver, jobs, spec, on_note)
    finally:
        if progress is not None:
            progress.end()
        counts = outputs.attempts(state)
        outputs.remove_state(request.out_dir)
        driver.close()
    if not request.quiet:
        err.print(cluster_line(cluster, len(jobs), counts), highlight=False, markup=False)
    return failed


def cluster_line(cluster: ClusterInfo, tasks: int, counts: dict[str, int]) -> str:
    """'Ray 2.x cluster: 3 node(s), 3 CPU(s); 12 tasks, 1 retried'."""
    retried = sum(1 for n in counts.values() if n > 1)
    return f"{cluster.describe()}; {tasks} tasks, {retried} retried"
