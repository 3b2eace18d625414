"""The caption options (`--cue-*`) shared by the commands that write SRT or WebVTT.

Why: each limit of a subtitle cue (captions.CueRules) is one option, defined here once. A
command asks for them with a decorator and takes one parameter, `cue_rules: CueRules`, as
`commands/options.py` does for the model options:

    @app.command("file")
    @with_cue_options()
    def file_command(paths: ..., cue_rules: CueRules) -> None: ...

Each value is checked against its range (captions.*_RANGE) before any audio or model work:
a bad one is one line and exit 2.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from streamasr.backends.options import Setting
from streamasr.commands.common import with_settings
from streamasr.errors import UsageError
from streamasr.text import captions
from streamasr.text.captions import CueRules

F = TypeVar("F", bound=Callable[..., Any])

_SETTINGS = (
    Setting("line_chars", "--cue-line-chars", "Most characters on a cue line.",
            captions.LINE_CHARS_RANGE, "characters"),
    Setting("lines", "--cue-lines", "Most lines in a cue.", captions.LINES_RANGE, "lines"),
    Setting("max_s", "--cue-max-s", "Longest time a cue stays up.",
            captions.MAX_CUE_S_RANGE, "s"),
    Setting("min_s", "--cue-min-s", "Shortest time a cue stays up.",
            captions.MIN_CUE_S_RANGE, "s"),
    Setting("max_cps", "--cue-max-cps", "Fastest reading speed (chars/s).",
            captions.MAX_CPS_RANGE, "characters/s"),
    Setting("min_words", "--cue-min-words", "Fewest words in a cue (no orphans).",
            captions.MIN_WORDS_RANGE, "words"),
)  # fmt: skip


def cue_rules(**values: Any) -> CueRules:
    """The rules from the options' values, each checked against its range (UsageError)."""
    for setting in _SETTINGS:
        setting.check(values[setting.field])
    rules = CueRules(**values)
    if rules.min_s > rules.max_s:
        raise UsageError(
            f"--cue-min-s {rules.min_s:g} is longer than --cue-max-s {rules.max_s:g}; "
            "a cue cannot be both"
        )
    return rules


def with_cue_options() -> Callable[[F], F]:
    """Add the `--cue-*` options where the command's `cue_rules` parameter stands."""
    return with_settings("cue_rules", _SETTINGS, CueRules(), cue_rules)
