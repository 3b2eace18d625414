"""Events the streaming loop yields. Frozen, with units in field names.

Every event carries `seq` (strictly increasing within a stream), `audio_s` (seconds of audio
fed so far) and `wall_s` (monotonic seconds since the stream started).

The same objects come from every source: the local engine, a `streamasr serve` session (its
JSON records read back by `event_from_dict`), a Ray task or the library.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields, is_dataclass
from typing import TYPE_CHECKING, Any, ClassVar, TypeGuard

from streamasr.text.captions import Word, words_of
from streamasr.text.prefix import Prefix
from streamasr.text.printable import shown
from streamasr.text.tokens import split_words

if TYPE_CHECKING:
    from _typeshed import DataclassInstance


def _is_record(value: object) -> TypeGuard[DataclassInstance]:
    return is_dataclass(value) and not isinstance(value, type)


#: The version of the event records `streamasr serve` sends (`"v"` in each record): a
#: reader refuses records of a later version instead of misreading them. Version 1: the
#: records of `streamasr file --format jsonl` (Event.to_dict, words as objects).
WIRE_VERSION = 1


@dataclass(frozen=True)
class Event:
    """Common fields of every event."""

    kind: ClassVar[str] = "event"
    seq: int
    audio_s: float
    wall_s: float
    segment: int

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict with the event kind first.

        Field by field, not `asdict`: that deep-copies every token of a partial one by one,
        and a partial of a long utterance holds thousands.
        """
        data: dict[str, Any] = {"type": self.kind}
        for item in fields(self):
            value = getattr(self, item.name)
            if isinstance(value, (tuple, Prefix)):
                nested = bool(value) and _is_record(value[0])
                value = [asdict(v) for v in value] if nested else list(value)
            elif _is_record(value):
                value = asdict(value)
            data[item.name] = value
        return data


@dataclass(frozen=True)
class Partial(Event):
    """The current hypothesis of the open segment; may still change."""

    kind: ClassVar[str] = "partial"
    text: str
    # a tuple, or an O(1) snapshot of the segment's tokens that behaves as one (equal to,
    # hashing and pickling as the tuple of its items: streamasr.text.prefix)
    tokens: Sequence[str] = ()
    token_times_s: Sequence[float] = ()


@dataclass(frozen=True)
class FirstToken(Event):
    """The first non-empty partial of a segment: the moment a user first sees text."""

    kind: ClassVar[str] = "first_token"
    text: str
    onset_s: float  # where the latency is measured from (audio time); see onset_source
    latency_s: float  # algorithmic first-token latency: audio_s - onset_s, never negative
    # wall_s - onset_s: the user's wait, so only under real-time pacing (None otherwise)
    wall_latency_s: float | None = None
    # "detected": the onset detector's; "segment_start": no onset detected yet, the engine's
    # segment start instead; "text_before_onset": that start lies after the text (inside
    # the tail padding), so the latency is clamped at 0
    onset_source: str = "detected"


@dataclass(frozen=True)
class Endpoint(Event):
    """The open utterance ended; the core decides, the same for every engine.

    `rule_hint` names the rule that fired: "rule2" (trailing silence after speech reached
    --rule2), "rule3" (the utterance reached --rule3 s), "rule1" (trailing silence without
    speech reached --rule1; it ends no text, so it is rarely seen), "eou" (the model emitted
    its end-of-utterance token), "vad" or "vad_gate" (the voice activity detector; vad.py).
    """

    kind: ClassVar[str] = "endpoint"
    rule_hint: str = ""


@dataclass(frozen=True)
class Final(Event):
    """Committed text of a segment; never changes. start/end are in audio time."""

    kind: ClassVar[str] = "final"
    text: str
    start_s: float
    end_s: float
    tokens: tuple[str, ...] = ()
    token_times_s: tuple[float, ...] = ()
    # words (CJK characters one by one) with start/end, built from the tokens' times when not
    # given (captions.words_of says how)
    words: tuple[Word, ...] = ()

    def __post_init__(self) -> None:
        if not self.words and self.tokens and len(self.token_times_s) == len(self.tokens):
            # only where the pieces spell the text's words (tokens.split_words: the one rule)
            words = words_of(self.tokens, self.token_times_s, self.end_s)
            if [word.text for word in words] == split_words(self.text):
                object.__setattr__(self, "words", words)


@dataclass(frozen=True)
class StreamSummary:
    """What one stream produced, for the per-file summary line and for bench."""

    source: str
    audio_s: float
    compute_s: float
    wall_s: float
    text: str
    finals: tuple[Final, ...] = field(default_factory=tuple)
    first_token_latency_s: float | None = None  # None: no text was ever shown
    first_token_wall_latency_s: float | None = None  # only under real-time pacing
    revisions: int = 0
    skipped_s: float = 0.0  # input the VAD gate (--vad-gate) kept from the recogniser
    # serve only: how long the steps waited to start once due (mean, longest; ms)
    align_wait_ms: float | None = None
    align_wait_max_ms: float | None = None

    @property
    def rtf(self) -> float:
        """Compute seconds per audio second (0 for empty audio)."""
        return self.compute_s / self.audio_s if self.audio_s > 0 else 0.0


EVENT_TYPES: dict[str, type[Event]] = {
    cls.kind: cls for cls in (Partial, FirstToken, Endpoint, Final)
}


def event_from_dict(record: dict[str, Any]) -> Event:
    """The event object one JSON record (`Event.to_dict`, a server's message) describes:
    lists back to tuples, words back to Word objects. Keys it does not know are ignored
    (`source`, `v`); ValueError for an unknown type or a record that does not fit."""
    kind = record.get("type", "")
    cls = EVENT_TYPES.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise ValueError(f"unknown event type {shown(kind)}")
    try:
        return cls(**_values(cls, record))
    except (TypeError, KeyError, ValueError, OverflowError) as exc:  # Overflow: float(10**400)
        raise ValueError(f"a {cls.kind} record that does not fit: {str(exc)[:120]}") from None


def _values(cls: type[Event], record: dict[str, Any]) -> dict[str, Any]:
    names = {f.name for f in fields(cls)}
    values = {key: value for key, value in record.items() if key in names}
    for key, value in values.items():
        if key == "words":
            values[key] = tuple(
                Word(str(w["text"]), float(w["start_s"]), float(w["end_s"])) for w in value
            )
        elif isinstance(value, list):
            values[key] = tuple(value)
    return values
