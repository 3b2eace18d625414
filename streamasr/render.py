"""Renderers: turn events into what a person or a program reads.

Data (text, JSONL, SRT) goes to stdout; the live display, summaries and messages to stderr.
Rich Live is used only when the output is a terminal.
"""

from __future__ import annotations

import json
from typing import IO, Protocol

from rich.console import Console
from rich.live import Live
from rich.text import Text

from streamasr.events import Event, Final, FirstToken, Partial, StreamSummary

FORMATS = ("live", "text", "jsonl", "srt")


class Renderer(Protocol):
    """What the CLI calls while a stream runs."""

    def begin(self, source: str) -> None: ...

    def event(self, event: Event) -> None: ...

    def end(self, summary: StreamSummary) -> None: ...


def summary_line(summary: StreamSummary, realtime: bool) -> str:
    """One human line per stream: duration, speed, first-token latency, revisions."""
    parts = [
        f"{summary.audio_s:.2f} s audio",
        f"RTF {summary.rtf:.3f}",
    ]
    if summary.first_token_latency_s is None:
        parts.append("no text recognised" if summary.audio_s else "empty audio")
    else:
        latency = f"first token {summary.first_token_latency_s * 1000:.0f} ms after onset (audio)"
        if realtime and summary.first_token_wall_latency_s is not None:
            latency += f", {summary.first_token_wall_latency_s * 1000:.0f} ms (wall clock)"
        parts.append(latency)
    parts.append(f"{summary.revisions} partial revisions")
    return f"{summary.source}: " + ", ".join(parts)


class LiveRenderer:
    """Partial in a live area at the bottom; finals printed above it, as they are committed."""

    def __init__(self, out: Console, err: Console, realtime: bool) -> None:
        self.out = out
        self.err = err
        self.realtime = realtime
        self._live: Live | None = None

    def begin(self, source: str) -> None:
        self.err.print(f"[bold]{escape(source)}[/bold]")
        self._live = Live(Text(""), console=self.out, transient=True, auto_refresh=False)
        self._live.start()

    def event(self, event: Event) -> None:
        if self._live is None:
            return
        if isinstance(event, Partial):
            self._live.update(Text(event.text, style="yellow"), refresh=True)
        elif isinstance(event, Final):
            self._live.update(Text(""), refresh=True)
            stamp = f"[dim]{event.start_s:7.2f}-{event.end_s:7.2f}[/dim]"
            self._live.console.print(f"{stamp} {escape(event.text)}")
        elif isinstance(event, FirstToken):
            self._live.console.print(
                f"[dim]first token after {event.latency_s * 1000:.0f} ms of audio "
                f"past onset {event.onset_s:.2f} s[/dim]"
            )

    def end(self, summary: StreamSummary) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None
        self.err.print(f"[dim]{escape(summary_line(summary, self.realtime))}[/dim]")


class TextRenderer:
    """One line per final on stdout; summaries on stderr."""

    def __init__(self, out: IO[str], err: Console, realtime: bool) -> None:
        self.out = out
        self.err = err
        self.realtime = realtime

    def begin(self, source: str) -> None:
        pass

    def event(self, event: Event) -> None:
        if isinstance(event, Final):
            self.out.write(event.text + "\n")
            self.out.flush()

    def end(self, summary: StreamSummary) -> None:
        self.err.print(escape(summary_line(summary, self.realtime)), highlight=False)


class JsonlRenderer:
    """Every event as one JSON object per line, tagged with its source; a summary at the end."""

    def __init__(self, out: IO[str]) -> None:
        self.out = out
        self._source = ""

    def begin(self, source: str) -> None:
        self._source = source

    def event(self, event: Event) -> None:
        self._write({"source": self._source, **event.to_dict()})

    def end(self, summary: StreamSummary) -> None:
        self._write(
            {
                "type": "summary",
                "source": summary.source,
                "audio_s": round(summary.audio_s, 6),
                "wall_s": round(summary.wall_s, 6),
                "compute_s": round(summary.compute_s, 6),
                "rtf": round(summary.rtf, 6),
                "text": summary.text,
                "first_token_latency_s": summary.first_token_latency_s,
                "first_token_wall_latency_s": summary.first_token_wall_latency_s,
                "revisions": summary.revisions,
            }
        )

    def _write(self, record: dict[str, object]) -> None:
        self.out.write(json.dumps(record, ensure_ascii=False) + "\n")
        self.out.flush()


def srt_time(seconds: float) -> str:
    """SRT timestamp HH:MM:SS,mmm."""
    millis = max(0, round(seconds * 1000))
    hours, rest = divmod(millis, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    secs, millis = divmod(rest, 1000)
    return f"{hours:02d}:{minutes:02d}:{secs:02d},{millis:03d}"


class SrtRenderer:
    """Subtitles from finals, written as each final is committed (live, not at the end)."""

    def __init__(self, out: IO[str], err: Console, realtime: bool) -> None:
        self.out = out
        self.err = err
        self.realtime = realtime
        self._index = 0

    def begin(self, source: str) -> None:
        pass

    def event(self, event: Event) -> None:
        if isinstance(event, Final):
            self._index += 1
            self.out.write(
                f"{self._index}\n{srt_time(event.start_s)} --> {srt_time(event.end_s)}\n"
                f"{event.text}\n\n"
            )
            self.out.flush()

    def end(self, summary: StreamSummary) -> None:
        self.err.print(escape(summary_line(summary, self.realtime)), highlight=False)


def escape(text: str) -> str:
    """Keep Rich from reading brackets in recognised text as markup."""
    from rich.markup import escape as rich_escape

    return rich_escape(text)
