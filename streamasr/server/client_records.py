"""The records a `streamasr serve` sends, read by its client: one clear ServerError for any
record that is not what the wire protocol says (docs/serve.md), never a KeyError or a
TypeError from deep inside the renderers.

Why: the client prints what it reads into output files; a record of the wrong shape (a
server of another version, a proxy's error page, a hostile server) must end the run with
what came before it kept, not crash it while a `.part` file is open.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import fields
from typing import Any

from streamasr.errors import StreamAsrError
from streamasr.session.events import (
    EVENT_TYPES,
    WIRE_VERSION,
    Event,
    StreamSummary,
    event_from_dict,
)


class ServerError(StreamAsrError):
    """The server could not be reached, refused the connection, closed it or sent what this
    client cannot read; says why."""


#: The summary record's numbers, each a JSON number (a bool is not one).
#: The largest number a record's time may be: integers up to it convert to a float exactly.
MAX_WHOLE_FLOAT = 2**53
SUMMARY_NUMBERS = ("audio_s", "compute_s", "wall_s")
OPTIONAL_NUMBERS = ("first_token_latency_s", "first_token_wall_latency_s")


def read_record(message: str | bytes) -> dict[str, Any]:
    """One message as a record: a JSON object with a string `type`."""
    try:
        record = json.loads(message)
    except (ValueError, UnicodeDecodeError) as exc:
        raise unreadable(f"not JSON ({exc})") from None
    except RecursionError:  # a few kB of `[[[[...`
        raise unreadable("JSON nested deeper than a record can be") from None
    if not isinstance(record, dict):
        raise unreadable(f"a JSON {type(record).__name__}, not an object")
    if not isinstance(record.get("type"), str):
        raise unreadable("a record without a string 'type'")
    return record


def unreadable(why: str) -> ServerError:
    return ServerError(f"the server sent a record this client cannot read: {why}")


def event_from_record(record: dict[str, Any]) -> Event:
    """An event object from one JSON record the server (or `file --format jsonl`) wrote; a
    record of a later wire version than this client reads is refused, not misread."""
    version = record.get("v", WIRE_VERSION)
    if not _whole(version):
        raise unreadable("a record whose wire version 'v' is not a whole number")
    if version > WIRE_VERSION:
        shown = version if version < 1000 else "a later one"  # not 4000 digits on a line
        raise ServerError(
            f"the server sends events of wire version {shown}; this client reads up to "
            f"{WIRE_VERSION}: upgrade streamasr here (pip install -U streamasr)"
        )
    cls = EVENT_TYPES.get(record["type"])
    if cls is not None:
        _check_fields(cls, record)
    try:
        return event_from_dict(record)
    except (ValueError, TypeError, IndexError) as exc:
        raise unreadable(str(exc)) from None


def _check_fields(cls: type[Event], record: dict[str, Any]) -> None:
    """Each field the record gives has its field's JSON type (the renderers trust them)."""
    for item in fields(cls):
        if item.name not in record:
            continue
        check = FIELD_CHECKS.get(str(item.type))
        if check is not None and not check(record[item.name]):
            raise unreadable(f"a {cls.kind} whose {item.name!r} is not of type {item.type}")


def summary_from_record(record: dict[str, Any], finals: Iterable[Any]) -> StreamSummary:
    """The summary object from the server's summary record and the finals seen before it."""
    for key in SUMMARY_NUMBERS:
        if not _number(record.get(key)):
            raise unreadable(f"a summary whose {key!r} is not a number")
    for key in OPTIONAL_NUMBERS:
        if record.get(key) is not None and not _number(record[key]):
            raise unreadable(f"a summary whose {key!r} is not a number")
    for key in ("source", "text"):
        if not isinstance(record.get(key), str):
            raise unreadable(f"a summary whose {key!r} is not a string")
    revisions = record.get("revisions", 0)
    if not isinstance(revisions, int) or isinstance(revisions, bool):
        raise unreadable("a summary whose 'revisions' is not a whole number")
    return StreamSummary(
        source=record["source"],
        audio_s=record["audio_s"],
        compute_s=record["compute_s"],
        wall_s=record["wall_s"],
        text=record["text"],
        finals=tuple(finals),
        first_token_latency_s=record.get("first_token_latency_s"),
        first_token_wall_latency_s=record.get("first_token_wall_latency_s"),
        revisions=revisions,
    )


def _number(value: object) -> bool:
    """A JSON number a time can be: finite (Python's reader takes NaN and Infinity, which no
    JSONL line or subtitle can hold) and within +-2**53 (an integer beyond converts to a
    float inexactly, and 1e308 s overflows the millisecond arithmetic of subtitles)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return -MAX_WHOLE_FLOAT <= value <= MAX_WHOLE_FLOAT  # NaN fails both comparisons


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _list_of(check: Callable[[object], bool]) -> Callable[[object], bool]:
    return lambda value: isinstance(value, list) and all(check(item) for item in value)


def _word(value: object) -> bool:
    return (isinstance(value, dict) and isinstance(value.get("text"), str)
            and _number(value.get("start_s")) and _number(value.get("end_s")))  # fmt: skip


def _text(value: object) -> bool:
    return isinstance(value, str)


#: What a field of each annotation (as events.py writes it) must be in JSON.
FIELD_CHECKS: dict[str, Callable[[object], bool]] = {
    "int": _whole,
    "float": _number,
    "str": _text,
    "float | None": lambda value: value is None or _number(value),
    "Sequence[str]": _list_of(_text),
    "tuple[str, ...]": _list_of(_text),
    "Sequence[float]": _list_of(_number),
    "tuple[float, ...]": _list_of(_number),
    "tuple[Word, ...]": _list_of(_word),
}
