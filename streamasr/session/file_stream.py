"""One input file (or stdin) through a recognizer into a renderer: the loop of `file`, of
its Ray tasks and of the overhead script, in one place below the commands that use it.

WAV streams that follow the first on a pipe (`cat a.wav b.wav |`) are inputs of their own;
the progress bar, when there is one, sits beside the renderer.
"""

from __future__ import annotations

import logging
from typing import Protocol

from streamasr.audio import (
    STDIN_NAME,
    AudioSource,
    RawFormat,
    check_path_name,
    next_input,
    open_source,
)
from streamasr.backends.base import Recognizer
from streamasr.session.driver import Pacing, Renderer, Sink, drive
from streamasr.session.events import Event, StreamSummary
from streamasr.session.stream import StreamOptions, StreamSession

log = logging.getLogger("streamasr")


class ProgressDisplay(Protocol):
    """A progress bar beside the renderer (output/render_bars.py draws one): declared here
    so this package need not import the renderers, which import its events."""

    def begin(self, source: str, duration_s: float | None) -> None: ...

    def advance(self, position_s: float) -> None: ...

    def event(self, event: Event) -> None: ...

    def end(self) -> None: ...


def stream_file(
    path: str,
    recognizer: Recognizer,
    renderer: Renderer,
    options: StreamOptions,
    realtime: bool,
    progress: ProgressDisplay | None = None,
    raw: RawFormat | None = None,
) -> None:
    """Stream one file; on any interruption, flush what was recognised, then re-raise.

    WAV streams that follow the first on a pipe (`cat a.wav b.wav |`) are inputs of their own.
    """
    check_path_name(path)
    source: AudioSource | None = open_source(path, raw)
    count = 1
    while source is not None:
        name = path if count == 1 else f"{path} (WAV stream {count})"
        _stream_source(name, source, recognizer, renderer, options, realtime, progress)
        source, count = next_input(source), count + 1


def _stream_source(
    path: str,
    source: AudioSource,
    recognizer: Recognizer,
    renderer: Renderer,
    options: StreamOptions,
    realtime: bool,
    progress: ProgressDisplay | None,
) -> None:
    if source.info.length_known and source.info.frames == 0:
        log.warning("%s has no audio samples; the transcript is empty", path)
    session = StreamSession(recognizer, source.sample_rate, path, options)
    renderer.begin(path)
    sink: Sink = renderer
    after_block = None
    if progress is not None:
        # a buffered pipe's header may not state the true length: position only
        progress.begin(path, None if path == STDIN_NAME else source.info.duration_s)
        sink = _ProgressSink(renderer, progress, session)
        after_block = sink.advance
    try:
        blocks = source.blocks(session.block_s)
        drive(session, blocks, sink, pacing=Pacing() if realtime else None,
              after_block=after_block)
    finally:
        source.close()


class _ProgressSink:
    """The renderer with the progress bar beside it; the bar goes before the summary line."""

    def __init__(
        self, renderer: Renderer, progress: ProgressDisplay, session: StreamSession
    ) -> None:
        self.renderer = renderer
        self.progress = progress
        self.session = session

    def event(self, event: Event) -> None:
        self.renderer.event(event)
        self.progress.event(event)

    def advance(self, _block: object) -> None:
        self.progress.advance(self.session.audio_s)

    def end(self, summary: StreamSummary) -> None:
        self.progress.end()
        self.renderer.end(summary)
