"""`file --output-dir DIR`: one file per input and per format, named after the input.

Why: captions are files beside the recordings (talk.srt, talk.vtt), not one stream on stdout
whose times restart with every input. Each file is written as the input streams (a `.part`
beside its final name) and renamed into place when the input ends, also when it ends early
(Ctrl-C, a damaged file): what was recognised is kept. The folder is checked writable before
any model loads.
"""

from __future__ import annotations

import io
import os
import re
from pathlib import Path
from typing import IO, cast

from rich.console import Console

from streamasr.audio import STDIN_NAME
from streamasr.errors import OutputError, UsageError
from streamasr.output.render import (
    RENDERERS,
    Renderer,
    RenderTarget,
    SubtitleRenderer,
    summary_line,
)
from streamasr.session.events import Event, StreamSummary
from streamasr.text.captions import CueRules
from streamasr.text.printable import printable

# file extension -> the renderer that writes it (each RENDERERS entry declares its suffix)
RENDERER_OF = {e.suffix: e.name for e in RENDERERS.values() if e.suffix is not None}
# --format name (a renderer's name, or its file extension: text or txt) -> file extension
FILE_FORMATS = {
    alias: suffix for suffix, name in RENDERER_OF.items() for alias in (name, suffix)
}
DEFAULT_FILE_FORMATS = ("txt",)
PART_SUFFIX = ".part"


def parse_formats(fmt: str | None) -> tuple[str, ...]:
    """'srt,vtt' -> ('srt', 'vtt'); each must be a file format; none given: txt."""
    if fmt is None:
        return DEFAULT_FILE_FORMATS
    names = tuple(dict.fromkeys(part.strip() for part in fmt.split(",") if part.strip()))
    bad = [name for name in names if name not in FILE_FORMATS]
    if bad or not names:
        raise UsageError(
            f"--format {fmt!r} with --output-dir: use one or more of {', '.join(RENDERER_OF)} "
            "(comma-separated)"
        )
    return tuple(FILE_FORMATS[name] for name in names)


def output_stem(source: str) -> str:
    """The file name an input's outputs share: its own name without the extension."""
    if source == STDIN_NAME:
        return "stdin"
    match = re.fullmatch(r"(.*) \(WAV stream (\d+)\)", source)
    if match:  # a further WAV stream on the same pipe
        return f"{output_stem(match.group(1))}-{match.group(2)}"
    return Path(source).stem or "audio"


def check_output_dir(directory: Path, paths: list[str]) -> None:
    """The folder exists or can be made and takes a file; no two inputs share a name."""
    stems: dict[str, str] = {}
    for path in paths:
        stem = output_stem(path)
        if stem in stems:
            raise UsageError(
                f"--output-dir: {stems[stem]} and {path} would both write {stem}.*; rename one "
                "or run them separately"
            )
        stems[stem] = path
    try:
        directory.mkdir(parents=True, exist_ok=True)
        probe = directory / f".streamasr-probe-{os.getpid()}"
        probe.write_bytes(b"x")
        probe.unlink()
    except OSError as exc:
        raise OutputError(
            f"--output-dir {directory}: cannot write there ({exc.strerror}); choose a "
            "writable folder"
        ) from None


class _File:
    """A text file whose failed write is a one-line OutputError naming the file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.closed = False
        try:
            self._handle: IO[str] = path.open("w", encoding="utf-8")
        except OSError as exc:
            raise OutputError(f"cannot write {path}: {exc.strerror}") from None

    def write(self, text: str) -> int:
        try:
            return self._handle.write(text)
        except OSError as exc:
            raise OutputError(f"cannot write {self.path}: {exc.strerror}") from None

    def flush(self) -> None:
        try:
            self._handle.flush()
        except OSError as exc:
            raise OutputError(f"cannot write {self.path}: {exc.strerror}") from None

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._handle.close()


class OutputDirRenderer:
    """Fans each input's events out to one renderer per format, each writing its own file."""

    def __init__(self, directory: Path, formats: tuple[str, ...], err: Console, realtime: bool,
                 partials: str = "full", quiet: bool = False,
                 cues: CueRules | None = None) -> None:
        self.directory = directory
        self.cues = cues or CueRules()
        self.formats = formats
        self.err = err
        self.realtime = realtime
        self.partials = partials
        self.quiet = quiet  # no summary line per input
        self._open: list[tuple[_File, Path, Renderer]] = []
        self._quiet = Console(file=io.StringIO())  # per-file renderers' own summary lines

    def _renderer(self, ext: str, file: _File) -> Renderer:
        out = cast(IO[str], file)  # what the renderers need of it: write and flush
        target = RenderTarget(out, self._quiet, self.realtime, self.partials, cues=self.cues)
        return RENDERERS[RENDERER_OF[ext]].make(target)

    def begin(self, source: str) -> None:
        stem = output_stem(source)
        for ext in self.formats:
            final = self.directory / f"{stem}.{ext}"
            out = _File(final.with_name(final.name + PART_SUFFIX))
            renderer = self._renderer(ext, out)
            self._open.append((out, final, renderer))
            renderer.begin(source)

    def event(self, event: Event) -> None:
        for _, _, renderer in self._open:
            renderer.event(event)

    def end(self, summary: StreamSummary) -> None:
        """Close and rename every file of this input, then one summary line on stderr."""
        written = []
        notes = {r.note() for _, _, r in self._open if isinstance(r, SubtitleRenderer)}
        try:
            for out, final, renderer in self._open:
                renderer.end(summary)
                out.flush()
                out.close()
                os.replace(out.path, final)
                written.append(final.name)
        finally:
            for out, _, _ in self._open:
                out.close()
            self._open = []
        if not self.quiet:
            line = summary_line(summary, self.realtime)
            shown = printable(f"{line} -> {', '.join(written)}")
            self.err.print(shown, highlight=False, markup=False)
            for note in sorted(notes - {""}):
                shown = printable(f"{summary.source}: {note}")
                self.err.print(shown, highlight=False, markup=False)
