"""Accuracy, latency and stability figures of one utterance, and their percentiles.

Everything here is pure arithmetic on texts and events, so it can be checked by hand:

- Text normalisation (both reference and hypothesis): Unicode NFKC, case folded to lower
  case, curly apostrophes made straight, every punctuation character (Unicode category P*)
  replaced by a space except an apostrophe between two letters ("don't" stays one word),
  whitespace collapsed.
- WER counts whitespace-separated words; CER counts every character of the normalised text
  except whitespace (so it suits Chinese and Japanese, where words are not spaced). MER, the
  mixed error rate of Chinese-English speech, counts each CJK character and each
  whitespace-separated run of other characters (an English word) as one unit.
  Edit distance, substitutions, deletions and insertions come from jiwer.
- First-token latency = audio time when the first non-empty partial appeared minus the speech
  onset. It is never negative: text shown before the onset (the span came from a detector
  that missed the start, or the model spoke on noise) gives 0 with `text_before_onset` set,
  and such utterances are counted and left out of the percentiles. End-of-speech-to-final
  latency = audio time of the last final minus the speech end.
  The wall-clock forms use the events' wall time instead; they mean what a user waits only
  under real-time pacing (`--realtime`). Text-complete latency = audio time when the last
  final's text was first shown whole (as a partial) minus the speech end: the model's own
  delay on the last word, without the endpoint rule's wait.
- A revision is a partial that does not extend what was shown before in the same segment;
  the words it changed are the shown words after the longest common word prefix.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from streamasr.session.events import Endpoint, Event, Final, FirstToken, Partial
from streamasr.text.tokens import is_cjk

if TYPE_CHECKING:
    from streamasr.backends.base import BackendInfo

METRICS = ("wer", "cer", "mer")
PERCENTILES = (50, 90, 99)
_SPACES = re.compile(r"\s+")
_APOSTROPHES = str.maketrans({"\u2019": "'", "\u2018": "'", "\u02bc": "'"})


def normalize_text(text: str) -> str:
    """The documented normalisation applied to references and hypotheses before scoring."""
    text = unicodedata.normalize("NFKC", text).translate(_APOSTROPHES).casefold()
    out: list[str] = []
    for index, char in enumerate(text):
        if unicodedata.category(char).startswith("P"):
            inside_word = (
                char == "'"
                and 0 < index < len(text) - 1
                and text[index - 1].isalnum()
                and text[index + 1].isalnum()
            )
            out.append(char if inside_word else " ")
        else:
            out.append(char)
    return _SPACES.sub(" ", "".join(out)).strip()


def scoring_units(text: str, metric: str) -> list[str]:
    """Words (wer), non-space characters (cer), or CJK characters and other words (mer)."""
    normalized = normalize_text(text)
    if metric == "wer":
        return normalized.split()
    if metric == "cer":
        return [c for c in normalized if not c.isspace()]
    if metric == "mer":
        units: list[str] = []
        for word in normalized.split():
            run = ""
            for char in word:
                if is_cjk(char):
                    if run:
                        units.append(run)
                        run = ""
                    units.append(char)
                else:
                    run += char
            if run:
                units.append(run)
        return units
    raise ValueError(f"unknown metric {metric!r}; use one of {', '.join(METRICS)}")


@dataclass(frozen=True)
class ErrorCounts:
    """Edit-distance counts of one utterance or a whole set."""

    ref_units: int = 0
    substitutions: int = 0
    deletions: int = 0
    insertions: int = 0

    @property
    def errors(self) -> int:
        """Substitutions + deletions + insertions."""
        return self.substitutions + self.deletions + self.insertions

    @property
    def rate_pct(self) -> float | None:
        """Errors per reference unit in percent; None for an empty reference with insertions."""
        if self.ref_units == 0:
            return 0.0 if self.errors == 0 else None
        return 100.0 * self.errors / self.ref_units

    def __add__(self, other: ErrorCounts) -> ErrorCounts:
        return ErrorCounts(
            self.ref_units + other.ref_units,
            self.substitutions + other.substitutions,
            self.deletions + other.deletions,
            self.insertions + other.insertions,
        )


def score(reference: str, hypothesis: str, metric: str) -> ErrorCounts:
    """Edit-distance counts between a reference and a hypothesis after normalisation."""
    import jiwer

    ref = scoring_units(reference, metric)
    hyp = scoring_units(hypothesis, metric)
    if not ref and not hyp:
        return ErrorCounts()
    # Units never contain spaces, so joining with spaces lets jiwer split them back exactly.
    result = jiwer.process_words(" ".join(ref), " ".join(hyp))
    return ErrorCounts(len(ref), result.substitutions, result.deletions, result.insertions)


def total_counts(counts: Iterable[ErrorCounts]) -> ErrorCounts:
    """Corpus-level counts: the rate is total errors over total reference units."""
    total = ErrorCounts()
    for item in counts:
        total = total + item
    return total


def percentiles(values: Sequence[float], points: Sequence[int] = PERCENTILES) -> dict[str, float]:
    """p50/p90/p99 (numpy's linear interpolation); empty when there are no values."""
    if not values:
        return {}
    found = np.percentile(np.asarray(values, dtype=np.float64), list(points))
    return {f"p{p}": round(float(v), 3) for p, v in zip(points, found, strict=True)}


@dataclass(frozen=True)
class Timing:
    """Latency figures of one utterance in milliseconds (None: not defined for it)."""

    first_token_ms: float | None = None
    first_token_wall_ms: float | None = None
    final_ms: float | None = None
    final_wall_ms: float | None = None
    final_cause: str = "none"  # "endpoint", "end_of_input" or "none" (no text)
    complete_ms: float | None = None  # speech end -> the last segment's text fully shown
    text_before_onset: bool = False  # text came before the onset: first_token_ms clamped to 0


def timing(events: Sequence[Event], onset_s: float | None, end_s: float | None) -> Timing:
    """Latencies from a stream's events and the speech span (see the module docstring)."""
    first: FirstToken | Partial | None = next(
        (e for e in events if isinstance(e, FirstToken)), None
    )
    if first is None:
        first = next((e for e in events if isinstance(e, Partial) and e.text), None)
    finals = [(i, e) for i, e in enumerate(events) if isinstance(e, Final)]
    first_ms = first_wall_ms = final_ms = final_wall_ms = complete_ms = None
    cause = "none"
    early = False
    if first is not None and onset_s is not None:
        early = first.audio_s < onset_s
        first_ms = _ms(max(0.0, first.audio_s - onset_s))
        first_wall_ms = _ms(max(0.0, first.wall_s - onset_s))
    if finals:
        index, last = finals[-1]
        before = events[index - 1] if index > 0 else None
        cause = "endpoint" if isinstance(before, Endpoint) else "end_of_input"
        shown = next(
            (
                e
                for e in events[:index]
                if isinstance(e, Partial) and e.segment == last.segment and e.text == last.text
            ),
            last,
        )
        if end_s is not None:
            final_ms = _ms(last.audio_s - end_s)
            final_wall_ms = _ms(last.wall_s - end_s)
            complete_ms = _ms(shown.audio_s - end_s)
    return Timing(first_ms, first_wall_ms, final_ms, final_wall_ms, cause, complete_ms, early)


def _ms(seconds: float) -> float:
    return round(seconds * 1000.0, 1)


@dataclass(frozen=True)
class Stability:
    """How much the partials of one utterance changed what had been shown."""

    revisions: int = 0
    revised_words: tuple[int, ...] = ()  # already-shown words each revision changed

    @property
    def revised_words_total(self) -> int:
        """All shown words that some revision changed."""
        return sum(self.revised_words)


def stability(events: Sequence[Event]) -> Stability:
    """Count revisions among partials, segment by segment (a final starts afresh)."""
    shown = ""
    changed: list[int] = []
    for event in events:
        if isinstance(event, Final):
            shown = ""
        elif isinstance(event, Partial):
            if shown and not event.text.startswith(shown):
                old, new = shown.split(), event.text.split()
                common = 0
                while common < min(len(old), len(new)) and old[common] == new[common]:
                    common += 1
                changed.append(len(old) - common)
            shown = event.text
    return Stability(len(changed), tuple(changed))


def model_metric(model_name: str, token_type: str) -> str:
    """WER, CER or MER by the model's language: the catalog's entry if the model is a known
    release (Chinese -> cer, Chinese+English -> mer), else its token type (what the backend
    declares in BackendInfo.token_type: cjkchar -> cer, cjkchar+bpe -> mer, else wer)."""
    try:
        from streamasr.distribution.catalog import find

        entry = find(model_name)
    except ImportError:  # pragma: no cover - catalog is part of the package
        entry = None
    if entry is not None:
        if "zh" in entry.language and "en" in entry.language:
            return "mer"
        return "cer" if "zh" in entry.language or "ja" in entry.language else "wer"
    if token_type == "cjkchar+bpe":
        return "mer"
    if token_type == "cjkchar":
        return "cer"
    return "wer"


def reference_metric(references: Iterable[str]) -> str:
    """cer when the references are CJK characters only, mer when they mix CJK characters
    and other words, else wer: what the text itself says when the model declares nothing."""
    cjk = other = 0
    for text in references:
        for word in text.split():
            if any(is_cjk(char) for char in word):
                cjk += 1
                if any(char.isalpha() and not is_cjk(char) for char in word):
                    other += 1
            elif any(char.isalnum() for char in word):
                other += 1
    if not cjk:
        return "wer"
    return "mer" if other else "cer"


def info_metric(
    info: BackendInfo, model: str | None = None, references: Iterable[str] | None = None
) -> str:
    """The metric for a loaded model: by its language when it declares one (a catalog name the
    user gave or the loaded model's own, or a CJK token type); otherwise, given the references,
    by what they are written in (a Chinese test set scored on a byte-level model is CER);
    else wer."""
    from streamasr.distribution.catalog import find

    name = model if model is not None and find(model) is not None else info.model_name
    declares = find(name) is not None or info.token_type in ("cjkchar", "cjkchar+bpe")
    if not declares and references is not None:
        return reference_metric(references)
    return model_metric(name, info.token_type)
