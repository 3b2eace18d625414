"""Renderers: turn events into what a person or a program reads.

Data (text, JSONL, SRT) goes to stdout; the live display, summaries and messages to stderr.
Rich Live is used only when the output is a terminal. What a person reads passes through
`printable` (no control character from an engine or a file name reaches the terminal); JSONL
keeps the text, escaped as JSON escapes it.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import PurePath
from typing import IO

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.text import Text

from streamasr.audio.level import LevelReading
from streamasr.errors import StreamAsrError
from streamasr.output.render_bars import meter_text
from streamasr.session.driver import Renderer  # the protocol every format here follows
from streamasr.session.events import Event, Final, FirstToken, Partial, StreamSummary
from streamasr.text.captions import (
    CueRules,
    CueStats,
    Word,
    caption_time,
    cues_of,
    even_words,
    respelled,
    sentence_case,
)
from streamasr.text.printable import json_escaped, printable
from streamasr.text.tokens import shared_prefix_len, split_words

#: How JSONL writes partials: each whole ("full"), or what changed since the previous one
PARTIALS = ("full", "delta")


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
    if summary.skipped_s:
        parts.append(f"{summary.skipped_s:.2f} s of silence not decoded (--vad-gate)")
    return printable(f"{summary.source}: " + ", ".join(parts))


class LiveRenderer:
    """Partial in a live area at the bottom; finals printed above it, as they are committed.

    `quiet`: captions only (no source name, first-token lines or summary line).
    """

    def __init__(self, out: Console, err: Console, realtime: bool, quiet: bool = False) -> None:
        self.out = out
        self.err = err
        self.realtime = realtime
        self.quiet = quiet
        self._live: Live | None = None
        self._partial = Text("")
        self._meter: Text | None = None

    def level(self, reading: LevelReading) -> None:
        """Show the input level meter below the partial (the microphone's live view)."""
        self._meter = meter_text(reading)
        self._show()

    def note(self, message: str) -> None:
        """A message (Rich markup) printed above the live area, which stays whole below it.

        Printed through the live console: a second console writing to the same terminal
        would break the live area's idea of where it is.
        """
        target = self._live.console if self._live is not None else self.err
        target.print(message, highlight=False, soft_wrap=True)

    def _show(self) -> None:
        if self._live is None:
            return
        shown: RenderableType = self._partial
        if self._meter is not None:
            shown = Group(self._partial, self._meter)
        self._live.update(shown, refresh=True)

    def begin(self, source: str) -> None:
        if not self.quiet:
            self.err.print(f"[bold]{escape(source)}[/bold]")
        self._live = Live(Text(""), console=self.out, transient=True, auto_refresh=False)
        self._live.start()

    def event(self, event: Event) -> None:
        if self._live is None:
            return
        if isinstance(event, Partial):
            self._partial = Text(printable(event.text), style="yellow")
            self._show()
        elif isinstance(event, Final):
            self._partial = Text("")
            self._show()
            stamp = f"{event.start_s:7.2f}-{event.end_s:7.2f}"
            line = Text.assemble((stamp, "dim"), " ", printable(event.text))
            self._live.console.print(line)
        elif isinstance(event, FirstToken) and not self.quiet:
            self._live.console.print(
                f"[dim]first token after {event.latency_s * 1000:.0f} ms of audio "
                f"past onset {event.onset_s:.2f} s[/dim]"
            )

    def end(self, summary: StreamSummary) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None
        if not self.quiet:
            self.err.print(f"[dim]{escape(summary_line(summary, self.realtime))}[/dim]")


class TextRenderer:
    """One line per final on stdout; summaries on stderr.

    With `headers` (several inputs), each input's lines follow a line `==> NAME <==`, and
    inputs after the first are preceded by an empty line, as `tail` and `head` do. `quiet`:
    no summary lines.
    """

    def __init__(
        self,
        out: IO[str],
        err: Console,
        realtime: bool,
        headers: bool = False,
        quiet: bool = False,
    ) -> None:
        self.out = out
        self.err = err
        self.realtime = realtime
        self.headers = headers
        self.quiet = quiet
        self._begun = 0

    def begin(self, source: str) -> None:
        if self.headers:
            self.out.write(("\n" if self._begun else "") + text_header(source))
            self.out.flush()
        self._begun += 1

    def event(self, event: Event) -> None:
        if isinstance(event, Final):
            self.out.write(printable(event.text) + "\n")
            self.out.flush()

    def end(self, summary: StreamSummary) -> None:
        if not self.quiet:
            self.err.print(escape(summary_line(summary, self.realtime)), highlight=False)


class JsonlRenderer:
    """Every event as one JSON object per line, tagged with its source; a summary at the end.

    `partials="delta"`: a partial carries only what changed since the previous partial of
    its segment, so an utterance of n tokens writes O(n) bytes in all, not O(n^2):

    - ``stable_chars`` and ``text_tail`` replace ``text``:
      ``text = previous_text[:stable_chars] + text_tail``;
    - ``stable_tokens``, ``tokens_tail`` and ``token_times_s_tail`` replace ``tokens`` and
      ``token_times_s``: ``tokens = previous_tokens[:stable_tokens] + tokens_tail``, and the
      same for the times (a token is stable when its piece and its time are both unchanged).

    The previous partial is the last one with the same source and segment; the first partial
    of a segment has nothing before it (``stable_chars`` 0). Every other event is written whole.
    """

    def __init__(self, out: IO[str], partials: str = "full", version: int | None = None) -> None:
        """`version`: a wire version written first in every record (`"v"`; the server's)."""
        self.out = out
        self.partials = partials
        self._stamp: dict[str, object] = {} if version is None else {"v": version}
        self._source = ""
        self._previous: Partial | None = None

    def begin(self, source: str) -> None:
        self._source = source
        self._previous = None

    def event(self, event: Event) -> None:
        if self.partials == "delta" and isinstance(event, Partial):
            self.write_record({**self._stamp, "source": self._source, **self._delta(event)})
            return
        self.write_record({**self._stamp, "source": self._source, **event.to_dict()})

    def _delta(self, event: Partial) -> dict[str, object]:
        previous = self._previous
        if previous is None or previous.segment != event.segment:
            previous = Partial(seq=0, audio_s=0.0, wall_s=0.0, segment=event.segment, text="")
        self._previous = event
        stable_chars = shared_prefix_len(previous.text, event.text, False)
        stable_tokens = min(
            shared_prefix_len(previous.tokens, event.tokens, False),
            shared_prefix_len(previous.token_times_s, event.token_times_s, False),
        )
        # built field by field: to_dict would copy every token of the whole hypothesis
        return dict(
            type=event.kind,
            seq=event.seq,
            audio_s=event.audio_s,
            wall_s=event.wall_s,
            segment=event.segment,
            stable_chars=stable_chars,
            text_tail=event.text[stable_chars:],
            stable_tokens=stable_tokens,
            tokens_tail=list(event.tokens[stable_tokens:]),
            token_times_s_tail=list(event.token_times_s[stable_tokens:]),
        )

    def end(self, summary: StreamSummary) -> None:
        self.write_record(
            {
                **self._stamp,
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
                "skipped_s": round(summary.skipped_s, 6),
                **_waits(summary),
            }
        )

    def write_record(self, record: dict[str, object]) -> None:
        """Write one record as its line (a transport may keep the record instead)."""
        self.out.write(jsonl_line(record) + "\n")
        self.out.flush()


def _waits(summary: StreamSummary) -> dict[str, object]:
    """A served utterance's step waits (none for a local stream: its steps never wait)."""
    if summary.align_wait_ms is None:
        return {}
    return {"align_wait_ms": summary.align_wait_ms, "align_wait_max_ms": summary.align_wait_max_ms}


def jsonl_line(record: dict[str, object]) -> str:
    """One record as one JSON line (without its newline), text escaped as JSONL keeps it."""
    try:
        line = json.dumps(record, ensure_ascii=False, allow_nan=False)
    except ValueError as exc:  # NaN or infinity: not JSON, and a reader would choke
        raise StreamAsrError(
            f"refusing to write a {record.get('type')} record holding a number that is "
            "not a finite number (NaN or infinity): JSON has no such numbers"
        ) from exc
    return json_escaped(line)


class SubtitleRenderer:
    """SRT or WebVTT cues from finals, written as each final is committed (live, not at the
    end). Cues follow subtitle practice (captions.CueRules: two lines of 42 characters, 0.8
    to 7 s, 20 characters/s at most), split between words by their times, never overlapping;
    a final's last cue may extend into the silence up to the audio read when the final was
    committed (the next utterance cannot start before that). In a WebVTT each input's cues
    follow a NOTE naming it (its base name: no folder of this machine), numbered from 1 again
    (SRT has no comments: for several inputs the file command asks for --output-dir).
    `quiet`: no summary lines. `stats`: the current input's cues, and how many the speech
    made break a rule (`note()` says so)."""

    def __init__(
        self, out: IO[str], err: Console, realtime: bool, vtt: bool = False, quiet: bool = False,
        rules: CueRules | None = None,
    ) -> None:
        self.out = out
        self.err = err
        self.realtime = realtime
        self.vtt = vtt
        self.quiet = quiet
        self.rules = rules or CueRules()
        self.stats = CueStats()
        self._index = 0
        self._last_end_s = 0.0
        self._inputs = 0

    def begin(self, source: str) -> None:
        if self.vtt and self._inputs == 0:
            self.out.write("WEBVTT\n\n")
        if self.vtt and source:  # the input's base name: no folder of this machine published
            self.out.write(f"NOTE {_cue_text(PurePath(source).name or source)}\n\n")
        self._inputs += 1
        self._index = 0
        self._last_end_s = 0.0
        self.stats = CueStats()

    def event(self, event: Event) -> None:
        if not isinstance(event, Final) or not event.text.strip():
            return
        separator = "." if self.vtt else ","
        words = [replace(w, text=_cue_text(w.text)) for w in event.words or _even_words(event)]
        words = [w for w in words if w.text]
        free_until_s = max(event.end_s, event.audio_s)
        cues = cues_of(words, self._last_end_s, self.rules, free_until_s)
        self.stats.count(cues, self.rules, len(words))
        for cue in cues:
            self._index += 1
            start, end = caption_time(cue.start_s, separator), caption_time(cue.end_s, separator)
            self.out.write(f"{self._index}\n{start} --> {end}\n" + "\n".join(cue.lines) + "\n\n")
            self._last_end_s = cue.end_s
        self.out.flush()

    def end(self, summary: StreamSummary) -> None:
        if not self.quiet:
            self.err.print(escape(summary_line(summary, self.realtime)), highlight=False)
            note = self.note()
            if note:
                self.err.print(escape(f"{summary.source}: {note}"), highlight=False)

    def note(self) -> str:
        """The cues of this input that break a caption rule, in one sentence ('' if none)."""
        return self.stats.note(self.rules)


class SentenceCaseRenderer:
    """Finals in sentence case ('The right time to act') for all-caps models that have no
    punctuation model; everything else passes through unchanged."""

    def __init__(self, inner: Renderer) -> None:
        self.inner = inner

    def begin(self, source: str) -> None:
        self.inner.begin(source)

    def event(self, event: Event) -> None:
        if isinstance(event, Final) and event.text:
            text = sentence_case(event.text)
            event = replace(event, text=text, words=respelled(event.words, text))
        self.inner.event(event)

    def end(self, summary: StreamSummary) -> None:
        self.inner.end(summary)


class PunctuationRenderer:
    """Finals punctuated and cased by a punctuation model (`punctuate(text) -> text`, word
    for word); each word of `words` takes its new spelling when the count is unchanged.
    Partials pass through untouched: the model sees only committed text."""

    def __init__(self, inner: Renderer, punctuate: Callable[[str], str]) -> None:
        self.inner = inner
        self.punctuate = punctuate

    def begin(self, source: str) -> None:
        self.inner.begin(source)

    def event(self, event: Event) -> None:
        if isinstance(event, Final) and event.text.strip():
            text = self.punctuate(event.text)
            event = replace(event, text=text, words=respelled(event.words, text))
        self.inner.event(event)

    def end(self, summary: StreamSummary) -> None:
        self.inner.end(summary)


def _even_words(final: Final) -> tuple[Word, ...]:
    """Words spread evenly over the final, for engines that give no token times."""
    return even_words(split_words(final.text), final.start_s, final.end_s)


def _cue_text(text: str) -> str:
    """A word or note of a caption file: printable, on one line, never a cue's time arrow."""
    return " ".join(printable(text).replace("-->", "->").split())


def text_header(source: str) -> str:
    """The line that introduces one input's text when there are several."""
    return f"==> {printable(source)} <==\n"


def escape(text: str) -> str:
    """Keep Rich from reading brackets in recognised text as markup, and the terminal from
    acting on control characters in it (`printable`)."""
    from rich.markup import escape as rich_escape

    return rich_escape(printable(text))


@dataclass(frozen=True)
class RenderTarget:
    """Where and how a renderer writes: data to `out` (None: standard output), messages
    and summary lines to `err`; `headers`: several inputs share the output."""

    out: IO[str] | None
    err: Console
    realtime: bool = False
    partials: str = "full"
    quiet: bool = False
    headers: bool = False
    cues: CueRules = CueRules()  # what subtitle cues keep to (srt, vtt)


@dataclass(frozen=True)
class RendererEntry:
    """One output format: its name (--format), what it makes, and its help."""

    name: str
    help: str
    make: Callable[[RenderTarget], Renderer]
    #: draws on the terminal itself (a live area): no progress bar beside it
    terminal: bool = False
    #: the extension of the file `file -o DIR` writes in this format; None: no file format
    suffix: str | None = None


def _stdout(target: RenderTarget) -> IO[str]:
    return sys.stdout if target.out is None else target.out


#: Every output format, in the order --format's help lists them.
RENDERERS: dict[str, RendererEntry] = {
    entry.name: entry
    for entry in (
        RendererEntry(
            "live", "terminal default",
            lambda t: LiveRenderer(Console(file=t.out), t.err, t.realtime, quiet=t.quiet),
            terminal=True,
        ),
        RendererEntry(
            "text", "one line per final; default when piped",
            lambda t: TextRenderer(_stdout(t), t.err, t.realtime, t.headers, t.quiet),
            suffix="txt",
        ),
        RendererEntry(
            "jsonl", "every event", lambda t: JsonlRenderer(_stdout(t), t.partials),
            suffix="jsonl",
        ),
        RendererEntry(
            "srt", "subtitles",
            lambda t: SubtitleRenderer(_stdout(t), t.err, t.realtime, quiet=t.quiet, rules=t.cues),
            suffix="srt",
        ),
        RendererEntry(
            "vtt", "WebVTT subtitles",
            lambda t: SubtitleRenderer(
                _stdout(t), t.err, t.realtime, vtt=True, quiet=t.quiet, rules=t.cues
            ),
            suffix="vtt",
        ),
    )
}
FORMATS = tuple(RENDERERS)


def formats_help() -> str:
    """--format's help, from the table: 'live (terminal default), text (...), ...'."""
    return ", ".join(RENDERERS) + "; default live on a terminal, text when piped."

