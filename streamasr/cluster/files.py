"""`file INPUTS... --output-dir DIR --ray`: one task per input file, outputs written by it.

Each task streams its file through `stream_file`, the very loop of a local `file` run, into
an OutputDirRenderer writing into the task's own temporary folder, then renames each file
into DIR: the outputs are byte for byte those of a local run, and the driver only learns the
summary line's figures and the file names. DIR and the inputs must be on a path every node
sees. An input that cannot be read fails alone, as locally; a node whose model copy fails
verification stops the run.
"""

from __future__ import annotations

import io
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console

from streamasr.cluster import outputs
from streamasr.cluster.models import ModelSpec, load_verified, node_name
from streamasr.session.events import Event, StreamSummary
from streamasr.session.stream import StreamOptions

if TYPE_CHECKING:
    from streamasr.cluster.driver import RayDriver


@dataclass(frozen=True)
class FileJob:
    """One input and where its outputs go (all of it pickles)."""

    key: str
    path: str
    out_dir: str
    state: str
    formats: tuple[str, ...]
    partials: str
    options: StreamOptions
    raw: Any = None  # RawFormat for headerless PCM
    sentence_case: bool = False


@dataclass(frozen=True)
class FileNote:
    """What a task tells the driver: figures for the summary line, never the text."""

    key: str
    path: str
    summary: StreamSummary | None
    written: tuple[str, ...]
    error: str = ""
    skipped: bool = False  # an earlier attempt had placed the outputs already
    node: str = ""


class _Keep:
    """Passes events on and keeps the summary (the renderer's own line goes nowhere)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.summary: StreamSummary | None = None

    def begin(self, source: str) -> None:
        self.inner.begin(source)

    def event(self, event: Event) -> None:
        self.inner.event(event)

    def end(self, summary: StreamSummary) -> None:
        self.summary = summary
        self.inner.end(summary)


def transcribe_file(spec: ModelSpec, job: FileJob) -> FileNote:
    """The task: decode one file into a temporary folder, then rename its outputs into place."""
    from streamasr.errors import InputError
    from streamasr.output.finishing import Finishing, finished
    from streamasr.output.output_dir import OutputDirRenderer
    from streamasr.session.file_stream import stream_file

    state = Path(job.state)
    outputs.note_attempt(state, job.key)
    if outputs.is_done(state, job.key):
        return FileNote(job.key, job.path, None, (), skipped=True, node=node_name())
    recognizer = load_verified(spec)
    temp = outputs.temp_folder(state, job.key)
    quiet = Console(file=io.StringIO())
    files = OutputDirRenderer(temp, job.formats, quiet, False, job.partials, True)
    inner = finished(files, Finishing(sentence_case=job.sentence_case))
    keep = _Keep(inner)
    error = ""
    try:
        stream_file(job.path, recognizer, keep, job.options, False, None, job.raw)
    except InputError as exc:  # as locally: what was recognised is written, the input fails
        error = str(exc)
    written = tuple(sorted(p.name for p in temp.iterdir() if p.suffix != ".part"))
    for name in written:
        outputs.place(temp / name, Path(job.out_dir) / name)
    outputs.mark_done(state, job.key)
    shutil.rmtree(temp, ignore_errors=True)
    summary = None if keep.summary is None else replace(keep.summary, text="", finals=())
    return FileNote(job.key, job.path, summary, written, error, node=node_name())


def file_jobs(
    paths: Sequence[str],
    out_dir: Path,
    state: Path,
    formats: tuple[str, ...],
    partials: str,
    options: StreamOptions,
    raw: Any = None,
    sentence_case: bool = False,
) -> list[FileJob]:
    """One job per input, keyed by its position."""
    return [
        FileJob(f"file-{i:06d}", path, str(out_dir), str(state), formats, partials, options,
                raw, sentence_case)
        for i, path in enumerate(paths)
    ]


def run_files(
    driver: RayDriver,
    jobs: Sequence[FileJob],
    spec: ModelSpec,
    on_note: Callable[[FileNote], None],
) -> None:
    """Run every job on the cluster; `on_note` as each finishes."""
    driver.run(transcribe_file, jobs, spec, spec.cpus, on_note, [job.path for job in jobs])
