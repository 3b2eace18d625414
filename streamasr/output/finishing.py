"""The finishing chain: what happens to a session's events between the source and the renderer.

Why one chain: a final is punctuated or sentence-cased the same way whether it was decoded
here, by a `streamasr serve` elsewhere, on a Ray task or inside the server for its own
sessions, so every source works with every renderer and every output format. The source
hands typed events (streamasr.session.events); the chain rewrites finals (text and words);
the renderer writes them. Partials pass through: only committed text is finished.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from streamasr.output.render import PunctuationRenderer, Renderer, SentenceCaseRenderer

if TYPE_CHECKING:
    from streamasr.output.punctuation import Punctuator

log = logging.getLogger("streamasr")


@dataclass(frozen=True)
class Finishing:
    """The finishing steps asked for: a loaded punctuation model (it also restores case, so
    it wins over sentence case) or sentence case, or neither."""

    punctuate: Callable[[str], str] | None = None
    sentence_case: bool = False

    @property
    def active(self) -> bool:
        """Whether any step rewrites finals."""
        return self.punctuate is not None or self.sentence_case


NONE = Finishing()


def load_finishing(punctuate: str | None, sentence_case: bool) -> Finishing:
    """--punctuate MODEL and --sentence-case as a Finishing; the punctuation model is loaded
    here (before the speech model, so a missing or damaged folder fails in a second)."""
    punctuator = load_punctuator(punctuate, sentence_case)
    if punctuator is not None:
        return Finishing(punctuate=punctuator.punctuate)
    return Finishing(sentence_case=sentence_case)


def load_punctuator(value: str | None, sentence_case: bool) -> Punctuator | None:
    """The punctuation model `--punctuate` names; with --sentence-case too, one warning says
    the model's own casing wins."""
    if value is None:
        return None
    from streamasr.output import punctuation

    punctuator = punctuation.load(value)
    if sentence_case:
        log.warning("--sentence-case is ignored: the --punctuate model restores case itself")
    return punctuator


def finished(renderer: Renderer, finishing: Finishing) -> Renderer:
    """`renderer` behind the finishing steps: the one place they are put in front of one."""
    if finishing.punctuate is not None:
        return PunctuationRenderer(renderer, finishing.punctuate)
    if finishing.sentence_case:
        return SentenceCaseRenderer(renderer)
    return renderer
