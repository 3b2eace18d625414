"""Which option an unknown one may have meant: the options close to it by name, or none.

Why: Click compares whole spellings, dashes included, so the shared `--` and a letter made
`--bogus` "close" to `--gpu` and `--verbose`; a suggestion that far off sends a person to
the wrong option. Here the names are compared without their dashes, with a cutoff that a
typo (`--modl`, `--prot`, `--chunks`) passes and an unrelated word does not, and a name the
typed one begins (`--rule` -> `--rule1`, `--rule2`, `--rule3`) is offered too.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

#: difflib's similarity ratio a name must reach (a one-letter slip in a 4-letter name: 0.75).
CUTOFF = 0.75
#: The most names offered.
MOST = 3
#: The shortest start of a name that is offered the names it begins.
PREFIX_MIN = 3


def close_options(typed: str, options: Iterable[str]) -> list[str]:
    """The long options of `options` that `typed` (`--modl`, `--modl=x`) may have meant."""
    word = typed.split("=", 1)[0].lstrip("-").lower()
    names = {option.lstrip("-").lower(): option for option in options if option.startswith("--")}
    if not word:
        return []
    scored = sorted((-difflib.SequenceMatcher(None, word, name).ratio(), name) for name in names)
    close = [name for score, name in scored if -score >= CUTOFF]
    if len(word) >= PREFIX_MIN:
        close += sorted(name for name in names if name.startswith(word) and name not in close)
    return [names[name] for name in close[:MOST]]


def did_you_mean(close: list[str]) -> str:
    """' (did you mean --rule1, --rule2 or --rule3?)', or '' for none."""
    if not close:
        return ""
    listed = ", ".join(close[:-1]) + " or " + close[-1] if len(close) > 1 else close[0]
    return f" (did you mean {listed}?)"
