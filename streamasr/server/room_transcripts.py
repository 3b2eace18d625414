"""A room's transcripts (txt, srt, vtt), rendered off the event loop and kept.

Rendering a long room's finals costs tens of milliseconds of Python; done on the event loop
for each download it delayed every room's captions. A rendering is kept per room, format
and last room_seq, so repeated downloads of an unchanged room cost nothing, and a new one
is made in a worker thread.
"""

from __future__ import annotations

import asyncio
import dataclasses
import io
from collections import OrderedDict
from typing import Any

#: Renderings kept (room, format, last room_seq); the oldest goes first.
KEPT = 64
_kept: OrderedDict[tuple[str, str, int, int], bytes] = OrderedDict()
_making: dict[tuple[str, str, int, int], asyncio.Future[bytes]] = {}


async def rendered(name: str, last_seq: int, finals: list[dict[str, Any]], fmt: str) -> bytes:
    """The room's transcript as bytes: a kept one, else made once in a thread however many
    ask at the same time."""
    key = (name, fmt, last_seq, len(finals))
    if key in _kept:
        _kept.move_to_end(key)
        return _kept[key]
    making = _making.get(key)
    if making is None:
        making = asyncio.ensure_future(asyncio.to_thread(_encoded, finals, fmt))
        _making[key] = making
        try:
            body = await making
        finally:
            _making.pop(key, None)
        _kept[key] = body
        while len(_kept) > KEPT:
            _kept.popitem(last=False)
        return body
    return await asyncio.shield(making)


def _encoded(finals: list[dict[str, Any]], fmt: str) -> bytes:
    return transcript(finals, fmt).encode("utf-8")


def transcript(finals: list[dict[str, Any]], fmt: str) -> str:
    """Finals as `streamasr file --format FMT` writes them (the same cue rules)."""
    from rich.console import Console

    from streamasr.output.render import SubtitleRenderer, TextRenderer
    from streamasr.server.client import event_from_record
    from streamasr.session.events import Final
    from streamasr.text.captions import Word

    out = io.StringIO()
    quiet = Console(file=io.StringIO())
    renderer: TextRenderer | SubtitleRenderer
    if fmt == "txt":
        renderer = TextRenderer(out, quiet, realtime=False, quiet=True)
    else:
        renderer = SubtitleRenderer(out, quiet, realtime=False, vtt=fmt == "vtt", quiet=True)
    renderer.begin("")
    for record in finals:
        words = tuple(Word(**word) for word in record.get("words", ()))
        final = event_from_record({**record, "words": []})
        if words and isinstance(final, Final):
            final = dataclasses.replace(final, words=words)
        renderer.event(final)
    if fmt == "vtt" and not out.getvalue():
        return "WEBVTT\n\n"
    return out.getvalue()
